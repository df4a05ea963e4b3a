#!/usr/bin/env bash
# WebRTC viewers on shaped links, and what they cost. One headless Chromium viewer plays the edge
# ladder (live/edge: 2 M / 1 M / 500 k / 250 k) over WHEP from the node's own player page, first
# on the step (wide → 1.3 Mbit/s → 650 kbit/s → wide), then on windows of the bundled 3G traces,
# one link at a time: tc htb on the node's UDP port inside a network namespace made for the run
# (a veth pair, so Chromium gathers a candidate). Chromium's getStats says what it received,
# decoded, froze and dropped, and when its pictures played against the node's clock; the node's
# log says when it moved the viewer. The oracle is the edge benchmark's (`abr-worker simulate` on
# the same windows and the ladder's own segments), once more on each window less the audio's rate
# on the wire as the viewer received it (the oracle sends video alone). Then the cost: N aiortc viewers of the top
# against N RTSP/TCP players of the top, the node's CPU over the same phase length.
#
#   Benchmarks/webrtc.sh [N]     (default 3 trace windows; ./abr bench webrtc runs it; needs root)
#
# Environment:
#   SECONDS_PER_WINDOW (default 120), START (seconds into each trace, default 60), MEAN (`own`, or
#   a mean in kbit/s each window is scaled to; default own), BURST (htb burst, bytes, default
#   16384), QUEUE (packets, default 100), VIEWERS (the cost phases' N, default 20; 0 skips them),
#   PHASE_SECONDS (default 30), COST_ROUNDS (rounds of the three cost phases, default 1; the report gives their medians), COST_LINKS (where the cost phases' viewers are, and so
#   where their kernel receive runs: `veth`, the default, `loopback`, or both; see cost_links), CLEAN_MINUTES (4
#   viewers on a wide link for that long, counting switches and dropped pictures; default 0:
#   skipped), CLEAN_STREAM (what those four play, default
#   live/edge_1: the top, adaptive; live/edge_3?abr=off pins 360p, which four software decoders
#   keep up with on a small machine), VIEWERS_PER_PROCESS (aiortc viewers to a process in the cost
#   phases, default 5: see webrtc-cost-viewers.py), STARTS (that many more links after the
#   windows: a start on the top whose link falls to START_RATE kbit/s, default 1900, as its first
#   picture shows, for START_SECONDS, default 15; default 0), WORKER (another abr-worker binary).
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/common.sh
windows=${1:-3}
seconds=${SECONDS_PER_WINDOW:-120}
start=${START:-60}
mean=${MEAN:-own}
burst=${BURST:-16384}
queue=${QUEUE:-100}
viewers=${VIEWERS:-20}
phase=${PHASE_SECONDS:-30}
# Rounds of the three cost phases (idle, WebRTC, RTSP), one after another: the encoders' own
# variation moves the whole node's figure by as much as the viewers cost (cost-18's idle phase
# read 0.06 cores more than cost-17's), so each round's viewers are counted against that round's
# idle phase, and the report gives the median of the rounds.
cost_rounds=${COST_ROUNDS:-1}
clean_minutes=${CLEAN_MINUTES:-0}
clean_stream=${CLEAN_STREAM:-live/edge_1}
starts=${STARTS:-0}
start_rate=${START_RATE:-1900}
start_seconds=${START_SECONDS:-15}
work=Benchmarks/work/webrtc
# One run at a time: a second one would write its links' logs into the same folder.
mkdir -p Benchmarks/work
exec 9>Benchmarks/work/webrtc.lock
flock -n 9 || { echo "webrtc.sh: another run is under way (Benchmarks/work/webrtc.lock)" >&2; exit 1; }
rm -rf "$work"
mkdir -p "$work/windows"
worker=$(realpath "$(benchmark_worker)")
clip=Benchmarks/work/source-720p30-20s.mp4
benchmark_source_clip "$clip"
edge_ladder_provision "$work/edge.json"
python=python3
[ -x .build/python/bin/python3 ] && python=$PWD/.build/python/bin/python3  # aiortc, installed by ./abr

namespace=abr-bench-webrtc-$$
ip netns add "$namespace"
cleanup() {
  for space in "$namespace" "$namespace-viewers"; do ip netns pids "$space" 2>/dev/null | xargs -r kill 2>/dev/null || true; done
  sleep 1
  for space in "$namespace" "$namespace-viewers"; do
    ip netns pids "$space" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$space" 2>/dev/null || true
  done
}
trap cleanup EXIT
inside() { ip netns exec "$namespace" "$@"; }
ip -n "$namespace" link set lo mtu 1500 up
ip -n "$namespace" link add abr-v0 type veth peer name abr-v1
ip -n "$namespace" addr add 10.77.0.1/24 dev abr-v0
ip -n "$namespace" addr add 10.77.0.2/24 dev abr-v1
ip -n "$namespace" link set abr-v0 up
ip -n "$namespace" link set abr-v1 up
ip -n "$namespace" route add default via 10.77.0.2 dev abr-v0
# Where the viewers are, and so where their kernel receive runs (COST_LINKS: `veth`, the default,
# `loopback`, or both).
# - `loopback`: in the node's namespace. The kernel delivers each packet to the receiving socket
#   inside the sender's send call (the softirq runs on the sending thread), so the node is charged
#   for the viewers' kernel receive too: per datagram for WebRTC, per TCP segment (a picture or
#   more) for RTSP. And the other way round: the node's TCP stack handling the players' ACKs (and
#   sending what they clock out) runs in the players' send calls, charged to them. Runs up to
#   cost-19 measured so.
# - `veth`: in a namespace of their own, joined to the node's by a veth pair whose two ends each
#   receive in a NAPI kernel thread of their own, as two hosts' NICs would. The node's figure is
#   its process and the thread that receives for it (the viewers' feedback, the players' ACKs);
#   the viewers' receive runs in theirs and is not counted. Both ends with a 64 KB MTU and TCP
#   segmentation offload off, so TCP hands the pair whole segments as it would a NIC with TSO,
#   and UDP segmentation offload on, as a NIC with USO (`SegmentedRuns`); GRO on, which is what
#   gives veth its NAPI threads (and UDP GRO forwarding, which lets segmented sends through them).
cost_links=${COST_LINKS:-veth}
# The node listens on its end of the pair, from the start: its own namespace (the Chromium viewer,
# the publisher, the `loopback` viewers) reaches that address over loopback, as before.
viewers_namespace=$namespace-viewers
node_address=10.79.0.1
ip netns add "$viewers_namespace"
ip -n "$viewers_namespace" link set lo up
ip link add abr-c0 netns "$namespace" type veth peer name abr-c1 netns "$viewers_namespace"
ip -n "$namespace" addr add $node_address/16 dev abr-c0
ip -n "$viewers_namespace" addr add 10.79.0.2/16 dev abr-c1
# The RTSP players' own addresses: the node lets one address hold 32 RTSP sessions.
for host in $(seq 1 $(( viewers < 250 ? viewers : 250 ))); do ip -n "$viewers_namespace" addr add 10.79.1.$host/16 dev abr-c1; done
for end in "$namespace abr-c0" "$viewers_namespace abr-c1"; do
  read -r space device <<<"$end"
  ip netns exec "$space" ethtool -K "$device" gro on rx-udp-gro-forwarding on tso off >/dev/null
  ip -n "$space" link set "$device" mtu 65000 up
  ip netns exec "$space" sh -c "echo 1 > /sys/class/net/$device/threaded"
done
rtsp=18554 http=18080 udp=18189
tc -n "$namespace" qdisc add dev lo root handle 1: htb default 10 r2q 1000
tc -n "$namespace" class add dev lo parent 1: classid 1:10 htb rate 10gbit
tc -n "$namespace" class add dev lo parent 1: classid 1:20 htb rate 100mbit ceil 100mbit burst "$burst" cburst "$burst"
# The queue counts packets as a router on the path would: the kernel hands the qdisc a segmented
# send (UDP GSO, TCP TSO) as one packet, so a token bucket far faster than any link cuts those into
# their packets before the pfifo (tbf segments what exceeds its burst).
tc -n "$namespace" qdisc add dev lo parent 1:20 handle 20: tbf rate 10gbit burst 1600 limit 100000
tc -n "$namespace" qdisc add dev lo parent 20:1 pfifo limit "$queue"
link_filter() {
  if [ "$1" = del ]; then tc -n "$namespace" filter del dev lo parent 1: prio 1; return; fi
  tc -n "$namespace" filter add dev lo parent 1: protocol ip prio 1 u32 match ip protocol 17 0xff match ip sport $udp 0xffff flowid 1:20
}
link_filter add
shape() { tc -n "$namespace" class change dev lo parent 1: classid 1:20 htb rate "${1}kbit" ceil "${1}kbit" burst "$burst" cburst "$burst"; }

ABR_WORKER_LOG_LEVEL=${ABR_WORKER_LOG_LEVEL:-debug} inside "$worker" serve --host $node_address --rtsp-port $rtsp --http-port $http \
  --webrtc-port $udp --rtmp-port=-1 --srt-port=-1 --data-dir "$PWD/$work/data" --status-interval 0 --no-load-shedding \
  --provision "$work/edge.json" >"$work/serve.out" 2>"$work/serve.log" &
node=$!
for _ in $(seq 1 100); do inside curl -sf http://$node_address:$http/v1/jobs >/dev/null && break; sleep 0.2; done
# By its command line (`inside` runs it in a subshell, so `$!` is not the node): whatever the binary is called.
node_pid=$(inside pgrep -f "$(basename "$worker") serve --host $node_address --rtsp-port $rtsp" | head -1 || true)
[ -n "$node_pid" ] || { echo "webrtc.sh: the node ($worker) did not start; see $work/serve.log" >&2; exit 1; }
inside ffmpeg -hide_banner -loglevel error -re -stream_loop -1 -i "$clip" -c copy -f rtsp -rtsp_transport tcp \
  rtsp://$node_address:$rtsp/live/edge_1 </dev/null >"$work/publisher.log" 2>&1 &
sleep 15  # every rung encoding, a few segments written (the oracle reads them)

# The links: the step, then the trace windows (written out for the oracle).
python3 - "$work" "$windows" "$seconds" "$start" "$mean" "$starts" "$start_rate" "$start_seconds" <<'PY' >"$work/links.json"
import json, os, sys
work, windows, seconds, start, mean = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
starts, start_rate, start_seconds = int(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8])
links = [{"name": "step", "rates": ([100000] * 10 + [1300] * 20 + [650] * 20 + [100000] * max(0, seconds - 50))[:max(seconds, 60)]}]
sys.path.insert(0, "Benchmarks")
from trace_windows import chosen, window
for name in chosen(windows):
    label, rates = window(work, name, start, seconds, mean)
    links.append({"name": label, "rates": [max(8, rate) for rate in rates]})
# Starts on the top whose link narrows to under it as the first picture shows (every link here
# begins wide until then): the catch-up does not fit, and the viewer is moved down within a second.
for number in range(1, starts + 1):
    links.append({"name": f"start {number} at {start_rate} k", "rates": [start_rate] * start_seconds})
print(json.dumps(links))
PY

# One Chromium viewer per link, the link changed every second; its stats every half second.
count=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))))" "$work/links.json")
echo "== $count links, one Chromium viewer each over WHEP, on live/edge (4 rungs)" >&2
for index in $(seq 0 $((count - 1))); do
  name=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[int(sys.argv[2])]['name'])" "$work/links.json" "$index")
  mapfile -t rates < <(python3 -c "import json,sys; print('\n'.join(map(str, json.load(open(sys.argv[1]))[int(sys.argv[2])]['rates'])))" "$work/links.json" "$index")
  shape 100000
  stats="$work/chromium-$index.jsonl"
  # Not through `inside`: a function run in the background is a subshell, and killing it left the
  # viewer playing 8 s into the next link's window (and the node sending to it for 30 s more).
  ip netns exec "$namespace" python3 Tests/Peers/chromium-whep-check.py "http://$node_address:$http/play/live/edge_1" $(( ${#rates[@]} + 8 )) 0 >"$stats" 2>/dev/null &
  viewer=$!
  for _ in $(seq 1 40); do grep -q '"framesDecoded": [1-9]' "$stats" 2>/dev/null && break; sleep 0.25; done
  began=$(date +%s.%N)
  : >"$work/changes-$index.txt"
  for second in "${!rates[@]}"; do
    if [ "$second" -eq 0 ] || [ "${rates[$second]}" != "${rates[$((second - 1))]}" ]; then
      shape "${rates[$second]}"
      echo "$second ${rates[$second]} $(date +%s.%N)" >>"$work/changes-$index.txt"
    fi
    sleep "$(python3 -c "import sys,time; print(max(0, float(sys.argv[1]) + int(sys.argv[2]) + 1 - time.time()))" "$began" "$second")"
  done
  echo "$began" >"$work/began-$index.txt"
  shape 100000
  kill "$viewer" 2>/dev/null || true
  wait "$viewer" 2>/dev/null || true
  echo "   $name done" >&2
done

# The oracle on the same windows and the same ladder's segments. It sends video alone; the
# viewer's link also carried its Opus, so a second oracle gets each window less the audio's rate
# on the wire as the viewer received it (payload, RTP headers, and 44 bytes a packet of SRTP tag,
# UDP and IP): the best any sender of the same stream could have done over that link.
python3 - "$work" <<'PY'
import json, os, sys
work = sys.argv[1]
links = json.load(open(f"{work}/links.json"))
os.makedirs(f"{work}/windows-less-audio", exist_ok=True)
for index, link in enumerate(links):
    path = f"{work}/chromium-{index}.jsonl"
    if not os.path.exists(f"{work}/windows/{link['name']}.json") or not os.path.exists(path):
        continue
    rows = [json.loads(l) for l in open(path) if l.startswith("{") and '"audioPacketsReceived"' in l]
    rows = [r for r in rows if r["audioPacketsReceived"] > 0]
    if len(rows) < 2:
        continue
    first, last = rows[0], rows[-1]
    span = max(0.5, last["t"] - first["t"])
    wire = sum(last[k] - first[k] for k in ("audioBytesReceived", "audioHeaderBytesReceived")) + 44 * (last["audioPacketsReceived"] - first["audioPacketsReceived"])
    audio = wire * 8 / span / 1000
    trace = json.load(open(f"{work}/windows/{link['name']}.json"))
    json.dump([{"duration_ms": s["duration_ms"], "bandwidth_kbps": max(8, round(s["bandwidth_kbps"] - audio))} for s in trace],
              open(f"{work}/windows-less-audio/{link['name']}.json", "w"))
    with open(f"{work}/audio-{index}.txt", "w") as out:
        out.write(f"{audio:.0f}\n")
PY
for kind in windows windows-less-audio; do
  : >"$work/oracle-$kind.jsonl"
  if ls "$work/$kind"/*.json >/dev/null 2>&1; then
    oracle_traces=()
    for file in "$work/$kind"/*.json; do oracle_traces+=(--trace "$file"); done
    "$worker" simulate "$work/data/hls/live/edge" "${oracle_traces[@]}" --window "$seconds" --start 0 --level 1 --json \
      >"$work/oracle-$kind.jsonl" 2>/dev/null || true
  fi
done

# The cost: N aiortc viewers of the top (their decoders left out: the node's cost is what is
# measured, and N decoders would take the machine from it), then N RTSP/TCP players of the top,
# after a phase with no viewers (the ladder's encoding alone). Each phase: the whole node's cores
# (its process, and on the veth link the kernel thread that receives for it), and its event-loop
# threads' (NIO-ELT: RTSP's and WebRTC's, where packets are sealed, paced and sent), which the
# encoders' own variation does not blur.
hz=$(getconf CLK_TCK)
# Ticks of the kernel threads that receive for one end of the pair (`napi/abr-c0-<id>`).
napi_ticks() { # device
  local total=0 thread
  for thread in $(pgrep "^napi/$1-" || true); do total=$((total + $(awk '{print $14 + $15}' "/proc/$thread/stat"))); done
  echo "$total"
}
node_ticks() { process_ticks "$node_pid"; }
# Datagrams the viewers' UDP sockets took, those they dropped with a full receive buffer, and those
# that came to a port nobody held (each answered with an ICMP error, inside the sender's send call
# on loopback): a cost phase whose viewers did not keep up, or left early, measures something else.
# (On loopback the node's own sockets count in the first too: the viewers' feedback.)
udp_counts() { ip netns exec "$1" nstat -az UdpInDatagrams UdpRcvbufErrors UdpNoPorts | awk '$1 == "UdpInDatagrams" { i = $2 } $1 == "UdpRcvbufErrors" { r = $2 } $1 == "UdpNoPorts" { n = $2 } END { print i + 0, r + 0, n + 0 }'; }
loop_ticks() { event_loop_ticks "$node_pid"; }
cost_line=""
if [ "$viewers" -gt 0 ]; then
  # On loopback WebRTC's datagrams take the RTSP players' default class, unshaped: at 100 Mbit/s the shaped
  # class itself throttled 50 viewers of a 2 Mbit/s top (its drops came back as NACKs and
  # resends), and its packet splitter's timers cost the sender more than sending did.
  link_filter del
  for link in $cost_links; do
    at=$namespace viewer_env=()
    [ "$link" = loopback ] || at=$viewers_namespace viewer_env=(env RTSP_SOURCE_PREFIX=10.79.1.)
    for round in $(seq 1 "$cost_rounds"); do
    for kind in idle webrtc rtsp; do
      load=
      if [ "$kind" != idle ]; then
        ip netns exec "$at" "${viewer_env[@]}" "$python" Benchmarks/webrtc-cost-viewers.py "$kind" "$viewers" $((phase + 10)) \
          "http://$node_address:$http/whep/live/edge_1?abr=off" "rtsp://$node_address:$rtsp/live/edge_1" >"$work/cost-$link-$kind-$round.json" 2>"$work/cost-$link-$kind-$round.log" &
        load=$!
      fi
      sleep 8  # joined and caught up
      before=$(node_ticks) loops_before=$(loop_ticks) counts_before=$(udp_counts "$at")
      napi_before="$(napi_ticks abr-c0) $(napi_ticks abr-c1)"
      sleep "$phase"
      after=$(node_ticks) loops_after=$(loop_ticks) counts_after=$(udp_counts "$at")
      napi_after="$(napi_ticks abr-c0) $(napi_ticks abr-c1)"
      [ -z "$load" ] || wait "$load" || true
      sleep 3
      # Cores over the phase (node, event loops, the node's receive thread, the viewers'), then the
      # datagrams taken, dropped and sent to closed ports in it.
      cost_line+="$link:$kind:$round $(python3 -c "
b, a = '$napi_before'.split(), '$napi_after'.split()
print(round(($after - $before) / $hz / $phase, 3), round(($loops_after - $loops_before) / $hz / $phase, 3),
      *[round((int(y) - int(x)) / $hz / $phase, 3) for x, y in zip(b, a)],
      *[int(y) - int(x) for x, y in zip('$counts_before'.split(), '$counts_after'.split())])") "
    done
    done
  done
fi

# Clean links: four viewers for CLEAN_MINUTES, no moves and no dropped pictures expected.
[ "$viewers" -eq 0 ] || link_filter add
if [ "$clean_minutes" -gt 0 ]; then
  shape 100000
  clean_viewers=()
  for index in 1 2 3 4; do
    inside python3 Tests/Peers/chromium-whep-check.py "http://$node_address:$http/play/$clean_stream" $((clean_minutes * 60)) 0 \
      >"$work/clean-$index.jsonl" 2>/dev/null &
    clean_viewers+=($!)
  done
  moves_before=$(grep -c "moves to another level" "$work/serve.log" || true)
  wait "${clean_viewers[@]}"  # the viewers only: the node and the publisher run on
  echo "$moves_before $(grep -c "moves to another level" "$work/serve.log" || true)" >"$work/clean-moves.txt"
fi

python3 - "$work" "$count" "$seconds" "$cost_line" "$phase" <<'PY'
import json, math, os, re, sys, datetime
work, count, seconds, cost, seconds_per_phase = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
links = json.load(open(f"{work}/links.json"))
def oracles(kind):
    text = open(f"{work}/oracle-{kind}.jsonl").read().strip() if os.path.exists(f"{work}/oracle-{kind}.jsonl") else ""
    found = json.loads(text) if text else []
    found = found if isinstance(found, list) else [found]
    return {o["trace"].rsplit("/", 1)[-1].removesuffix(".json"): o for o in found}
by_trace, less_audio = oracles("windows"), oracles("windows-less-audio")
moves, latency = [], []
for line in open(f"{work}/serve.log", errors="replace"):
    if "moves to another level" in line and "abr.webrtc" in line:
        stamp = datetime.datetime.fromisoformat(line.split()[0]).timestamp()
        moves.append((stamp, int(re.search(r"from=(\d+)", line).group(1)), int(re.search(r"to=(\d+)", line).group(1))))
def rows(path):
    return [json.loads(l) for l in open(path) if l.startswith("{") and '"t"' in l and "decoded" not in l]
print("| link | delivered | oracle (3 s) | delivered/oracle | audio on the wire | oracle on the link less audio | delivered/that oracle | frozen s | beyond starved | starved s | switches | down / up decided after (±0.5 s) | dropped pictures | PLIs | first picture after the POST | behind the node, p50 / p95 |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for index, link in enumerate(links):
    path = f"{work}/chromium-{index}.jsonl"
    if not os.path.exists(path) or not os.path.exists(f"{work}/began-{index}.txt"):
        print(f"| {link['name']} | no run |")
        continue
    samples = rows(path)
    began = float(open(f"{work}/began-{index}.txt").read())
    changes = [(int(a), int(b), float(c)) for a, b, c in (l.split() for l in open(f"{work}/changes-{index}.txt"))]
    playing = [s for s in samples if s.get("framesDecoded", 0) > 0]
    if len(playing) < 2:
        print(f"| {link['name']} | nothing decoded |")
        continue
    # The window: from the first change (the link's first second) for as many seconds as the link has.
    end = changes[-1][2] + (len(link["rates"]) - changes[-1][0]) if changes else began + seconds
    first = playing[0]
    inside = [s for s in playing if s["t"] >= first["t"] and s.get("wall", 0) <= end + 0.25]
    span = max(0.5, inside[-1]["t"] - inside[0]["t"])
    delivered = (inside[-1]["bytesReceived"] - inside[0]["bytesReceived"]) * 8 / span / 1000
    frozen = inside[-1].get("totalFreezesDuration", 0) - inside[0].get("totalFreezesDuration", 0)
    dropped = inside[-1].get("framesDropped", 0)
    plis = inside[-1].get("pliCount", 0)
    lags = sorted(s["playoutLagMs"] for s in inside if s.get("playoutLagMs") is not None)
    lag = f"{lags[len(lags) // 2]:.0f} / {lags[int(len(lags) * 0.95)]:.0f} ms" if lags else "–"
    mine = [m for m in moves if began - 1 <= m[0] <= end]
    reactions = []
    for (at, rate, wall), following in zip(changes[1:], changes[2:] + [(None, None, float("inf"))]):
        # The log stamps whole seconds: a move in the change's own second counts, half a second in.
        moved = [m for m in mine if math.floor(wall) <= m[0] < following[2]]
        down = rate < changes[changes.index((at, rate, wall)) - 1][1]
        fitting = [m for m in moved if (m[2] > m[1]) == down]
        reactions.append(f"{'down' if down else 'up'} {rate} k: {max(0.0, fitting[0][0] + 0.5 - wall):.1f} s" if fitting
                         else f"{'down' if down else 'up'} {rate} k: none")
    o = by_trace.get(link["name"], {})
    starved = o.get("starvedSeconds", 0)
    share = f"{delivered / o['oracleKbps']:.0%}" if o.get("oracleKbps") else "–"
    fair = less_audio.get(link["name"], {})
    fair_share = f"{delivered / fair['oracleKbps']:.0%}" if fair.get("oracleKbps") else "–"
    audio = open(f"{work}/audio-{index}.txt").read().strip() + " kbit/s" if os.path.exists(f"{work}/audio-{index}.txt") else "–"
    reaction = "; ".join(reactions) if link["name"] == "step" else "–"
    if link["name"] == "step" and len(changes) > 1:
        wide = sorted(s["playoutLagMs"] for s in inside if s.get("playoutLagMs") is not None and s.get("wall", 0) < changes[1][2])
        if wide:
            latency.append(f"publisher to picture on the wide link (the step's first {changes[1][0]} s): "
                           f"median {wide[len(wide) // 2]:.0f} ms, worst {wide[-1]:.0f} ms")
    # The page sets it when the first picture is shown, which a stats row taken as it was decoded can precede.
    first_picture = next((s["firstDecodedAfterPost"] for s in playing if s.get("firstDecodedAfterPost")), None)
    print(f"| {link['name']} | {delivered:.0f} kbit/s | {o.get('oracleKbps', '–')} | {share} | {audio} | {fair.get('oracleKbps', '–')} | {fair_share} | {frozen:.1f} | {max(0, frozen - starved):.1f} | {starved:.0f} | "
          f"{len(mine)} | {reaction} | {dropped} | {plis} | {f'{first_picture:.2f} s' if first_picture else '–'} | {lag} |")
for line in latency:
    print(f"\n{line} (the video's estimatedPlayoutTimestamp in the sender's NTP time, which the node's sender reports set to when it had each picture, against the browser's clock on the same machine)")
if cost:
    words = cost.split()
    # Per phase: the node's process, its event loops, its receive thread, the viewers' receive
    # thread (both zero on loopback, where receive runs in the senders' calls), drops, closed ports.
    phases = {tuple(words[i].split(":")): tuple(float(w) for w in words[i + 1:i + 5]) + tuple(int(w) for w in words[i + 5:i + 8])
              for i in range(0, len(words), 8)}
    print("\n| viewers' link | round | phase | node process cores | node's receive thread | event-loop cores | viewers' receive thread (not counted) | viewers playing | still connected | datagrams taken a second | dropped at full receive buffers | to closed ports |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (link, kind, round_), (node, loops, receive, viewers_receive, taken, overflowed, closed) in phases.items():
        path = f"{work}/cost-{link}-{kind}-{round_}.json"
        run = json.loads(open(path).read() or "{}") if os.path.exists(path) else {}
        print(f"| {link} | {round_} | {kind} | {node:.3f} | {receive:.3f} | {loops:.3f} | {viewers_receive:.3f} | {run.get('playing', '–')}/{run.get('viewers', '–')} | {run.get('connected', '–')} | {taken / seconds_per_phase:.0f} | {overflowed} | {closed} |")
    ratio = lambda a, b: f"{a:.3f} / {b:.3f} cores = {a / max(1e-3, b):.2f}x"
    for link in dict.fromkeys(key[0] for key in phases):
        rounds = [r for r in dict.fromkeys(key[2] for key in phases if key[0] == link)
                  if all((link, k, r) in phases for k in ("idle", "webrtc", "rtsp"))]
        # What each round's viewers cost beyond that round's idle phase (the encoding alone): the
        # whole node (its process and its receive thread), and its event loops.
        figures = lambda p: (p[0] + p[2], p[1])
        extra = {(kind, i): [figures(phases[(link, kind, r)])[i] - figures(phases[(link, "idle", r)])[i] for r in rounds]
                 for kind in ("webrtc", "rtsp") for i in (0, 1)}
        for index, r in enumerate(rounds):
            print(f"\nWebRTC over RTSP, beyond the encoding, viewers on {link}, round {r}: whole node "
                  f"{ratio(extra[('webrtc', 0)][index], extra[('rtsp', 0)][index])}; event loops {ratio(extra[('webrtc', 1)][index], extra[('rtsp', 1)][index])}")
        if len(rounds) > 1:
            median = lambda values: sorted(values)[len(values) // 2] if len(values) % 2 else sum(sorted(values)[len(values) // 2 - 1:len(values) // 2 + 1]) / 2
            print(f"\nWebRTC over RTSP, medians of {len(rounds)} rounds, viewers on {link}: whole node "
                  f"{ratio(median(extra[('webrtc', 0)]), median(extra[('rtsp', 0)]))}; event loops {ratio(median(extra[('webrtc', 1)]), median(extra[('rtsp', 1)]))}")
clean = [f"{work}/clean-{i}.jsonl" for i in range(1, 5) if os.path.exists(f"{work}/clean-{i}.jsonl")]
if clean:
    finals = [rows(p)[-1] for p in clean if rows(p)]
    print(f"\nClean links, {len(finals)} viewers of {os.environ.get('CLEAN_STREAM', 'live/edge_1')}: dropped pictures {[f.get('framesDropped', 0) for f in finals]}, "
          f"frozen s {[round(f.get('totalFreezesDuration', 0), 1) for f in finals]}, widths {[f.get('frameWidth') for f in finals]}, "
          f"packets lost {[f.get('packetsLost', 0) for f in finals]}, moves while they played: "
          f"{(lambda a, b: b - a)(*map(int, open(f'{work}/clean-moves.txt').read().split())) if os.path.exists(f'{work}/clean-moves.txt') else '?'}")
PY
