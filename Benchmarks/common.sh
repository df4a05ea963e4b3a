# Shared by the benchmark scripts (sourced, not run).

# The generated source both benchmarks use: a publisher-like top variant, 720p30 H.264 High, 2 s
# GOP, no B-frames, 2 Mbit/s, with AAC, 20 s. Made once under Benchmarks/work.
benchmark_source_clip() { # path
  [ -f "$1" ] && return 0
  ffmpeg -hide_banner -loglevel error -y \
    -f lavfi -i "testsrc2=size=1280x720:rate=30:duration=20,noise=alls=10:allf=t" \
    -f lavfi -i "sine=frequency=440:sample_rate=48000:duration=20" \
    -c:v libx264 -preset veryfast -profile:v high -bf 0 -g 60 -keyint_min 60 -sc_threshold 0 \
    -b:v 2000k -maxrate 2000k -bufsize 2000k -c:a aac -b:a 96k -ac 2 "$1"
}

# The x264 settings abr-worker uses (H264Encoder.swift), spelled for the ffmpeg CLI.
x264=(-c:v libx264 -preset veryfast -tune zerolatency -profile:v high -bf 0 -g 60 -keyint_min 60 -sc_threshold 0 -pix_fmt yuv420p)

# The abr-worker to measure: $WORKER when set (another build, for before/after runs), else this
# tree's release build. Prints its path.
benchmark_worker() {
  if [ -n "${WORKER:-}" ]; then
    echo "$WORKER"
  else
    swift build -c release --product abr-worker >/dev/null
    echo .build/release/abr-worker
  fi
}

# The edge benchmarks' ladder: live/edge with the top passed through (2 Mbit/s 720p) and three
# encoded rungs down to 240p.
edge_ladder_provision() { # path
  cat >"$1" <<JSON
[{"streamGuid": "live/edge", "streams": [
  {"streamGuid": "live/edge_1", "abrLevel": 1, "videoParams": {"videoBitRate": 2000000, "videoWidth": 1280, "videoHeight": 720}},
  {"streamGuid": "live/edge_2", "abrLevel": 2, "videoParams": {"videoBitRate": 1000000, "videoWidth": 854, "videoHeight": 480}},
  {"streamGuid": "live/edge_3", "abrLevel": 3, "videoParams": {"videoBitRate": 500000, "videoWidth": 640, "videoHeight": 360}},
  {"streamGuid": "live/edge_4", "abrLevel": 4, "videoParams": {"videoBitRate": 250000, "videoWidth": 426, "videoHeight": 240}}]}]
JSON
}

# A process's CPU ticks (user + system; divide by `getconf CLK_TCK`), and those of its event-loop
# threads alone (SwiftNIO names them NIO-ELT-<group>-#<n>; HTTP's are NIO-SGLTN).
process_ticks() { # pid
  awk '{print $14 + $15}' "/proc/$1/stat"
}
event_loop_ticks() { # pid
  local total=0
  for task in /proc/$1/task/*; do
    grep -q '^NIO-ELT' "$task/comm" 2>/dev/null || continue
    total=$((total + $(awk '{print $14 + $15}' "$task/stat")))
  done
  echo "$total"
}
