#!/usr/bin/env bash
# Edge switching on real links: N players, each on its own replayed 3G trace window, and one on
# a step (wide → 1.3 Mbit/s → 650 kbit/s → wide), all playing one live ladder over RTSP/TCP.
# The node, the publisher and the players run in a network namespace made for the run; tc htb
# shapes each player's share of its loopback (Benchmarks/edge-players.py). For each window it
# reports what the player received against what an oracle knowing the next 3 s of the link
# would have (abr-worker simulate on the same ladder's segments and the same window), freeze
# seconds, lag growth, switches and decoder errors; for the step player how long each move took.
#
#   Benchmarks/edge.sh [N]     (default 4; ./abr bench edge runs it; needs root for ip netns/tc)
#
# Environment: SECONDS_PER_WINDOW (default 120), WORKER (an abr-worker binary instead of this
# tree's release build), START (seconds into each trace, default 60), CLEAN (players on a link
# that never narrows, default 0), STEP (the step player's schedule, `rate:seconds,...`; - for none).
# `CLEAN=4 STEP=- SECONDS_PER_WINDOW=600 Benchmarks/edge.sh 0`: four players, ten minutes, clean links.
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/common.sh
windows=${1:-4}
seconds=${SECONDS_PER_WINDOW:-120}
start=${START:-60}
work=Benchmarks/work/edge
rm -rf "$work"
mkdir -p "$work"

worker=$(benchmark_worker)
worker=$(realpath "$worker")
clip=Benchmarks/work/source-720p30-20s.mp4
benchmark_source_clip "$clip"
edge_ladder_provision "$work/edge.json"

namespace=abr-bench-edge-$$
ip netns add "$namespace"
cleanup() {
  ip netns pids "$namespace" 2>/dev/null | xargs -r kill 2>/dev/null || true
  sleep 1
  ip netns del "$namespace" 2>/dev/null || true
}
trap cleanup EXIT
inside() { ip netns exec "$namespace" "$@"; }
ip -n "$namespace" link set lo mtu 1500 up
tc -n "$namespace" qdisc add dev lo root handle 1: htb default 10 r2q 1000
tc -n "$namespace" class add dev lo parent 1: classid 1:10 htb rate 10gbit

ABR_WORKER_LOG_LEVEL=${ABR_WORKER_LOG_LEVEL:-debug} inside "$worker" serve --host 127.0.0.1 --rtsp-port 18954 --http-port 18955 --data-dir "$PWD/$work/data" --status-interval 0 \
  --no-load-shedding --provision "$work/edge.json" >"$work/serve.out" 2>"$work/serve.log" &
for _ in $(seq 1 100); do inside curl -sf http://127.0.0.1:18955/v1/jobs >/dev/null && break; sleep 0.2; done
inside ffmpeg -hide_banner -loglevel error -re -stream_loop -1 -i "$clip" -c copy -f rtsp -rtsp_transport tcp \
  rtsp://127.0.0.1:18954/live/edge_1 </dev/null >"$work/publisher.log" 2>&1 &
sleep 15  # every rung encoding, a few segments written (the oracle reads them)

# N windows spread over the 50 bundled traces.
mapfile -t all < <(ls Fixtures/traces/hsdpa-3g/*.json | sort)
traces=()
for i in $(seq 0 $((windows - 1))); do traces+=("${all[$((i * ${#all[@]} / windows))]}@$start"); done
# CLEAN=n adds n players on a link that never narrows (they should never be moved).
for i in $(seq 1 "${CLEAN:-0}"); do traces+=("wide@$i"); done
echo "== $windows trace windows, ${CLEAN:-0} clean links, step ${STEP:-default}, $seconds s, on live/edge (4 rungs)" >&2
inside python3 Benchmarks/edge-players.py rtsp://127.0.0.1:18954/live/edge_1 http://127.0.0.1:18955 "$seconds" \
  "${STEP:-wide:10,1300:20,650:20,wide:$((seconds - 50))}" "${traces[@]}" >"$work/players.jsonl"

# The oracle on the same windows and the same ladder's segments.
oracle_traces=()
for spec in "${traces[@]}"; do oracle_traces+=(--trace "${spec%@*}"); done
: >"$work/oracle.jsonl"
if [ "$windows" -gt 0 ]; then
  "$worker" simulate "$work/data/hls/live/edge" "${oracle_traces[@]}" --window "$seconds" --start "$start" --level 1 --json \
    >"$work/oracle.jsonl" 2>/dev/null
fi

python3 - "$work/players.jsonl" "$work/oracle.jsonl" <<'PY'
import json, sys
players = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
text = open(sys.argv[2]).read().strip()
try:
    oracle = json.loads(text)
    oracle = oracle if isinstance(oracle, list) else [oracle]
except json.JSONDecodeError:
    oracle = [json.loads(line) for line in text.splitlines() if line.strip()]
by_trace = {o["trace"].rsplit("/", 1)[-1]: o for o in oracle}
print("| window | link mean | delivered | oracle (3 s) | delivered/oracle | freeze s | starved s | lag growth s | switches | decoder errors |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
shares = []
for p in players:
    if p["player"].startswith("wide"):
        print(f"| clean link {p['player'][5:]} | wide | {p['deliveredKbps']} kbit/s | – | – | {p['freezeSeconds']} | 0 | {p['lagGrowthSeconds']} | {p['switches']} | {p['decoderErrors']} |")
        continue
    if p["player"] == "step":
        continue
    o = by_trace.get(p["player"], {})
    share = p["deliveredKbps"] / o["oracleKbps"] if o.get("oracleKbps") else float("nan")
    shares.append(share)
    print(f"| {p['player'][7:22]} | {p['meanLinkKbps']} kbit/s | {p['deliveredKbps']} kbit/s | {o.get('oracleKbps', '?')} kbit/s | "
          f"{share:.0%} | {p['freezeSeconds']} | {o.get('starvedSeconds', '?')} | {p['lagGrowthSeconds']} | {p['switches']} | {p['decoderErrors']} |")
if shares:
    print(f"\nmedian delivered/oracle {sorted(shares)[len(shares) // 2]:.0%}, worst {min(shares):.0%}")
for p in players:
    if p["player"] == "step":
        moves = ", ".join(f"{r['kbps']} kbit/s at {r['at']} s: decided after {r.get('decidedAfter')} s, landed after {r.get('landedAfter')} s"
                          for r in p.get("reactions", []))
        print(f"\nstep player: {moves}; freeze {p['freezeSeconds']} s, lag growth {p['lagGrowthSeconds']} s, "
              f"{p['switches']} switches, {p['decoderErrors']} decoder errors; levels {p['levels']}")
    if p.get("error"):
        print(f"player {p['player']}: {p['error']}")
PY
