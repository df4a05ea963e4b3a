#!/usr/bin/env bash
# Ladder benchmark: abr-worker against one ffmpeg process doing the same ladder with the same x264
# settings (decode once, split + scale, one libx264 per rung), on the same 20 s 720p30 clip, in the
# same run, alternating, so a noisy shared machine slows both alike. Reports ratios, not absolutes.
#
#   Benchmarks/ladder-vs-ffmpeg.sh [rounds]      (default 3; ./abr bench runs it)
#
# (a) top passed through + 480p + 360p encoded;  (b) all three rungs encoded.
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/common.sh
rounds=${1:-3}
work=Benchmarks/work
mkdir -p "$work"

swift build -c release --product abr-worker >/dev/null
worker=.build/release/abr-worker

source_clip=$work/source-720p30-20s.mp4
benchmark_source_clip "$source_clip"

provision=Fixtures/provisions/sm2-3-level.json
rung() { # bitrate
  echo "-b:v $1 -maxrate $1 -bufsize $1"
}

ffmpeg_a() {
  ffmpeg -hide_banner -loglevel error -y -i "$source_clip" \
    -filter_complex "[0:v]split=2[s2][s3];[s2]scale=854:480:flags=bicubic[v2];[s3]scale=640:360:flags=bicubic[v3]" \
    -map 0:v -map 0:a -c copy "$work/ff_1.mp4" \
    -map "[v2]" -map 0:a -c:a copy "${x264[@]}" $(rung 1000k) "$work/ff_2.mp4" \
    -map "[v3]" -map 0:a -c:a copy "${x264[@]}" $(rung 600k) "$work/ff_3.mp4"
}

ffmpeg_b() {
  ffmpeg -hide_banner -loglevel error -y -i "$source_clip" \
    -filter_complex "[0:v]split=3[s1][s2][s3];[s1]scale=1280:720:flags=bicubic[v1];[s2]scale=854:480:flags=bicubic[v2];[s3]scale=640:360:flags=bicubic[v3]" \
    -map "[v1]" -map 0:a -c:a copy "${x264[@]}" $(rung 2500k) "$work/ff_1.mp4" \
    -map "[v2]" -map 0:a -c:a copy "${x264[@]}" $(rung 1000k) "$work/ff_2.mp4" \
    -map "[v3]" -map 0:a -c:a copy "${x264[@]}" $(rung 600k) "$work/ff_3.mp4"
}

worker_a() { "$worker" transcode --quiet --provision "$provision" --input "$source_clip" --output "$work/ours" --top passthrough; }
worker_b() { "$worker" transcode --quiet --provision "$provision" --input "$source_clip" --output "$work/ours" --top encode; }

seconds() { # command...
  local start end
  start=$(date +%s.%N)
  "$@"
  end=$(date +%s.%N)
  awk -v s="$start" -v e="$end" 'BEGIN { printf "%.3f", e - s }' 
}

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

declare -A times
for round in $(seq 1 "$rounds"); do
  for case in a b; do
    times[ours_$case]+="$(seconds worker_$case) "
    times[ffmpeg_$case]+="$(seconds ffmpeg_$case) "
  done
  echo "round $round/$rounds done" >&2
done

echo
echo "20 s of 1280x720 30 fps H.264, ladder 720p 2500k / 480p 1000k / 360p 600k, x264 veryfast zerolatency, $(nproc) cores, median of $rounds"
echo
echo "| case | abr-worker (s) | ffmpeg (s) | ffmpeg / abr-worker |"
echo "| --- | --- | --- | --- |"
for case in a b; do
  ours=$(echo "${times[ours_$case]}" | tr ' ' '\n' | grep . | median)
  theirs=$(echo "${times[ffmpeg_$case]}" | tr ' ' '\n' | grep . | median)
  label=$([ $case = a ] && echo "(a) top passed through + 480p + 360p" || echo "(b) all three encoded")
  printf '| %s | %.2f | %.2f | %.2f× |\n' "$label" "$ours" "$theirs" "$(awk -v a="$theirs" -v b="$ours" 'BEGIN { print a / b }')"
done
