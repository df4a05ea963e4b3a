#!/usr/bin/env bash
# What adaptive delivery costs: the node's CPU with N adaptive players against N pinned
# (`?abr=off`) players of the same rung, on one live ladder, on an unshaped loopback (players on
# a clean link stay on their rung, so both sides send the same bytes and the difference is the
# adaptation: TCP_INFO every 0.5 s, the switching policy, its logs). Phases alternate, after an
# idle phase that measures the ladder's encoding alone:
#   idle, pinned, adaptive, pinned, adaptive
# and each is measured after a warm-up (players joining and catching up). It reports the node's
# cores per phase, and the cores of the RTSP server's event-loop threads alone (NIO-ELT: where
# players are packetized, sent to, sampled and moved; encoders run on threads of their own),
# which the encoders' own variation does not blur; then adaptive over pinned both ways.
#
#   Benchmarks/edge-cpu.sh [N]     (default 50; ./abr bench edge-cpu runs it)
#
# Environment: PHASE_SECONDS (default 60), WARMUP (default 10), WORKER (an abr-worker binary
# instead of this tree's release build). Loopback only, no root needed; stops by itself.
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/common.sh
players=${1:-50}
phase=${PHASE_SECONDS:-60}
warmup=${WARMUP:-10}
work=Benchmarks/work/edge-cpu
rm -rf "$work"
mkdir -p "$work"
worker=$(benchmark_worker)
clip=Benchmarks/work/source-720p30-20s.mp4
benchmark_source_clip "$clip"
edge_ladder_provision "$work/edge.json"
rtsp=18964
http=18965
"$worker" serve --host 127.0.0.1 --rtsp-port $rtsp --http-port $http --data-dir "$PWD/$work/data" --status-interval 0 \
  --no-load-shedding --provision "$work/edge.json" >"$work/serve.out" 2>"$work/serve.log" &
node=$!
cleanup() { kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT
for _ in $(seq 1 100); do curl -sf http://127.0.0.1:$http/v1/jobs >/dev/null && break; sleep 0.2; done
ffmpeg -hide_banner -loglevel error -re -stream_loop -1 -i "$clip" -c copy -f rtsp -rtsp_transport tcp \
  rtsp://127.0.0.1:$rtsp/live/edge_1 </dev/null >"$work/publisher.log" 2>&1 &
sleep 15  # every rung encoding

hz=$(getconf CLK_TCK)
node_ticks() { process_ticks "$node"; }
loop_ticks() { event_loop_ticks "$node"; }
# Cores the node used over `seconds`, starting after `warmup` (players, if any, run meanwhile).
measure() { # mode
  local mode=$1 players_pid=
  if [ "$mode" != idle ]; then
    python3 Benchmarks/many-players.py rtsp://127.0.0.1:$rtsp/live/edge_1 http://127.0.0.1:$http "$players" \
      $((phase + warmup)) "$mode" >"$work/$mode.$2.json" &
    players_pid=$!
  fi
  sleep "$warmup"
  local before after loops_before loops_after
  before=$(node_ticks)
  loops_before=$(loop_ticks)
  sleep "$phase"
  after=$(node_ticks)
  loops_after=$(loop_ticks)
  [ -z "$players_pid" ] || wait "$players_pid"
  sleep 3  # the players' sessions end before the next phase
  python3 -c "print(round(($after - $before) / $hz / $phase, 3), round(($loops_after - $loops_before) / $hz / $phase, 3))"
}

echo "== node CPU: $players players of live/edge_1 (2 Mbit/s), $phase s per phase after $warmup s" >&2
idle=$(measure idle 0)
declare -A cores
for round in 1 2; do
  for mode in pinned adaptive; do
    cores[$mode.$round]=$(measure $mode $round)
    echo "  $mode round $round: ${cores[$mode.$round]} cores, node and event loops ($(cat "$work/$mode.$round.json"))" >&2
  done
done
python3 - "$idle" "${cores[pinned.1]}" "${cores[adaptive.1]}" "${cores[pinned.2]}" "${cores[adaptive.2]}" "$work" <<'PY'
import json, sys
phases = [tuple(map(float, text.split())) for text in sys.argv[1:6]]
work = sys.argv[6]
names = ["idle", "pinned.1", "adaptive.1", "pinned.2", "adaptive.2"]
runs = {name: json.load(open(f"{work}/{name}.json")) for name in names[1:]}
print("| phase | node cores | RTSP event-loop cores | Mbit/s to players | players at end | switches |")
print("| --- | --- | --- | --- | --- | --- |")
for name, (node, loops) in zip(names, phases):
    run = runs.get(name)
    figures = f"{run['megabitsPerSecond']} | {run['connectedAtEnd']}/{run['players']} | {run['switches']}" if run else "– | – | –"
    print(f"| {name.replace('.', ' ') if run else 'idle (encoding only)'} | {node:.3f} | {loops:.3f} | {figures} |")
pinned = [phases[1], phases[3]]
adaptive = [phases[2], phases[4]]
mean = lambda values, i: sum(v[i] for v in values) / len(values)
print(f"\nadaptive over pinned: whole node {mean(adaptive, 0) / mean(pinned, 0) - 1:+.1%}; "
      f"RTSP event loops {mean(adaptive, 1) / max(1e-9, mean(pinned, 1)) - 1:+.1%}")
PY
