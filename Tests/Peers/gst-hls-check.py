#!/usr/bin/python3
"""Plays an HLS playlist with GStreamer's playbin3 (hlsdemux2, which knows nothing of Low-Latency
HLS) and reports whether it played.

Usage: gst-hls-check.py URL [seconds]

Prints one JSON summary: the demuxer playbin3 chose, how far playback advanced between the 5th
second and the end, and any error. Exits 0 when hlsdemux2 played at least a third of the run
without an error, 1 otherwise.
"""
import json, os, sys, time

# The demuxer's warnings (failed downloads, with their HTTP status) go to stderr, which the test
# shows when this fails: GStreamer 1.22's hlsdemux2 can abort on its own assertion after a 4xx.
os.environ.setdefault("GST_DEBUG", "adaptivedemux2:2,hlsdemux2:2")

import gi
gi.require_version("Gst", "1.0")
from gi.repository import Gst

def main():
    url = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 20
    Gst.init(None)
    pipeline = Gst.ElementFactory.make("playbin3")
    pipeline.set_property("uri", url)
    pipeline.set_property("video-sink", Gst.ElementFactory.make("fakesink"))
    pipeline.set_property("audio-sink", Gst.ElementFactory.make("fakesink"))
    for sink in ("video-sink", "audio-sink"):
        pipeline.get_property(sink).set_property("sync", True)
    chosen = []
    pipeline.connect("deep-element-added", lambda _bin, _sub, element: chosen.append(element.get_factory().get_name())
                     if element.get_factory() else None)
    pipeline.set_state(Gst.State.PLAYING)
    bus = pipeline.get_bus()
    start = time.time()
    first = None
    error = None
    position = None
    while time.time() - start < seconds:
        message = bus.timed_pop_filtered(200 * Gst.MSECOND, Gst.MessageType.ERROR | Gst.MessageType.EOS)
        if message is not None:
            error = str(message.parse_error()[0].message) if message.type == Gst.MessageType.ERROR else "end of stream"
            break
        ok, value = pipeline.query_position(Gst.Format.TIME)
        if ok and value > 0:
            position = value / 1e9
            if first is None and time.time() - start >= 5:
                first = position
    pipeline.set_state(Gst.State.NULL)
    advanced = (position - first) if first is not None and position is not None else 0
    demuxers = sorted({name for name in chosen if "demux" in name})
    played = error is None and "hlsdemux2" in demuxers and advanced >= seconds / 3
    print(json.dumps({"played": played, "advanced": round(advanced, 2), "demuxers": demuxers, "error": error}), flush=True)
    return 0 if played else 1

if __name__ == "__main__":
    sys.exit(main())
