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
