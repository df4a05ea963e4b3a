#!/usr/bin/env bash
# Ingest over RTSP, RTMP and SRT, side by side on one node:
#   1. first picture: a publisher starts pushing the bundled 720p clip into a new job; how long
#      until a player of the lowest rung gets its first video packet over RTSP (the node is
#      polled with DESCRIBE every 20 ms, then PLAYs). RUNS times per protocol, each a fresh job.
#   2. crowds: N RTMP and N SRT publishers at once (default 64 each, as relays of streams that are
#      not provisioned), each admitted or refused (the node's limits), with the node answering
#      /health throughout; what each side saw and the node's RSS.
#
#   Benchmarks/ingest.sh [N]     (./abr bench ingest runs it; loopback only, stops by itself)
#
# Environment: RUNS (default 5), WORKER (an abr-worker binary instead of this tree's release build).
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/common.sh
crowd=${1:-64}
runs=${RUNS:-5}
work=Benchmarks/work/ingest
rm -rf "$work"
mkdir -p "$work"
worker=$(benchmark_worker)
clip=Benchmarks/work/source-720p30-20s.mp4
benchmark_source_clip "$clip"
cat >"$work/ladder.json" <<JSON
[{"streamGuid": "live/ingest", "streams": [
  {"streamGuid": "live/ingest_1", "abrLevel": 1, "videoParams": {"videoBitRate": 2000000, "videoWidth": 1280, "videoHeight": 720}},
  {"streamGuid": "live/ingest_2", "abrLevel": 2, "videoParams": {"videoBitRate": 1000000, "videoWidth": 854, "videoHeight": 480}},
  {"streamGuid": "live/ingest_3", "abrLevel": 3, "videoParams": {"videoBitRate": 600000, "videoWidth": 640, "videoHeight": 360}}]}]
JSON
rtsp=18874; rtmp=18875; srt=18876; http=18877
# Grace 0: a publisher that stops ends its job, so each run starts a new one. Unprovisioned
# publishes are relayed, for the crowds.
"$worker" serve --rtsp-port $rtsp --rtmp-port $rtmp --srt-port $srt --http-port $http --data-dir "$PWD/$work/data" --status-interval 0 \
  --grace 0 --allow-unprovisioned --provision "$work/ladder.json" >"$work/serve.out" 2>"$work/serve.log" &
node=$!
cleanup() { kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT
for _ in $(seq 1 100); do curl -sf http://127.0.0.1:$http/health >/dev/null && break; sleep 0.2; done

publisher() { # protocol stream seconds → an ffmpeg pushing the clip; its exit status and seconds go to $work/exits
  local target
  case "$1" in
    rtmp) target=(-f flv "rtmp://127.0.0.1:$rtmp/live/$2") ;;
    srt) target=(-f mpegts "srt://127.0.0.1:$srt?streamid=#!::r=live/$2,m=publish") ;;
    *) target=(-f rtsp -rtsp_transport tcp "rtsp://127.0.0.1:$rtsp/live/$2") ;;
  esac
  ( start=$(date +%s.%N)
    status=0
    ffmpeg -hide_banner -loglevel error -re -stream_loop -1 -i "$clip" -t "$3" -c copy "${target[@]}" </dev/null >>"$work/publishers.log" 2>&1 || status=$?
    echo "$1 $2 $status $(python3 -c "print(round($(date +%s.%N) - $start, 1))")" >>"$work/exits" ) &
}

echo "== first picture on the lowest rung, $runs runs per protocol" >&2
for protocol in rtsp rtmp srt rtsp rtmp srt; do
  for run in $(seq 1 $(( (runs + 1) / 2 ))); do
    # The last job has ended (grace 0) before the next publish.
    for _ in $(seq 1 100); do
      state=$(curl -s http://127.0.0.1:$http/v1/jobs/live/ingest | python3 -c "import json,sys; print(json.load(sys.stdin)['state'])" 2>/dev/null || echo ?)
      [ "$state" = running ] || [ "$state" = interrupted ] || break
      sleep 0.2
    done
    started=$(python3 -c "import time; print(time.monotonic())")
    publisher "$protocol" ingest_1 6
    pid=$!
    python3 - "rtsp://127.0.0.1:$rtsp/live/ingest_3" "$started" "$protocol" >>"$work/first-picture.txt" <<'PY'
import re, socket, sys, time
url, started, protocol = sys.argv[1], float(sys.argv[2]), sys.argv[3]
host, port = re.match(r"rtsp://([^:/]+):(\d+)/", url).groups()
def exchange(s, text):
    s.sendall(text.encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            return ""
        data += chunk
    return data.decode(errors="replace")
deadline = started + 15
while time.monotonic() < deadline:
    s = socket.create_connection((host, int(port)), timeout=5)
    if exchange(s, f"DESCRIBE {url} RTSP/1.0\r\nCSeq: 1\r\n\r\n").startswith("RTSP/1.0 200"):
        break
    s.close()
    time.sleep(0.02)
reply = exchange(s, f"SETUP {url}/trackID=0 RTSP/1.0\r\nCSeq: 2\r\nTransport: RTP/AVP/TCP;unicast;interleaved=0-1\r\n\r\n")
session = re.search(r"Session: *([^;\r\n]+)", reply).group(1)
s.sendall(f"PLAY {url} RTSP/1.0\r\nCSeq: 3\r\nSession: {session}\r\n\r\n".encode())
buffer = b""
while b"$\x00" not in buffer:
    chunk = s.recv(65536)
    if not chunk:
        break
    buffer += chunk
print(protocol, round((time.monotonic() - started) * 1000))
PY
    pkill -P "$pid" ffmpeg 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
done

echo "== crowds: $crowd RTMP and $crowd SRT publishers at once (relays)" >&2
: >"$work/health.txt"
( for _ in $(seq 1 40); do
    start=$(date +%s%N); code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 http://127.0.0.1:$http/health || echo 000)
    echo "$code $(( ($(date +%s%N) - start) / 1000000 ))" >>"$work/health.txt"; sleep 0.5
  done ) &
health=$!
: >"$work/exits"
for i in $(seq 1 "$crowd"); do publisher rtmp "crowd-rtmp-$i" 15; publisher srt "crowd-srt-$i" 15; done
sleep 10
rss=$(awk '/^VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/$node/status")
wait "$health" || true
# Every publisher has ended: after its 15 s, or at once when refused.
for _ in $(seq 1 60); do [ "$(wc -l <"$work/exits")" -ge $((2 * crowd)) ] && break; sleep 1; done

python3 - "$work" "$crowd" "$rss" <<'PY'
import collections, re, statistics, sys
work, crowd, rss = sys.argv[1], int(sys.argv[2]), sys.argv[3]
first = collections.defaultdict(list)
for line in open(f"{work}/first-picture.txt"):
    protocol, ms = line.split()
    first[protocol].append(int(ms))
print("| publish over | runs | first picture on the lowest rung, median (ms) | min–max (ms) |")
print("| --- | --- | --- | --- |")
for protocol in ("rtsp", "rtmp", "srt"):
    values = first.get(protocol, [])
    if values:
        print(f"| {protocol} | {len(values)} | {statistics.median(values):.0f} | {min(values)}–{max(values)} |")
exits = [line.split() for line in open(f"{work}/exits")]
health = [line.split() for line in open(f"{work}/health.txt")]
ok = [int(ms) for code, ms in health if code == "200"]
print()
print("| crowd | publishers | admitted (ran their 15 s) | refused (ended at once, with an error) | neither | /health answered | /health worst (ms) | node RSS (MB) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for protocol in ("rtmp", "srt"):
    mine = [e for e in exits if e[0] == protocol and e[1].startswith("crowd")]
    admitted = sum(1 for e in mine if e[2] == "0" and float(e[3]) >= 14)
    refused = sum(1 for e in mine if e[2] != "0" and float(e[3]) < 10)
    print(f"| {protocol.upper()} | {crowd} | {admitted} | {refused} | {crowd - admitted - refused} | {len(ok)}/{len(health)} | {max(ok) if ok else 'nan'} | {rss} |")
PY
