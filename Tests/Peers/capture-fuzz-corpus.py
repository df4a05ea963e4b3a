#!/usr/bin/python3
"""Makes the fuzz seed corpus (Fixtures/fuzz/<target>/) from real exchanges.

Starts `abr-worker serve` on loopback (relay mode), puts a logging TCP proxy in front of it,
and has ffmpeg 5.1 publish and play over TCP, GStreamer's rtspclientsink publish and rtspsrc
play, through the proxy. What each client sent is cut into seeds for every target: whole
connections, single requests, SDP bodies, Transport values, RTP and RTCP packets, framed
packet runs per track, sequence orders, SPS and sprop strings. Provisions and HLS paths come
from Fixtures/provisions and the node's own layout.

Usage: Tests/Peers/capture-fuzz-corpus.py [path to abr-worker]  (run from the repository root)
Everything it starts is stopped within about a minute.
"""
import base64
import hashlib
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

ROOT = os.getcwd()
OUT = os.path.join(ROOT, "Fixtures", "fuzz")
WORKER = sys.argv[1] if len(sys.argv) > 1 else ".build/debug/abr-worker"
CLIP = os.path.join(ROOT, "Fixtures", "720p30-h264-aac.mp4")
MAX_SEED = 64 * 1024


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proxy:
    """Forwards 127.0.0.1:listen → 127.0.0.1:target and keeps what each client sent."""

    def __init__(self, target):
        self.target = target
        self.server = socket.socket()
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(16)
        self.server.settimeout(0.5)
        self.port = self.server.getsockname()[1]
        self.sent = []  # one bytearray per client connection
        self.stop = False
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while not self.stop:
            try:
                client, _ = self.server.accept()
            except socket.timeout:
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target))
            log = bytearray()
            self.sent.append(log)
            threading.Thread(target=self.pump, args=(client, upstream, log), daemon=True).start()
            threading.Thread(target=self.pump, args=(upstream, client, None), daemon=True).start()

    def pump(self, source, destination, log):
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if log is not None and len(log) < 4 * MAX_SEED:
                    log.extend(data)
                destination.sendall(data)
        except OSError:
            pass
        for s in (source, destination):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def run(arguments, seconds):
    process = subprocess.Popen(arguments, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
    return process


def seeds_from_connection(stream, seeds):
    seeds["rtsp-connection"].append(bytes([200]) + bytes(stream[:MAX_SEED]))
    tracks = {}
    index = 0
    while index < len(stream):
        if stream[index] == 0x24 and index + 4 <= len(stream):
            channel = stream[index + 1]
            length = struct.unpack(">H", stream[index + 2:index + 4])[0]
            payload = bytes(stream[index + 4:index + 4 + length])
            index += 4 + length
            if channel % 2 == 1:
                seeds["rtcp"].append(payload)
            else:
                tracks.setdefault(channel, []).append(payload)
            continue
        end = stream.find(b"\r\n\r\n", index)
        if end < 0:
            break
        head = bytes(stream[index:end + 4])
        length = re.search(rb"Content-Length:\s*(\d+)", head, re.I)
        body = bytes(stream[end + 4:end + 4 + int(length.group(1))]) if length else b""
        seeds["rtsp-message"].append(bytes([7]) + head + body)
        if body:
            seeds["sdp"].append(body)
            for sprop in re.findall(rb"sprop-parameter-sets=([A-Za-z0-9+/=,]+)", body):
                seeds["sprop"].append(sprop)
                for part in sprop.split(b","):
                    nal = base64.b64decode(part + b"=" * (-len(part) % 4))
                    if nal and nal[0] & 0x1F == 7:
                        seeds["sps"].append(nal)
        for transport in re.findall(rb"Transport:\s*([^\r\n]+)", head, re.I):
            seeds["transport"].append(transport)
        index = end + 4 + len(body)
    for channel, packets in tracks.items():
        seeds["rtp"].extend(packets[:8])
        framed = b"".join(bytes([len(p[:255])]) + p[:255] for p in packets[:200])
        seeds["aac-depacketizer" if channel == 2 else "h264-depacketizer"].append(framed[:MAX_SEED])
        sequence = b"".join(p[2:4] for p in packets if len(p) >= 4)
        seeds["reorder-buffer"].append(sequence[:512])
        seeds["reorder-buffer"].append(bytes(reversed(sequence[:64])))


def main():
    for tool in ("ffmpeg", "gst-launch-1.0"):
        if not shutil.which(tool):
            sys.exit(f"capture-fuzz-corpus: {tool} is needed (./abr deps installs it)")
    data = os.path.join("/tmp", f"abr-corpus-{os.getpid()}")
    rtsp_port, http_port = free_port(), free_port()
    node = subprocess.Popen([WORKER, "serve", "--host", "127.0.0.1", "--rtsp-port", str(rtsp_port), "--http-port", str(http_port),
                             "--data-dir", data, "--allow-unprovisioned"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", rtsp_port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        proxy = Proxy(rtsp_port)
        url = f"rtsp://127.0.0.1:{proxy.port}/live/corpus_1"
        publisher = subprocess.Popen(["ffmpeg", "-hide_banner", "-loglevel", "error", "-re", "-i", CLIP, "-t", "4", "-c", "copy",
                                      "-f", "rtsp", "-rtsp_transport", "tcp", url], stdin=subprocess.DEVNULL)
        time.sleep(2)
        run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-rtsp_transport", "tcp", "-i", url, "-t", "1", "-f", "null", "-"], 15)
        run(["gst-launch-1.0", "-q", "rtspsrc", f"location={url}", "protocols=tcp", "!", "fakesink", "num-buffers=30"], 15)
        publisher.wait(timeout=30)
        run(["gst-launch-1.0", "-q", "videotestsrc", "is-live=true", "num-buffers=60", "!", "video/x-raw,width=320,height=240,framerate=30/1",
             "!", "x264enc", "tune=zerolatency", "key-int-max=30", "!", "h264parse", "!", "rtspclientsink",
             f"location=rtsp://127.0.0.1:{proxy.port}/live/gst_1", "protocols=tcp"], 20)
        proxy.stop = True
    finally:
        node.send_signal(signal.SIGINT)
        try:
            node.wait(timeout=15)
        except subprocess.TimeoutExpired:
            node.kill()
        shutil.rmtree(data, ignore_errors=True)

    seeds = {name: [] for name in ["rtsp-message", "transport", "sdp", "rtp", "rtcp", "h264-depacketizer", "aac-depacketizer",
                                   "reorder-buffer", "sps", "sprop", "provision", "hls-path", "rtsp-connection"]}
    for stream in proxy.sent:
        seeds_from_connection(stream, seeds)
    provisions = os.path.join(ROOT, "Fixtures", "provisions")
    for folder, _, files in os.walk(provisions):
        for name in files:
            with open(os.path.join(folder, name), "rb") as f:
                seeds["provision"].append(f.read())
    seeds["hls-path"] += [b"live/a_1/index.m3u8", b"live/a_1/seg1.m4s", b"live/a_1/init.mp4", b"live/a_1/.hidden.m3u8",
                          b"live/out/passwd", b"live/a_1/..%2f..%2fetc%2fpasswd", b"master.m3u8"]
    for name, items in seeds.items():
        folder = os.path.join(OUT, name)
        os.makedirs(folder, exist_ok=True)
        unique = {hashlib.sha1(item).hexdigest()[:16]: item for item in items if item}
        for digest, item in sorted(unique.items())[:40]:
            with open(os.path.join(folder, digest), "wb") as f:
                f.write(item)
        print(f"{name}: {min(len(unique), 40)} seeds")


if __name__ == "__main__":
    main()
