#!/usr/bin/env bash
# Edge switching on real links of several kinds: players on replayed 3G trace windows and on a
# step (wide → 1.3 Mbit/s → 650 kbit/s → wide), all playing one live ladder over RTSP/TCP, under
# several link models at once. The node, the publisher and the players run in a network namespace
# made for the run; tc htb shapes each player's own address on its loopback, with the model's
# burst and queue (Benchmarks/edge-players.py). For each player it reports what it received
# against what an oracle knowing the next 3 s of the link would have (abr-worker simulate on the
# same ladder's segments and the same window), freeze seconds beyond those the link could not
# carry the lowest rung, lag growth, switches and decoder errors; for the step players how long
# each move took and, after each fall, how long until they were on a rung the new link carries by
# the node's own down thresholds; and, under each figure, the median and the worst case.
#
#   Benchmarks/edge.sh [N]     (default 2 windows; ./abr bench edge runs it; needs root for ip netns/tc)
#
# Environment:
#   MODELS   link models, `burst_bytes:queue_packets ...` (default: bursts 1.5, 16 and 64 KB on a
#            100-packet queue, and 16 KB on 10- and 1000-packet queues)
#   MEANS    `own` (the trace as it is) and/or a mean in kbit/s the window is scaled to, so its
#            dips go below the lowest rung (default `own 1400`)
#   KINDS    players besides the RTSP reader, each on the first window scaled to the last mean
#            with the 16 KB/100-packet model (default `raw ffmpeg gst`: a reader that sends
#            nothing back, ffmpeg, GStreamer)
#   SECONDS_PER_WINDOW (default 120), START (seconds into each trace, default 60), WORKER (an
#   abr-worker binary instead of this tree's release build), STEP (`rate:seconds,...`; - for none),
#   CLEAN (players on links that never narrow, default 0).
#   `CLEAN=4 STEP=- KINDS= SECONDS_PER_WINDOW=600 Benchmarks/edge.sh 0`: four players, ten minutes, clean links.
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/common.sh
windows=${1:-2}
seconds=${SECONDS_PER_WINDOW:-120}
start=${START:-60}
models=${MODELS:-1500:100 16384:100 65536:100 16384:10 16384:1000}
means=${MEANS:-own 1400}
kinds=${KINDS-raw ffmpeg gst}
step=${STEP:-wide:10,1300:20,650:20,wide:$((seconds - 50))}
work=Benchmarks/work/edge
rm -rf "$work"
mkdir -p "$work"

worker=$(benchmark_worker)
worker=$(realpath "$worker")
clip=Benchmarks/work/source-720p30-20s.mp4
benchmark_source_clip "$clip"
edge_ladder_provision "$work/edge.json"

namespace=abr-bench-edge-$$
ip netns add "$namespace"
cleanup() {
  ip netns pids "$namespace" 2>/dev/null | xargs -r kill 2>/dev/null || true
  sleep 1
  ip netns del "$namespace" 2>/dev/null || true
}
trap cleanup EXIT
inside() { ip netns exec "$namespace" "$@"; }
ip -n "$namespace" link set lo mtu 1500 up
tc -n "$namespace" qdisc add dev lo root handle 1: htb default 10 r2q 1000
tc -n "$namespace" class add dev lo parent 1: classid 1:10 htb rate 10gbit

ABR_WORKER_LOG_LEVEL=${ABR_WORKER_LOG_LEVEL:-debug} inside "$worker" serve --host 0.0.0.0 --rtsp-port 18954 --http-port 18955 --data-dir "$PWD/$work/data" --status-interval 0 \
  --no-load-shedding --provision "$work/edge.json" >"$work/serve.out" 2>"$work/serve.log" &
for _ in $(seq 1 100); do inside curl -sf http://127.0.0.1:18955/v1/jobs >/dev/null && break; sleep 0.2; done
inside ffmpeg -hide_banner -loglevel error -re -stream_loop -1 -i "$clip" -c copy -f rtsp -rtsp_transport tcp \
  rtsp://127.0.0.1:18954/live/edge_1 </dev/null >"$work/publisher.log" 2>&1 &
sleep 15  # every rung encoding, a few segments written (the oracle reads them)

# The players: every window under every model and mean, a step player per model, and the other
# kinds on one window. Each window (scaled as asked) is written out for the oracle.
python3 - "$work" "$windows" "$seconds" "$start" "$models" "$means" "$kinds" "$step" <<'PY' >"$work/players.json"
import json, os, sys
work, windows, seconds, start = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
models = [tuple(int(x) for x in m.split(":")) for m in sys.argv[5].split()]
means, kinds, step = sys.argv[6].split(), sys.argv[7].split(), sys.argv[8]
sys.path.insert(0, "Benchmarks")
import trace_windows
chosen = trace_windows.chosen(windows)
def window(name, mean):
    return trace_windows.window(work, name, start, seconds, mean)
def model_name(burst, queue):
    size = f"{burst // 1024} KB" if burst % 1024 == 0 else f"{burst / 1000:.1f} KB"
    return f"burst {size}, queue {queue}"
players = []
for burst, queue in models:
    for name in chosen:
        for mean in means:
            label, rates = window(name, mean)
            players.append({"name": f"{label}|{burst}:{queue}", "kind": "reader", "trace": label, "mean": mean, "burst": burst,
                            "queue": queue, "model": model_name(burst, queue), "rates": rates})
    if step != "-":
        rates = []
        for part in step.split(","):
            rate, length = part.split(":")
            rates += [100000 if rate == "wide" else int(rate)] * int(length)
        players.append({"name": f"step|{burst}:{queue}", "kind": "reader", "step": True, "trace": "step", "burst": burst, "queue": queue,
                        "model": model_name(burst, queue), "rates": rates[:seconds]})
for index in range(int(os.environ.get("CLEAN", "0"))):  # links that never narrow: no one should move
    players.append({"name": f"wide-{index}|16384:100", "kind": "reader", "trace": "wide", "burst": 16384, "queue": 100,
                    "model": model_name(16384, 100), "rates": [100000] * seconds})
if chosen:
    label, rates = window(chosen[0], means[-1])
    for kind in kinds:
        players.append({"name": f"{label}|16384:100|{kind}", "kind": kind, "trace": label, "mean": means[-1], "burst": 16384,
                        "queue": 100, "model": model_name(16384, 100), "rates": rates})
print(json.dumps(players))
PY
echo "== $(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))))" "$work/players.json") players, $seconds s, on live/edge (4 rungs)" >&2
inside python3 Benchmarks/edge-players.py 18954 live/edge_1 http://127.0.0.1:18955 "$seconds" "$work/players.json" >"$work/players.jsonl"

# The oracle on the same windows and the same ladder's segments.
: >"$work/oracle.jsonl"
if ls "$work"/windows/*.json >/dev/null 2>&1; then
  oracle_traces=()
  for file in "$work"/windows/*.json; do oracle_traces+=(--trace "$file"); done
  "$worker" simulate "$work/data/hls/live/edge" "${oracle_traces[@]}" --window "$seconds" --start 0 --level 1 --json \
    >"$work/oracle.jsonl" 2>/dev/null
fi

python3 - "$work/players.jsonl" "$work/oracle.jsonl" <<'PY'
import json, math, sys
players = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
text = open(sys.argv[2]).read().strip()
oracle = json.loads(text) if text else []
oracle = oracle if isinstance(oracle, list) else [oracle]
by_trace = {o["trace"].rsplit("/", 1)[-1].removesuffix(".json"): o for o in oracle}
print("| player | model | link mean | delivered | oracle (3 s) | delivered/oracle | freeze s beyond starved | starved s | lag growth s | switches | decoder errors |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
figures = {"share": [], "freeze": [], "lag": [], "errors": []}
for p in players:
    if p.get("error"):
        print(f"| {p['player']} | {p['model']} | error: {p['error']} |")
        continue
    o = by_trace.get(p.get("trace", ""), {})
    starved = o.get("starvedSeconds", p.get("starvedSeconds", 0))
    beyond = max(0.0, p["freezeSeconds"] - starved)
    share = p["deliveredKbps"] / o["oracleKbps"] if o.get("oracleKbps") else float("nan")
    kind = p.get("kind", "reader")
    name = p["player"].split("|")[0] + ("" if kind == "reader" else f" ({kind})")
    if p["player"].startswith("step"):
        moves = "; ".join(f"{r['kbps']} kbit/s at {r['at']} s: decided {r.get('decidedAfter')} s, landed {r.get('landedAfter')} s"
                          + (f", on a rung it carries (level {r['carriedLevel']}) {r.get('onCarriedRungAfter')} s" if "carriedLevel" in r else "")
                          for r in p.get("reactions", []))
        print(f"| step | {p['model']} | step | {p['deliveredKbps']} kbit/s | – | – | {p['freezeSeconds']} | 0 | {p['lagGrowthSeconds']} | {p['switches']} | {p['decoderErrors']} |")
        print(f"|  | | {moves} | | | | | | | | |")
    else:
        print(f"| {name} | {p['model']} | {p['meanLinkKbps']} kbit/s | {p['deliveredKbps']} kbit/s | {o.get('oracleKbps', '?')} kbit/s | "
              f"{share:.0%} | {beyond:.1f} | {starved:.0f} | {p['lagGrowthSeconds']} | {p['switches']} | {p['decoderErrors']} |")
        if not math.isnan(share):
            figures["share"].append((share, name, p["model"]))
    figures["freeze"].append((beyond, name, p["model"]))
    figures["lag"].append((p["lagGrowthSeconds"], name, p["model"]))
    figures["errors"].append((p["decoderErrors"], name, p["model"]))
def summary(label, values, worst, fmt):
    if not values:
        return
    ordered = sorted(v[0] for v in values if not (isinstance(v[0], float) and math.isnan(v[0])))
    if not ordered:
        return
    w = worst(values, key=lambda v: v[0])
    print(f"- {label}: median {fmt(ordered[len(ordered) // 2])}, worst {fmt(w[0])} ({w[1]}, {w[2]})")
print()
summary("delivered/oracle", figures["share"], min, lambda v: f"{v:.0%}")
summary("freeze beyond starved (s)", figures["freeze"], max, lambda v: f"{v:.1f}")
summary("lag growth (s)", figures["lag"], max, lambda v: f"{v:.2f}")
summary("decoder errors", figures["errors"], max, lambda v: f"{v}")
PY
