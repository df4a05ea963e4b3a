#!/usr/bin/env bash
# Less work per ladder at equal quality: each candidate measured by every rung's PSNR and SSIM
# against the source scaled with Lanczos (what `transcode --quality` measures), every picture,
# x264 on one thread so each rung's CPU is its own.
#
#   Benchmarks/less-work.sh        (./abr bench less-work runs it; needs ladder-quality.sh's clips)
#
# Through abr-worker: the ladder's scaler (--scaler: bicubic is the node's own plane scaler,
# swscale-bicubic the same kernel by swscale) and x264 presets per rung (videoParams.preset).
# Through the ffmpeg CLI with the node's x264 settings (the node has no such mode to switch):
# zimg (Debian's ffmpeg has zscale) against swscale, cascaded scaling (360p from the 480p
# picture), and decoding without the loop filter (pictures that only feed downscaled rungs).
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/common.sh
work=Benchmarks/work
worker=$(benchmark_worker)
clips=("$work/source-720p30-20s.mp4" "$work/natural-garden-720p30-10s.mp4")
for clip in "${clips[@]}"; do
  [ -f "$clip" ] || { echo "missing $clip: run Benchmarks/ladder-quality.sh first" >&2; exit 2; }
done

rungs() { # report.json → "L2 PSNR Y … SSIM dB … CPU …"
  python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("  ".join(f"L{v['abrLevel']} {v['quality']['psnrY']:.2f} dB {v['quality']['ssimAllDecibels']:.2f} dB(SSIM) {v['cpuSeconds'] - v['qualityCPUSeconds']:.2f} s"
                for v in r["variants"] if v.get("quality")))
PY
}

echo "== the ladder's scaler (top passed through; per rung: PSNR Y, SSIM dB, CPU)"
for clip in "${clips[@]}"; do
  for scaler in bicubic swscale-bicubic bicublin bilinear area fast-bilinear lanczos; do
    out=$work/less-work-scaler
    rm -rf "$out"
    "$worker" transcode --provision Fixtures/provisions/sm2-3-level.json --input "$clip" --output "$out" \
      --quality --quality-every 1 --threads 1 --top passthrough --scaler "$scaler" --quiet
    printf '%-32s %-14s %s\n' "$(basename "$clip")" "$scaler" "$(rungs "$out/report.json")"
  done
done

echo "== x264 preset of the 480p and 360p rungs"
for clip in "${clips[@]}"; do
  for preset in superfast veryfast faster fast medium; do
    provision=$work/less-work-$preset.json
    sed "s/\"videoHeight\": 480}/\"videoHeight\": 480, \"preset\": \"$preset\"}/; s/\"videoHeight\": 360}/\"videoHeight\": 360, \"preset\": \"$preset\"}/" \
      Fixtures/provisions/sm2-3-level.json >"$provision"
    out=$work/less-work-preset
    rm -rf "$out"
    "$worker" transcode --provision "$provision" --input "$clip" --output "$out" \
      --quality --quality-every 1 --threads 1 --top passthrough --quiet
    printf '%-32s %-14s %s\n' "$(basename "$clip")" "$preset" "$(rungs "$out/report.json")"
  done
done

echo "== through the ffmpeg CLI: zimg, cascaded scaling, decoding without the loop filter"
python3 - "${clips[@]}" <<'PY'
import resource, subprocess, sys
x264 = "-c:v libx264 -preset veryfast -tune zerolatency -profile:v high -bf 0 -g 60 -keyint_min 60 -sc_threshold 0 -threads 1".split()
def cpu(args):
    best = float("inf")
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(["ffmpeg", "-v", "error", "-y"] + args, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        best = min(best, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return best
def quality(encoded, source, w, h):
    figures = []
    for f in ("psnr", "ssim"):
        err = subprocess.run(["ffmpeg", "-hide_banner", "-i", encoded, "-i", source, "-lavfi",
                              f"[0:v]setpts=PTS-STARTPTS[d];[1:v]scale={w}:{h}:flags=lanczos,setpts=PTS-STARTPTS[r];[d][r]{f}",
                              "-f", "null", "-"], capture_output=True, text=True).stderr
        line = [l for l in err.splitlines() if f"Parsed_{f}" in l][-1]
        figures.append(line.split(" y:")[1].split()[0] if f == "psnr" else line.split("All:")[1].split("(")[1].rstrip(")"))
    return f"{float(figures[0]):.2f} dB {float(figures[1]):.2f} dB(SSIM)"
for source in sys.argv[1:]:
    name = source.split("/")[-1]
    cases = {
        "swscale bicubic": (["-threads", "1"], "scale={w}:{h}:flags=bicubic"),
        "zimg bicubic": (["-threads", "1"], "zscale=w={w}:h={h}:filter=bicubic,format=yuv420p"),
        "cascade 360p": (["-threads", "1"], "scale=854:480:flags=bicubic,scale={w}:{h}:flags=bicubic"),
        "no loop filter": (["-threads", "1", "-skip_loop_filter", "all"], "scale={w}:{h}:flags=bicubic"),
    }
    for label, (decode, chain) in cases.items():
        parts = []
        for w, h, rate in ((854, 480, "1000k"), (640, 360, "600k")):
            if label == "cascade 360p" and h == 480:
                continue
            out = f"/tmp/less-work-{h}.mp4"
            vf = chain.format(w=w, h=h)
            seconds = cpu(decode + ["-i", source, "-vf", vf, "-an"] + x264 + ["-b:v", rate, "-maxrate", rate, "-bufsize", rate, out])
            parts.append(f"{h}p {quality(out, source, w, h)} {seconds:.2f} s (decode+scale+encode)")
        print(f"{name:32s} {label:16s} " + "  ".join(parts))
PY
