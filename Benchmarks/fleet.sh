#!/usr/bin/env bash
# A fleet of three nodes on loopback (127.0.0.1–3) sharing one PostgreSQL server started here:
#   1. node-request latency: RATE requests a second (default 200) for LOAD_SECONDS (default 30), publish
#      and subscribe requests spread over the three nodes, open loop (latency from each request's
#      scheduled time);
#   2. provisions lost over CYCLES (default 50) kill -9 cycles: each provisions a new stream through
#      one node and kills that node with SIGKILL right after the 201, then restarts it; at the end
#      every acknowledged provision must be in PostgreSQL and on every node;
#   3. noticing a dead node: a stream placed on node 3, node 3 killed, seconds until a publish
#      request for that stream names another node (3 runs);
#   4. drain: a publisher and a player on node 2, SIGTERM, the publisher stops 5 s later; pictures
#      the player missed (from its recording's timestamps) and the node's exit status.
#
#   Benchmarks/fleet.sh     (./abr bench fleet runs it; loopback only, stops by itself)
#
# Environment: RATE, LOAD_SECONDS, CYCLES, WORKER (an abr-worker binary instead of this tree's release build).
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/common.sh
rate=${RATE:-200}
duration=${LOAD_SECONDS:-30}  # not SECONDS: bash counts its own seconds in it
cycles=${CYCLES:-50}
work=$PWD/Benchmarks/work/fleet
rm -rf "$work"
mkdir -p "$work"
worker=$(benchmark_worker)
clip=Benchmarks/work/source-720p30-20s.mp4
benchmark_source_clip "$clip"

# PostgreSQL, as this script's child (as the postgres user when run as root: initdb requires it).
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
as_postgres=()
if [ "$(id -u)" -eq 0 ]; then as_postgres=(setpriv --reuid=postgres --regid=postgres --init-groups --); chown postgres:postgres "$work"; fi
pg_port=18899
"${as_postgres[@]}" "$bin/initdb" -D "$work/pg" -U abr --auth=trust --no-sync -E UTF8 >"$work/initdb.log"
"${as_postgres[@]}" "$bin/postgres" -D "$work/pg" -c listen_addresses=127.0.0.1 -c port=$pg_port -c unix_socket_directories="$work" \
  -c max_connections=200 >"$work/postgres.log" 2>&1 &
postgres=$!
declare -A nodes
cleanup() { for pid in "${nodes[@]}"; do kill -9 "$pid" 2>/dev/null || true; done; kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT
for _ in $(seq 1 100); do "$bin/createdb" -h 127.0.0.1 -p $pg_port -U abr abr 2>/dev/null && break; sleep 0.1; done
store="postgres://abr@127.0.0.1:$pg_port/abr?sslmode=disable"
export ABR_WORKER_ADMIN_USER=admin ABR_WORKER_ADMIN_PASSWORD=fleet-bench ABR_WORKER_JWT_SECRET=fleet-bench-secret-0123456789abcdef0123
capacity=(0 2 2 8)   # node 3 has the most room: publish requests place new streams there
start_node() { # index
  local i=$1
  "$worker" serve --host 127.0.0.$i --rtsp-port $((18890 + i)) --http-port $((18880 + i)) --rtmp-port=-1 --srt-port=-1 \
    --data-dir "$work/node-$i" --store "$store" --node-id "node-$i" --capacity-cores "${capacity[$i]}" --grace 3 --drain-timeout 60 \
    --status-interval 0 >>"$work/node-$i.out" 2>>"$work/node-$i.log" &
  nodes[$i]=$!
  for _ in $(seq 1 150); do curl -sf "http://127.0.0.$i:$((18880 + i))/health" >/dev/null && return 0; sleep 0.1; done
  echo "fleet: node $i did not start" >&2; tail -5 "$work/node-$i.log" >&2; exit 1
}
http() { echo "http://127.0.0.$1:$((18880 + $1))"; }
for i in 1 2 3; do start_node $i; done
token=$(curl -s -X PUT -u admin:fleet-bench "$(http 1)/as/v1/auth/login" | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
provision() { # node name → HTTP status
  local body
  body=$(sed "s#live/ingest#live/$2#g" <<'JSON'
[{"streamGuid": "live/ingest", "streams": [
  {"streamGuid": "live/ingest_1", "abrLevel": 1, "videoParams": {"videoBitRate": 2000000, "videoWidth": 1280, "videoHeight": 720}},
  {"streamGuid": "live/ingest_2", "abrLevel": 2, "videoParams": {"videoBitRate": 1000000, "videoWidth": 854, "videoHeight": 480}},
  {"streamGuid": "live/ingest_3", "abrLevel": 3, "videoParams": {"videoBitRate": 600000, "videoWidth": 640, "videoHeight": 360}}]}]
JSON
)
  curl -s -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $token" --data-binary "$body" "$(http "$1")/as/v1/streams/provision/default"
}
node_of() { # node stream → the nodeId a publish request through that node names (or the status)
  curl -s "$(http "$1")/as/v1/streams/stream/default/publish/live/$2_1?transcode=true" \
    | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d[0]["nodeId"] if isinstance(d, list) else "none")' 2>/dev/null || echo none
}

echo "== 1. node requests: $rate/s for $duration s over three nodes" >&2
streams=()
for n in $(seq 1 8); do [ "$(provision 1 load$n)" = 201 ] || { echo "fleet: provision failed" >&2; exit 1; }; streams+=("live/load$n"); done
sleep 1
latency=$(python3 Benchmarks/fleet-requests.py "$rate" "$duration" "$(http 1),$(http 2),$(http 3)" "$(IFS=,; echo "${streams[*]}")")
echo "$latency" >&2

echo "== 2. $cycles kill -9 cycles" >&2
acknowledged=8
for cycle in $(seq 1 "$cycles"); do
  i=$(( (cycle - 1) % 3 + 1 ))
  status=$(provision "$i" "cycle$cycle")
  kill -9 "${nodes[$i]}"; wait "${nodes[$i]}" 2>/dev/null || true
  [ "$status" = 201 ] && acknowledged=$((acknowledged + 1))
  start_node "$i"
  printf '\r  cycle %d/%d' "$cycle" "$cycles" >&2
done
echo >&2
sleep 3
stored=$("$bin/psql" -h 127.0.0.1 -p $pg_port -U abr -d abr -At -c "SELECT count(*) FROM provision")
on_nodes=()
for i in 1 2 3; do
  on_nodes+=("$(curl -s "$(http "$i")/v1/jobs" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')")
done
lost=$((acknowledged - stored))
echo "  acknowledged $acknowledged, in PostgreSQL $stored, on the nodes ${on_nodes[*]}" >&2

echo "== 3. noticing a dead node (3 runs)" >&2
noticed=()
for run in 1 2 3; do
  [ "$(provision 1 dead$run)" = 201 ]
  placed=$(node_of 1 "dead$run")
  [ "$placed" = node-3 ] || { echo "  run $run: placed on $placed, not node-3; skipped" >&2; continue; }
  sleep 2   # a heartbeat after the placement, as in service
  killed=$(date +%s.%N)
  kill -9 "${nodes[3]}"; wait "${nodes[3]}" 2>/dev/null || true
  while [ "$(node_of 1 "dead$run")" = node-3 ]; do sleep 0.1; done
  noticed+=("$(python3 -c "print(round($(date +%s.%N) - $killed, 1))")")
  echo "  run $run: requests went elsewhere after ${noticed[-1]} s" >&2
  start_node 3
done

echo "== 4. drain with a publisher and a player" >&2
[ "$(provision 2 drain)" = 201 ]
sleep 1
ffmpeg -hide_banner -loglevel error -re -stream_loop -1 -i "$clip" -t 120 -c copy -f rtsp -rtsp_transport tcp \
  "rtsp://127.0.0.2:18892/live/drain_1" </dev/null >"$work/publisher.log" 2>&1 &
publisher=$!
for _ in $(seq 1 100); do
  frames=$(curl -s "$(http 2)/v1/jobs/live/drain" | python3 -c 'import json,sys; print(min(v["framesOut"] for v in json.load(sys.stdin)["variants"]))' 2>/dev/null || echo 0)
  [ "$frames" -gt 30 ] && break; sleep 0.2
done
ffmpeg -hide_banner -loglevel error -rtsp_transport tcp -i "rtsp://127.0.0.2:18892/live/drain_2" -c copy -f mpegts -y "$work/drain.ts" \
  </dev/null >"$work/player.log" 2>&1 &
player=$!
sleep 5
kill -TERM "${nodes[2]}"
sleep 5
kill -INT "$publisher"
drain_status=0
wait "${nodes[2]}" || drain_status=$?
wait "$player" || true
missed=$(ffprobe -v error -select_streams v:0 -show_entries packet=pts_time -of csv=p=0 "$work/drain.ts" | python3 -c '
import sys
t = sorted(float(line.split(",")[0]) for line in sys.stdin.read().split() if line.split(",")[0])
print(sum(max(0, round((b - a) * 30) - 1) for a, b in zip(t, t[1:])), len(t))')
echo "  the node exited with $drain_status; pictures missed, received: $missed" >&2

python3 - "$latency" "$lost" "$acknowledged" "${noticed[*]:-}" "$missed" "$drain_status" "$rate" <<'PY'
import json, sys
latency = json.loads(sys.argv[1]); lost, acknowledged = int(sys.argv[2]), int(sys.argv[3])
noticed = [float(x) for x in sys.argv[4].split()]; missed, received = (int(x) for x in sys.argv[5].split())
print("| figure | goal | measured |")
print("| --- | --- | --- |")
print(f"| node-request latency, 3 nodes on PostgreSQL, {sys.argv[7]} requests/s | p99 under 20 ms | p50 {latency['p50_ms']} ms, p99 {latency['p99_ms']} ms, max {latency['max_ms']} ms over {latency['requests']} requests ({latency['statuses']}) |")
print(f"| noticing a dead node | within 10 s | {', '.join(f'{x} s' for x in noticed) or 'not measured'} |")
print(f"| provisions lost over kill -9 cycles | zero | {lost} of {acknowledged} acknowledged |")
print(f"| drain | zero player pictures lost | {missed} missed of {received} received; exit status {sys.argv[6]} |")
PY
