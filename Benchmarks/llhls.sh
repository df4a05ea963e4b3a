#!/usr/bin/env bash
# Low-Latency HLS: how far behind live hls.js plays each rung, how a node holds many blocking
# reloads, and what Low-Latency HLS costs the ladder. One live ladder (the edge ladder: the
# 2 Mbit/s 720p top passed through, 480p, 360p, 240p), published in a loop on loopback:
#
# 1. hls.js 1.6 (PyPI's gradio wheel) in headless Chromium, `lowLatencyMode: true`, `maxLiveSyncPlaybackRate: 1.5` as the status page sets it, on each rung
#    in turn for RUNG_SECONDS: its `latency` every second after a warm-up (median and p95), and
#    the stalls it reported (bufferStalledError).
# 2. N pollers following the blocking-reload protocol over the four rungs, each from its own
#    loopback address, for POLL_SECONDS: how long after the first poller of a rung each other one
#    got the same part (p50/p99: the node answers a blocked reload once for everyone waiting),
#    `/health` times meanwhile, and the node's cores against the same span with no client.
# 3. The ladder's cores with Low-Latency HLS on and off (`--hls-low-latency off`), no client:
#    two nodes side by side, each with its own publisher, over COST_ROUNDS spans of IDLE_SECONDS.
#
#   Benchmarks/llhls.sh [N]     (default 300 pollers; ./abr bench llhls runs it; loopback, no root)
#
# Environment: RUNG_SECONDS (default 60), LEVELS (the rungs hls.js plays, default "1 2 3 4"),
# POLL_SECONDS (default 60), IDLE_SECONDS (default 60), COST_ROUNDS (default 3), WORKER (another
# abr-worker binary). `RUNG_SECONDS=600 LEVELS=2` is the 10-minute stall count on one rung.
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/common.sh
pollers=${1:-300}
rung_seconds=${RUNG_SECONDS:-60}
poll_seconds=${POLL_SECONDS:-60}
idle_seconds=${IDLE_SECONDS:-60}
cost_rounds=${COST_ROUNDS:-3}
levels=${LEVELS:-1 2 3 4}
work=Benchmarks/work/llhls
rm -rf "$work"
mkdir -p "$work"
worker=$(benchmark_worker)
clip=Benchmarks/work/source-720p30-20s.mp4
benchmark_source_clip "$clip"
edge_ladder_provision "$work/edge.json"
[ -s .build/hlsjs/hls.mjs ] || { echo "llhls.sh: hls.js is missing (.build/hlsjs/hls.mjs): ./abr deps fetches it" >&2; exit 1; }
rtsp=18974 http=18975
hz=$(getconf CLK_TCK)
cleanup() { kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT

start_node() { # name rtsp-port http-port [serve arguments]: a node and its publisher, pids in $work/name.pids
  local name=$1 rtsp_port=$2 http_port=$3
  shift 3
  rm -rf "$work/data-$name"
  "$worker" serve --host 127.0.0.1 --rtsp-port $rtsp_port --http-port $http_port --webrtc-port=-1 --rtmp-port=-1 --srt-port=-1 \
    --data-dir "$PWD/$work/data-$name" --status-interval 0 --no-load-shedding --max-http-connections 2048 \
    --provision "$work/edge.json" "$@" >"$work/serve-$name.out" 2>>"$work/serve-$name.log" &
  local node_pid=$!
  for _ in $(seq 1 100); do curl -sf http://127.0.0.1:$http_port/v1/jobs >/dev/null && break; sleep 0.2; done
  ffmpeg -hide_banner -loglevel error -re -stream_loop -1 -i "$clip" -c copy -f rtsp -rtsp_transport tcp \
    rtsp://127.0.0.1:$rtsp_port/live/edge_1 </dev/null >"$work/publisher-$name.log" 2>&1 &
  echo "$node_pid $!" >"$work/$name.pids"
}
node_pid() { cut -d' ' -f1 "$work/$1.pids"; }
stop_node() { # name
  local pids
  pids=$(cat "$work/$1.pids")
  kill $pids 2>/dev/null || true
  wait $pids 2>/dev/null || true
}
cores_over() { # seconds pid...: each process's cores over the next `seconds`, one per line
  local seconds=$1
  shift
  local before=() after=() pid
  for pid in "$@"; do before+=("$(process_ticks "$pid")"); done
  sleep "$seconds"
  for pid in "$@"; do after+=("$(process_ticks "$pid")"); done
  for i in "${!before[@]}"; do python3 -c "print(round((${after[$i]} - ${before[$i]}) / $hz / $seconds, 3))"; done
}

echo "== Low-Latency HLS on live/edge (4 rungs): hls.js on levels $levels for $rung_seconds s each" >&2
start_node main $rtsp $http
sleep 20  # every rung encoding, the playlists past their first segments
for level in $levels; do
  python3 Tests/Peers/hlsjs-latency-check.py "http://127.0.0.1:$http/hls/live/edge/edge_$level/index.m3u8" .build/hlsjs/hls.mjs \
    "$rung_seconds" >"$work/hlsjs-$level.jsonl" 2>"$work/hlsjs-$level.log" || true
done
echo "== $pollers blocking pollers for $poll_seconds s, against the same span with none" >&2
idle_on=$(cores_over "$idle_seconds" "$(node_pid main)")
python3 Benchmarks/llhls-pollers.py "http://127.0.0.1:$http" "$poll_seconds" "$pollers" \
  /hls/live/edge/edge_{1,2,3,4}/index.m3u8 >"$work/pollers.json" &
poll=$!
sleep 5  # connected and waiting
polled=$(cores_over $((poll_seconds - 10)) "$(node_pid main)")
wait "$poll" || true
stop_node main
# Two nodes side by side, one with Low-Latency HLS off, each with its own publisher of the same
# clip: both see the same machine over the same seconds, which one after the other they do not
# (this machine's load moves a 30-s figure by 10 %).
echo "== Low-Latency HLS on and off side by side, $cost_rounds x $idle_seconds s" >&2
start_node on $rtsp $http
start_node off $((rtsp + 2)) $((http + 2)) --hls-low-latency off
sleep 20
: >"$work/cost.txt"
for _ in $(seq 1 "$cost_rounds"); do
  cores_over "$idle_seconds" "$(node_pid on)" "$(node_pid off)" | paste -sd' ' >>"$work/cost.txt"
done
stop_node on
stop_node off

python3 - "$work" "$idle_on" "$polled" "$pollers" "$levels" <<'PY'
import json, statistics, sys
work, idle_on, polled, pollers, levels = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5].split()
print("| rung | hls.js latency median | p95 | max | targetLatency | stalls | parts fetched | blocking reloads | rules broken |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for level in levels:
    lines = [json.loads(l) for l in open(f"{work}/hlsjs-{level}.jsonl") if l.startswith("{")]
    samples = [l for l in lines if "t" in l]
    summary = next((l for l in lines if "ok" in l), {})
    latencies = sorted(s["latency"] for s in samples if s["t"] >= 8 and s.get("latency") is not None and s.get("time", 0) > 0)
    stalls = sum(1 for e in (samples[-1].get("errors", []) if samples else []) if "bufferStalledError" in e)
    pick = lambda q: f"{latencies[min(len(latencies) - 1, int(len(latencies) * q))]:.2f} s" if latencies else "–"
    print(f"| {level} | {pick(0.5)} | {pick(0.95)} | {pick(1.0)} | {summary.get('targetLatency')} s | {stalls} | "
          f"{summary.get('parts')} | {summary.get('blocking_reloads')} | {len(summary.get('rules_broken', []))} |")
p = json.load(open(f"{work}/pollers.json"))
print()
print(f"{pollers} pollers: {p['answered']} reloads answered, {p['failed']} failed, {p['parts']} parts; a part reached the "
      f"other pollers of its rung {p['spread_ms_p50']} ms (p50) / {p['spread_ms_p99']} ms (p99) after the first; "
      f"/health {p['health_ms_p50']} / {p['health_ms_p99']} / {p['health_ms_max']} ms (p50/p99/max).")
print(f"Node cores: {idle_on} with no client, {polled} with the pollers "
      f"({(polled - idle_on) * 100:.1f} % of a core for them).")
rounds = [tuple(map(float, line.split())) for line in open(f"{work}/cost.txt") if line.strip()]
ratios = [on / off - 1 for on, off in rounds]
print(f"Low-Latency HLS on and off side by side, {len(rounds)} rounds (cores on/off): "
      + ", ".join(f"{on}/{off} ({ratio * 100:+.1f} %)" for (on, off), ratio in zip(rounds, ratios))
      + f"; on over off, all rounds: {(sum(r[0] for r in rounds) / sum(r[1] for r in rounds) - 1) * 100:+.1f} %, "
      f"median round {statistics.median(ratios) * 100:+.1f} %.")
PY
