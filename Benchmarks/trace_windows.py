"""Windows of the bundled 3G traces, shared by the benchmarks that replay them on shaped links
(edge.sh, webrtc.sh): the same seconds, scaled the same way, written out for the oracle."""
import json
import os

FOLDER = "Fixtures/traces/hsdpa-3g"


def chosen(windows):
    """`windows` trace names spread evenly over the bundled ones."""
    names = sorted(os.listdir(FOLDER))
    return [names[i * len(names) // max(1, windows)] for i in range(windows)]


def window(work, name, start, seconds, mean):
    """The trace's rates (kbit/s), one per second from `start` for `seconds` (looped if short),
    scaled to `mean` kbit/s unless it is "own"; written to work/windows/<label>.json for
    `abr-worker simulate`. Returns the label and the rates as integers."""
    rates = []
    for entry in json.load(open(f"{FOLDER}/{name}")):
        rates += [entry["bandwidth_kbps"]] * max(1, round(entry["duration_ms"] / 1000))
    while len(rates) < start + seconds:
        rates += rates
    rates = rates[start:start + seconds]
    if mean != "own":
        average = sum(rates) / len(rates)
        rates = [rate * float(mean) / average for rate in rates]
    label = f"{name[7:22]}@{mean}"
    os.makedirs(f"{work}/windows", exist_ok=True)
    json.dump([{"duration_ms": 1000, "bandwidth_kbps": rate} for rate in rates], open(f"{work}/windows/{label}.json", "w"))
    return label, [int(rate) for rate in rates]
