#!/usr/bin/env bash
# Ladder quality benchmark: per-title ladders against the fixed provisioned ladder, and what the
# quality measurement costs.
#
#   Benchmarks/ladder-quality.sh        (./abr bench quality runs it)
#
# Two kinds of content, all 720p30:
#   synthetic  the benchmarks' generated clip (testsrc2 with grain, 20 s);
#   natural    three photographs from Debian's mate-backgrounds (nature/Garden, Storm, LadyBird),
#              each pushed in and panned like a slow camera move, with sensor-like grain (10 s).
# For each: `abr-worker ladder` with the 3-level provision (same rung count and bit-rate range),
# then `transcode --quality` at the default sampling and at every picture, with the measurement's
# share of the run's CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/common.sh
work=Benchmarks/work
mkdir -p "$work"
worker=$(benchmark_worker)
provision=Fixtures/provisions/sm2-3-level.json

synthetic=$work/source-720p30-20s.mp4
benchmark_source_clip "$synthetic"

natural_clip() { # photo name → clip path (made once)
  local clip=$work/natural-$(echo "$1" | tr 'A-Z' 'a-z')-720p30-10s.mp4
  local photo=$work/mate-backgrounds/usr/share/backgrounds/mate/nature/$1.jpg
  if [ ! -f "$clip" ]; then
    if [ ! -f "$photo" ]; then
      (cd "$work" && apt-get download mate-backgrounds >/dev/null)
      dpkg-deb -x "$work"/mate-backgrounds_*.deb "$work/mate-backgrounds"
    fi
    # A slow push-in with a drift to the right: every picture differs, as a camera's would.
    ffmpeg -hide_banner -loglevel error -y -loop 1 -framerate 30 -i "$photo" \
      -vf "scale=2560:1600,zoompan=z='1+0.0008*on':x='iw/2-(iw/zoom/2)+on*0.8':y='ih/2-(ih/zoom/2)':d=1:s=1280x720:fps=30,noise=alls=4:allf=t,format=yuv420p" \
      -t 10 -c:v libx264 -preset veryfast -profile:v high -bf 0 -g 60 -b:v 4000k -maxrate 4000k -bufsize 4000k "$clip"
  fi
  echo "$clip"
}
natural=$(natural_clip Garden)
storm=$(natural_clip Storm)
ladybird=$(natural_clip LadyBird)

printf '%-10s %-12s %-12s %-12s %s\n' content "BD PSNR Y" "BD PSNR YUV" "BD SSIM dB" "suggested ladder (top down)"
for kind in synthetic natural storm ladybird; do
  clip=${!kind}
  out=$work/ladder-$kind
  rm -rf "$out"
  "$worker" ladder --input "$clip" --provision "$provision" --output "$out" --quiet
  python3 - "$out/ladder.json" "$kind" <<'PY'
import json, sys
study = json.load(open(sys.argv[1]))
bd = study.get("bdRate") or {}
fmt = lambda v: "n/a" if v is None else f"{v * 100:+.1f} %"
rungs = ", ".join(f"{p['width']}x{p['height']}@{p['targetBitRate'] // 1000}k" for p in study["suggested"])
print(f"{sys.argv[2]:<10} {fmt(bd.get('metric')):<12} {fmt(bd.get('psnrYUV')):<12} {fmt(bd.get('ssimDecibels')):<12} {rungs}")
PY
done
echo "(report.html per content: $work/ladder-<content>/report.html)"

echo
printf '%-10s %-10s %s\n' content sampling "measurement's share of the run's CPU (top passed through, 480p + 360p encoded)"
for kind in synthetic natural; do
  clip=${!kind}
  for every in 4 1; do
    out=$work/quality-$kind-$every
    rm -rf "$out"
    "$worker" transcode --provision "$provision" --input "$clip" --output "$out" --quality --quality-every "$every" --quiet
    python3 - "$out/report.json" "$kind" "$every" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
rungs = "  ".join(f"L{v['abrLevel']} PSNR Y {v['quality']['psnrY']:.2f} SSIM {v['quality']['ssimAll']:.4f}" for v in report["variants"] if v.get("quality"))
print(f"{sys.argv[2]:<10} 1 in {sys.argv[3]:<5} {report['quality']['costShare'] * 100:.0f} %   {rungs}")
PY
  done
done
