#!/usr/bin/env bash
# Live density: N real-time publishes into one node against N ffmpeg processes doing the same
# ladder in real time, in one run, on the same clip (720p30: top copied + 480p + 360p, x264
# veryfast/zerolatency, the node's settings). For each side it measures CPU over a steady window
# and reports cores per real-time job; for the node also drops, encoded rungs' fps, added latency
# p50/p99 per rung (publisher arrival to sent), first-frame time for a new player, RSS per job.
# A third side, the same ffmpeg ladder with one thread everywhere, measures the library floor:
# what the decoder, the scalers and x264 cost at these settings with almost nothing around
# them, so ffmpeg/floor is the best ratio any program doing the same library work could reach.
# Last, each side's rungs are measured (PSNR Y and SSIM against the Lanczos-scaled source, see
# quality_pass), so every cores-per-job ratio is shown with the quality it bought.
#
#   Benchmarks/live-vs-ffmpeg.sh [N...]     (default: 1 2 4; ./abr bench live runs it)
#
# Publishers (and ffmpeg processes) start 2/N s apart, so their keyframes (2 s GOP) fall at
# different moments, as independent publishers' do; ALIGNED=1 starts them together instead.
#
# Environment: PROTOCOL (rtsp, rtmp or srt: how the node's publishers push; default rtsp),
# NODE_ARGS (extra `serve` arguments, e.g. --no-load-shedding), WORKER (an abr-worker
# binary to measure instead of building this tree's, for before/after runs), REPEAT (runs per N,
# default 1; with more, medians per N follow the table), ALIGNED, FLOOR (default 1: also run
# the single-threaded library floor, see ffmpeg_side; 0 skips it), SECONDS_PER_RUN
# (default 60: 25 s warm-up, then the measured window). Drops and shed
# frames are counted in the measured window; latency percentiles cover the node's last 1000
# pictures per rung (about 33 s), so mostly the window too.
# Everything runs on loopback and stops by itself. Compare ratios, not absolute figures.
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/common.sh
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(1 2 4)
run_seconds=${SECONDS_PER_RUN:-60}
warmup=25
work=Benchmarks/work/live
mkdir -p "$work"

worker=$(benchmark_worker)
clip=Benchmarks/work/source-720p30-20s.mp4
benchmark_source_clip "$clip"

cpu_ticks() { # pid... → utime+stime of all, in clock ticks
  local total=0
  for pid in "$@"; do
    [ -r "/proc/$pid/stat" ] || continue
    total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
  done
  echo "$total"
}
hz=$(getconf CLK_TCK)

provision() { # n → a Stream Manager 2.0 file for live/bench<n>
  cat >"$work/bench$1.json" <<JSON
[{"streamGuid": "live/bench$1", "streams": [
  {"streamGuid": "live/bench$1_1", "abrLevel": 1, "videoParams": {"videoBitRate": 2500000, "videoWidth": 1280, "videoHeight": 720}},
  {"streamGuid": "live/bench$1_2", "abrLevel": 2, "videoParams": {"videoBitRate": 1000000, "videoWidth": 854, "videoHeight": 480}},
  {"streamGuid": "live/bench$1_3", "abrLevel": 3, "videoParams": {"videoBitRate": 600000, "videoWidth": 640, "videoHeight": 360}}]}]
JSON
  echo "$work/bench$1.json"
}

# Time from PLAY to the first video RTP packet, over TCP, as a new player sees it.
first_frame_ms() { # rtsp url
  python3 - "$1" <<'PY'
import socket, sys, time, re
url = sys.argv[1]
host, port = re.match(r"rtsp://([^:/]+):(\d+)/", url).groups()
s = socket.create_connection((host, int(port)), timeout=5)
def request(text):
    s.sendall(text.encode())
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(65536)
    return data.decode(errors="replace")
reply = request(f"SETUP {url}/trackID=0 RTSP/1.0\r\nCSeq: 1\r\nTransport: RTP/AVP/TCP;unicast;interleaved=0-1\r\n\r\n")
session = re.search(r"Session: *([^;\r\n]+)", reply).group(1)
start = time.monotonic()
s.sendall(f"PLAY {url} RTSP/1.0\r\nCSeq: 2\r\nSession: {session}\r\n\r\n".encode())
buffer = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        print("nan"); break
    buffer += chunk
    index = buffer.find(b"$\x00")
    if index >= 0:
        print(f"{(time.monotonic() - start) * 1000:.0f}"); break
PY
}

# Pause between starting one stream and the next: a GOP divided among the streams.
stagger() { # n
  [ "${ALIGNED:-0}" = 1 ] || sleep "$(python3 -c "print(2 / $1)")"
}

# N ffmpeg processes doing the ladder in real time, started as the publishers are; prints their
# cores per job over the measured window and the slowest one's speed. Extra arguments go before
# the input (`-threads 1 -filter_complex_threads 1` makes the single-threaded library floor: the
# decoder, the scalers and each x264 on one thread, as the node runs them when it holds two or
# more jobs, with nothing else around them but ffmpeg's own small plumbing).
ffmpeg_side() { # n [ffmpeg options...]
  local n=$1; shift
  local ffmpegs=() i before after started ended speeds
  for i in $(seq 1 "$n"); do
    ffmpeg -hide_banner -loglevel error -stats_period 1 -progress "$work/ffmpeg$i.progress" "$@" -re -stream_loop -1 -i "$clip" -t "$run_seconds" \
      -filter_complex "[0:v]split=2[s2][s3];[s2]scale=854:480:flags=bicubic[v2];[s3]scale=640:360:flags=bicubic[v3]" \
      -map 0:v -map 0:a -c copy -f null - \
      -map "[v2]" -map 0:a -c:a copy "${x264[@]}" "$@" -b:v 1000k -maxrate 1000k -bufsize 1000k -f null - \
      -map "[v3]" -map 0:a -c:a copy "${x264[@]}" "$@" -b:v 600k -maxrate 600k -bufsize 600k -f null - </dev/null >/dev/null 2>&1 &
    ffmpegs+=($!)
    stagger "$n"
  done
  sleep "$warmup"
  before=$(cpu_ticks "${ffmpegs[@]}")
  started=$(date +%s.%N)
  sleep $((run_seconds - warmup - 5))
  after=$(cpu_ticks "${ffmpegs[@]}")
  ended=$(date +%s.%N)
  speeds=$(for i in $(seq 1 "$n"); do grep '^speed=' "$work/ffmpeg$i.progress" | tail -n 1 | tr -dc '0-9.'; echo; done | sort -n | head -n 1)
  for pid in "${ffmpegs[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait "${ffmpegs[@]}" 2>/dev/null || true
  python3 -c "print(f'{($after - $before) / $hz / ($ended - $started) / $n:.3f} ${speeds:-nan}')"
}

results=()
# Each N runs REPEAT times, the Ns taking turns, so a slow spell on the shared machine falls on
# different Ns rather than all of one.
schedule=()
for _ in $(seq 1 "${REPEAT:-1}"); do schedule+=("${counts[@]}"); done
for n in "${schedule[@]}"; do
  echo "== N=$n: abr-worker serve" >&2
  rm -rf "$work/data"
  arguments=()
  for i in $(seq 1 "$n"); do arguments+=(--provision "$(provision "$i")"); done
  rtsp_port=18854
  http_port=18855
  # Admission would refuse the publishers that do not fit (it measures the running jobs), and
  # this measures what happens when they all come: admission counting 1000 cores takes them all.
  # shellcheck disable=SC2086 # NODE_ARGS is a list of arguments
  "$worker" serve --rtsp-port "$rtsp_port" --rtmp-port 18856 --srt-port 18857 --http-port "$http_port" --data-dir "$work/data" --status-interval 0 \
    --capacity-cores 1000 "${arguments[@]}" ${NODE_ARGS:-} >"$work/node.log" 2>&1 &
  node=$!
  sleep 3
  publishers=()
  for i in $(seq 1 "$n"); do
    case "${PROTOCOL:-rtsp}" in
      rtmp) target=(-f flv "rtmp://127.0.0.1:18856/live/bench${i}_1") ;;
      srt) target=(-f mpegts "srt://127.0.0.1:18857?streamid=#!::r=live/bench${i}_1,m=publish") ;;
      *) target=(-f rtsp -rtsp_transport tcp "rtsp://127.0.0.1:$rtsp_port/live/bench${i}_1") ;;
    esac
    ffmpeg -hide_banner -loglevel error -re -stream_loop -1 -i "$clip" -t "$run_seconds" -c copy "${target[@]}" </dev/null >/dev/null 2>&1 &
    publishers+=($!)
    stagger "$n"
  done
  sleep "$warmup"
  jobs_before=$(curl -s --max-time 5 "http://127.0.0.1:$http_port/v1/jobs" || echo '[]')
  before=$(cpu_ticks "$node")
  started=$(date +%s.%N)
  sleep $((run_seconds - warmup - 5))
  after=$(cpu_ticks "$node")
  ended=$(date +%s.%N)
  jobs=$(curl -s --max-time 5 "http://127.0.0.1:$http_port/v1/jobs" || echo '[]')
  first_frame=$(first_frame_ms "rtsp://127.0.0.1:$rtsp_port/live/bench1_3" || echo nan)
  rss=$(awk '/^VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/$node/status")
  node_line=$(python3 - "$jobs_before" "$jobs" "$before" "$after" "$started" "$ended" "$hz" "$n" "$rss" "$first_frame" <<'PY'
import json, sys
first, last = json.loads(sys.argv[1]), json.loads(sys.argv[2])
before, after = int(sys.argv[3]), int(sys.argv[4])
wall = float(sys.argv[6]) - float(sys.argv[5]); hz = int(sys.argv[7]); n = int(sys.argv[8])
cores = (after - before) / hz / wall
def counts(jobs):
    drops = sum(j.get("droppedAtIngest", 0) + sum(v.get("droppedFrames", 0) for v in j.get("variants", [])) for j in jobs)
    shed = sum(v.get("shedFrames", 0) for j in jobs for v in j.get("variants", []))
    frames = {(j["streamGuid"], v["abrLevel"]): v.get("framesOut", 0) for j in jobs for v in j.get("variants", [])}
    return drops, shed, frames
drops0, shed0, frames0 = counts(first)
drops1, shed1, frames1 = counts(last)
# The lowest frame rate any rung delivered over the window (every job published?).
fps = min(((frames1[k] - frames0.get(k, 0)) / wall for k in frames1), default=0) if len(last) == n else 0
rungs = [v for j in last for v in j.get("variants", []) if v.get("abrLevel", 1) > 1]
p50 = max((v.get("latencyP50Ms") or 0 for v in rungs), default=0)
p99 = max((v.get("latencyP99Ms") or 0 for v in rungs), default=0)
# Per rung of the ladder: each level's worst p99 over the N jobs (the passed-through top first).
levels = sorted({v.get("abrLevel", 1) for j in last for v in j.get("variants", [])})
by_level = "/".join(f'{max((v.get("latencyP99Ms") or 0 for j in last for v in j.get("variants", []) if v.get("abrLevel", 1) == level), default=0):.0f}'
                    for level in levels) or "nan"
print(f"{cores / n:.3f} {drops1 - drops0} {shed1 - shed0} {fps:.1f} {p50:.0f} {p99:.0f} {by_level} {int(sys.argv[9]) / n:.0f} {sys.argv[10]}")
PY
)
  for pid in "${publishers[@]}"; do kill "$pid" 2>/dev/null || true; done
  kill -INT "$node" 2>/dev/null || true
  wait "$node" 2>/dev/null || true
  wait 2>/dev/null || true

  echo "== N=$n: ffmpeg per stream" >&2
  ffmpeg_line=$(ffmpeg_side "$n")
  floor_line="nan nan"
  if [ "${FLOOR:-1}" = 1 ]; then
    echo "== N=$n: ffmpeg per stream, one thread everywhere (the library floor)" >&2
    floor_line=$(ffmpeg_side "$n" -threads 1 -filter_complex_threads 1)
  fi
  read -r ffmpeg_cores speeds <<<"$ffmpeg_line"
  results+=("$n $node_line $ffmpeg_line $floor_line")
  echo "   node: $node_line | ffmpeg: $ffmpeg_line | floor: $floor_line" >&2
done

# The quality each side's encodes have, so no ratio above stands without it: the same clip encoded
# once more by each side with exactly its live settings (the node: `transcode` with the thread
# plan a live job gets when it holds its share of the machine at the largest N; ffmpeg per stream
# and the floor: their own command lines, into files), every picture measured against the source
# scaled to the rung's size with Lanczos. x264 is deterministic for given settings and threads, so
# a live rung that dropped nothing carried these same pictures.
quality_pass() {
  local q=$work/quality largest=0 n side
  for n in "${counts[@]}"; do [ "$n" -gt "$largest" ] && largest=$n; done
  rm -rf "$q"; mkdir -p "$q"
  local node_threads=()
  [ $(( $(nproc) / largest )) -le 1 ] && node_threads=(--threads 1)
  "$worker" transcode --provision "$(provision 1)" --input "$clip" --output "$q/node" --top passthrough \
    --quality --quality-every 1 "${node_threads[@]}" --quiet
  for side in ffmpeg floor; do
    local extra=()
    [ "$side" = floor ] && extra=(-threads 1 -filter_complex_threads 1)
    ffmpeg -hide_banner -loglevel error -y "${extra[@]}" -i "$clip" \
      -filter_complex "[0:v]split=2[s2][s3];[s2]scale=854:480:flags=bicubic[v2];[s3]scale=640:360:flags=bicubic[v3]" \
      -map "[v2]" "${x264[@]}" "${extra[@]}" -b:v 1000k -maxrate 1000k -bufsize 1000k "$q/$side-480.mp4" \
      -map "[v3]" "${x264[@]}" "${extra[@]}" -b:v 600k -maxrate 600k -bufsize 600k "$q/$side-360.mp4" </dev/null
  done
  python3 - "$q" "$clip" "${node_threads[*]:-plan}" <<'PY'
import json, subprocess, sys
q, clip, node_threads = sys.argv[1], sys.argv[2], sys.argv[3]
def measured(path, width, height):
    figures = {}
    for name in ("psnr", "ssim"):
        err = subprocess.run(["ffmpeg", "-hide_banner", "-nostdin", "-i", path, "-i", clip, "-lavfi",
                              f"[0:v]setpts=PTS-STARTPTS[d];[1:v]scale={width}:{height}:flags=lanczos,setpts=PTS-STARTPTS[r];[d][r]{name}",
                              "-f", "null", "-"], capture_output=True, text=True).stderr
        line = [l for l in err.splitlines() if f"Parsed_{name}" in l][-1]
        figures[name] = float(line.split(" y:")[1].split()[0]) if name == "psnr" else float(line.split("All:")[1].split()[0])
    return figures["psnr"], figures["ssim"]
node = {v["height"]: (v["quality"]["psnrY"], v["quality"]["ssimAll"]) for v in json.load(open(f"{q}/node/report.json"))["variants"] if v.get("quality")}
rows = [("node", node[480], node[360])]
for side, label in (("ffmpeg", "ffmpeg per stream"), ("floor", "library floor")):
    rows.append((label, measured(f"{q}/{side}-480.mp4", 854, 480), measured(f"{q}/{side}-360.mp4", 640, 360)))
print()
print(f"Quality of each side's encodes (the same clip, the same settings and threads, every picture, against the Lanczos-scaled source; node threads: {node_threads}):")
print()
print("| side | 480p PSNR Y | 480p SSIM | 360p PSNR Y | 360p SSIM |")
print("| --- | --- | --- | --- | --- |")
for label, r480, r360 in rows:
    print(f"| {label} | {r480[0]:.2f} | {r480[1]:.4f} | {r360[0]:.2f} | {r360[1]:.4f} |")
PY
}

echo
printf '%s\n' "${results[@]}" | python3 -c '
import statistics, sys
rows = [line.split() for line in sys.stdin if line.strip()]
print("| N | node cores/job | ffmpeg cores/job | ffmpeg/node | library floor cores/job | ffmpeg/floor | node drops | node shed frames | slowest rung fps | added latency p50/p99, worst encoded rung (ms) | p99 by level L1/L2/… (ms) | first frame (ms) | node RSS/job (MB) | slowest ffmpeg speed |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
by_n = {}
def ratio_of(a, b):
    return float(a) / float(b) if b != "nan" and float(b) > 0 else float("nan")
for n, cores, drops, shed, fps, p50, p99, by_level, rss, first, ffmpeg, speed, floor, floor_speed in rows:
    ratio = ratio_of(ffmpeg, cores)
    # The floor only counts when it kept real time: behind, it is capped by the machine, not by its work.
    floor_ok = floor_speed != "nan" and float(floor_speed) >= 0.99
    floor_cell = floor if floor == "nan" or floor_ok else f"{floor} (speed {floor_speed}×)"
    floor_ratio = f"{ratio_of(ffmpeg, floor):.2f}×" if floor_ok else "–"
    print(f"| {n} | {cores} | {ffmpeg} | {ratio:.2f}× | {floor_cell} | {floor_ratio} | {drops} | {shed} | {fps} | {p50} / {p99} | {by_level} | {first} | {rss} | {speed}× |")
    # Sustained: nothing dropped or shed and every rung at the source rate; ffmpeg: kept real time.
    node_ok = int(drops) == 0 and int(shed) == 0 and float(fps) >= 29.5
    ffmpeg_ok = speed != "nan" and float(speed or 0) >= 0.99
    by_n.setdefault(int(n), []).append((ratio, float(p99), node_ok, ffmpeg_ok))
if any(len(runs) > 1 for runs in by_n.values()):
    print()
    print("| N | runs | median ffmpeg/node | median p99 (ms) | node sustained | ffmpeg sustained |")
    print("| --- | --- | --- | --- | --- | --- |")
    for n, runs in sorted(by_n.items()):
        print(f"| {n} | {len(runs)} | {statistics.median(r[0] for r in runs):.2f}× | {statistics.median(r[1] for r in runs):.0f} | "
              f"{sum(r[2] for r in runs)} of {len(runs)} | {sum(r[3] for r in runs)} of {len(runs)} |")
# An N counts as sustained only when every run of it was.
node_best = max((n for n, runs in by_n.items() if all(r[2] for r in runs)), default=0)
ffmpeg_best = max((n for n, runs in by_n.items() if all(r[3] for r in runs)), default=0)
print()
print(f"largest N in real time without drops in every run: node {node_best}, ffmpeg per stream {ffmpeg_best} (of the N tried: {sorted(by_n)})")
'
quality_pass
