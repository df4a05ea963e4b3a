#!/usr/bin/python3
"""A real third-party RTSP server for tests: GStreamer's gst-rtsp-server serving a live
720p30 H.264 (High, 2 s GOP, multi-slice) + AAC stream at rtsp://127.0.0.1:<port>/live/stream1_1.

Prints the bound port on its first line, then serves until killed or for at most
--lifetime seconds, so a test that forgets it cannot leave it running.
Run with Debian's /usr/bin/python3 (python3-gi, gir1.2-gst-rtsp-server-1.0).
"""
import argparse
import signal
import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--mount", default="/live/stream1_1")
parser.add_argument("--lifetime", type=int, default=120)
args = parser.parse_args()

Gst.init(None)
server = GstRtspServer.RTSPServer()
server.set_address("127.0.0.1")
server.set_service("0")
factory = GstRtspServer.RTSPMediaFactory()
factory.set_launch(
    "( videotestsrc is-live=true pattern=ball ! video/x-raw,width=1280,height=720,framerate=30/1"
    " ! x264enc tune=zerolatency speed-preset=veryfast key-int-max=60 bitrate=2000 ! video/x-h264,profile=high"
    " ! rtph264pay name=pay0 pt=96 config-interval=-1"
    " audiotestsrc is-live=true ! audio/x-raw,rate=48000,channels=2 ! avenc_aac ! aacparse"
    " ! rtpmp4gpay name=pay1 pt=97 )"
)
factory.set_shared(True)
server.get_mount_points().add_factory(args.mount, factory)
server.attach(None)
print(server.get_bound_port(), flush=True)
loop = GLib.MainLoop()
GLib.timeout_add_seconds(args.lifetime, loop.quit)
# Python signal handlers do not run inside GLib's loop; let GLib end it on SIGTERM/SIGINT.
for number in (signal.SIGTERM, signal.SIGINT):
    GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, number, loop.quit)
loop.run()
sys.exit(0)
