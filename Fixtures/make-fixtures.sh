#!/usr/bin/env bash
# Regenerates the committed media fixtures with Debian's ffmpeg. Deterministic content
# (lavfi test sources), so a rerun gives equivalent clips; x264's bytes may differ by version.
set -euo pipefail
cd "$(dirname "$0")"
ff() { ffmpeg -hide_banner -loglevel error -y "$@"; }

# Moving test pattern with film grain, so encoders have real work at ladder bit rates.
video() { # size rate seconds
  echo "testsrc2=size=$1:rate=$2:duration=$3,noise=alls=10:allf=t"
}
audio="sine=frequency=440:sample_rate=48000:duration=10,aformat=channel_layouts=stereo"
x264=(-c:v libx264 -preset veryfast -profile:v high -pix_fmt yuv420p -bf 0 -sc_threshold 0)

# 1. The bundled top variant: 1280x720, 30 fps, H.264 High + AAC-LC, 2 s GOP, 4 s.
ff -f lavfi -i "$(video 1280x720 30 4)" -f lavfi -i "$audio" -shortest \
   "${x264[@]}" -g 60 -keyint_min 60 -b:v 1500k -maxrate 1500k -bufsize 1500k \
   -c:a aac -b:a 96k -movflags +faststart 720p30-h264-aac.mp4

# 1b. The same clip at 640x360 (600 kbit/s): the top of the small ladder, for tests about a
#     protocol or a publisher rather than a ladder's sizes (a quarter of the decoding and scaling).
ff -f lavfi -i "$(video 640x360 30 4)" -f lavfi -i "$audio" -shortest \
   "${x264[@]}" -g 60 -keyint_min 60 -b:v 600k -maxrate 600k -bufsize 600k \
   -c:a aac -b:a 96k -movflags +faststart 360p30-h264-aac.mp4

# 2. A source that changes size mid-stream (640x360 then 960x540, 2 s each) in MPEG-TS,
#    as a publisher switching cameras would send it.
ff -f lavfi -i "$(video 640x360 30 2)" -f lavfi -i "$audio" -shortest \
   "${x264[@]}" -g 30 -b:v 600k -c:a aac -b:a 64k -f mpegts part1.ts
ff -f lavfi -i "$(video 960x540 30 2)" -f lavfi -i "$audio" -shortest \
   "${x264[@]}" -g 30 -b:v 900k -c:a aac -b:a 64k -output_ts_offset 2 -f mpegts part2.ts
cat part1.ts part2.ts > resolution-change.ts
rm -f part1.ts part2.ts

# 3. A truncated MP4: the index (moov) sits at the end and the file stops before it,
#    like a recording cut off by a crash.
ff -f lavfi -i "$(video 640x360 30 3)" "${x264[@]}" -g 60 -b:v 800k whole.mp4
head -c $(( $(stat -c %s whole.mp4) * 6 / 10 )) whole.mp4 > truncated.mp4
rm -f whole.mp4

# 4. Not media at all.
printf 'this is not a video file\n%.0s' {1..40} > not-media.mp4

ls -l *.mp4 *.ts
