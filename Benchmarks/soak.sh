#!/usr/bin/env bash
# Soak: one node, one publisher in real time for a long while (the bundled 3-level ladder, top
# passed through, two rungs encoded), with players that keep joining and leaving over RTSP (TCP
# and UDP, ffmpeg and GStreamer) and HLS (playlists and segments fetched like a player), and
# hostile clients now and then: malformed and trickled requests, and every 20 s a round of
# Benchmarks/hostile-clients.py (a player with client_port=0, one hoarding sessions, a header
# injection, a publisher with a wrong password, forged RTP datagrams, HTTP half-open
# connections, failed logins; RTMP chunk floods and peers that never read, NAL-unit floods over
# RTMP and SRT, another session's UDP route, anonymous node requests, accessToken guesses,
# handshake floods, signed playback without a token), logged to Benchmarks/work/soak/hostile.log.
# Every minute it records the node's resident memory, its open file descriptors, the players connected and the job's state, so a leak shows as a slope.
#
#   Benchmarks/soak.sh [minutes]     (default 30; ./abr soak runs it)
#
# Writes Benchmarks/work/soak.csv and prints the summary the README's table shows. Everything
# runs on loopback and stops by itself.
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-30}
work=Benchmarks/work/soak
rm -rf "$work"
mkdir -p "$work"

swift build -c release --product abr-worker >/dev/null
worker=.build/release/abr-worker
rtsp_port=18754
http_port=18755
rtp_port=18756
rtmp_port=18757
srt_port=18758
admin_password=soak-admin-password

# ABR_SOAK_PREFIX runs the node under a tool (e.g. "heaptrack -o Benchmarks/work/soak/heap") to see
# where memory goes; the figures below are then the node's own, found by its command line.
ABR_WORKER_ADMIN_PASSWORD=$admin_password ABR_WORKER_SM1_ACCESS_TOKEN=soak-sm1-token-0123456789 \
${ABR_SOAK_PREFIX:-} "$worker" serve --rtsp-port "$rtsp_port" --http-port "$http_port" --rtp-port "$rtp_port" \
  --rtmp-port "$rtmp_port" --srt-port "$srt_port" --data-dir "$work/data" --status-interval 0 \
  --provision Fixtures/provisions/sm2-3-level.json --publish-loop Fixtures/720p30-h264-aac.mp4 >"$work/node.log" 2>&1 &
node=$!
if [ -n "${ABR_SOAK_PREFIX:-}" ]; then
  sleep 5
  node=$(pgrep -n -f "abr-worker serve --rtsp-port $rtsp_port") || { echo "soak: the node did not start" >&2; exit 1; }
fi
cleanup() {
  kill $(jobs -p) 2>/dev/null || true
  kill -INT "$node" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap cleanup EXIT
sleep 8
kill -0 "$node" || { echo "soak: the node did not start; see $work/node.log" >&2; exit 1; }

rtsp=rtsp://127.0.0.1:$rtsp_port/live
hls=http://127.0.0.1:$http_port/hls/live/stream1
end=$(( $(date +%s) + minutes * 60 ))

# Players: every few seconds one joins a random rung for 5-40 s with a random stack and transport.
players() {
  local round=0
  while [ "$(date +%s)" -lt "$end" ]; do
    round=$((round + 1))
    local level=$((RANDOM % 3 + 1)) seconds=$((RANDOM % 36 + 5))
    case $((round % 4)) in
      0) timeout $((seconds + 15)) ffmpeg -hide_banner -loglevel quiet -rtsp_transport tcp -i "$rtsp/stream1_$level" -t "$seconds" -f null - & ;;
      1) timeout $((seconds + 15)) ffmpeg -hide_banner -loglevel quiet -rtsp_transport udp -i "$rtsp/stream1_$level" -t "$seconds" -f null - & ;;
      2) timeout "$seconds" gst-launch-1.0 -q rtspsrc "location=$rtsp/stream1_$level" protocols=tcp ! rtph264depay ! h264parse ! fakesink >/dev/null 2>&1 & ;;
      3) ( local stop=$(( $(date +%s) + seconds ))
           while [ "$(date +%s)" -lt "$stop" ]; do
             playlist=$(curl -s --max-time 5 "$hls/stream1_$level/index.m3u8" || true)
             segment=$(printf '%s\n' "$playlist" | grep '\.m4s$' | tail -n 1)
             [ -n "$segment" ] && curl -s --max-time 5 -o /dev/null "$hls/stream1_$level/$segment"
             sleep 2
           done ) & ;;
    esac
    sleep $((RANDOM % 5 + 2))
  done
}

# Hostile clients: malformed requests, half-open connections, a client that never reads.
hostile() {
  while [ "$(date +%s)" -lt "$end" ]; do
    printf 'OPTIONS * RTSP/1.0\r\nCSeq: 1\r\nSession: ;\r\n\r\n' | timeout 3 python3 -c "
import socket,sys
s=socket.create_connection(('127.0.0.1',$rtsp_port)); s.sendall(sys.stdin.buffer.read()); s.recv(4096)" >/dev/null 2>&1 || true
    timeout 3 python3 -c "
import socket,os
s=socket.create_connection(('127.0.0.1',$rtsp_port)); s.sendall(os.urandom(3000))" >/dev/null 2>&1 || true
    timeout 120 python3 Benchmarks/hostile-clients.py "$rtsp_port" "$http_port" "$rtp_port" "$rtmp_port" "$srt_port" "$admin_password" \
      >>"$work/hostile.log" 2>&1 || true
    sleep 20
  done
}

players &
hostile &

echo "minute,rss_mb,fds,rtsp_players,job_state" >"$work/soak.csv"
for minute in $(seq 0 "$minutes"); do
  kill -0 "$node" || { echo "soak: the node died at minute $minute; see $work/node.log" >&2; exit 1; }
  rss=$(awk '/^VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$node/status")
  fds=$(ls "/proc/$node/fd" | wc -l)
  job=$(curl -s --max-time 5 "http://127.0.0.1:$http_port/v1/jobs/live/stream1" || echo '{}')
  state=$(printf '%s' "$job" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("state","?"))' 2>/dev/null || echo "?")
  players=$(printf '%s' "$job" | python3 -c 'import json,sys; print(sum(v.get("players",0) for v in json.load(sys.stdin).get("variants",[])))' 2>/dev/null || echo "?")
  echo "$minute,$rss,$fds,$players,$state" | tee -a "$work/soak.csv"
  [ "$minute" -lt "$minutes" ] && sleep 60
done

python3 - "$work/soak.csv" <<'PY'
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1]))]
rss = [float(r["rss_mb"]) for r in rows]
settled = rss[min(5, len(rss) - 1):]
print(f"soak: {len(rows) - 1} min; RSS min {min(rss):.0f} MB, max {max(rss):.0f} MB; "
      f"from minute {min(5, len(rss) - 1)} to the end {settled[0]:.0f} -> {settled[-1]:.0f} MB "
      f"({settled[-1] - settled[0]:+.0f} MB); fds {rows[0]['fds']} -> {rows[-1]['fds']}; job {rows[-1]['job_state']}")
PY
