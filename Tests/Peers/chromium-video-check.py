#!/usr/bin/env python3
"""Loads a page in headless Chromium and reports whether its <video> elements play.

Usage: chromium-video-check.py URL [seconds]

Drives Chromium over the DevTools protocol (a minimal WebSocket client, standard library only):
every second it reads each video's currentTime, readyState and error. Prints one JSON line
per sample and a final JSON summary; exits 0 when every video's currentTime advanced by at
least 2 s, 1 otherwise, 2 when Chromium could not be driven.
"""
import base64, json, os, re, shutil, signal, socket, struct, subprocess, sys, tempfile, time, urllib.request

def websocket_connect(url):
    match = re.match(r"ws://([^:/]+):(\d+)(/.*)", url)
    host, port, path = match.group(1), int(match.group(2)), match.group(3)
    sock = socket.create_connection((host, port), timeout=10)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    response = b""
    while b"\r\n\r\n" not in response:
        chunk = sock.recv(4096)
        if not chunk:
            raise RuntimeError("websocket handshake: connection closed")
        response += chunk
    if b" 101 " not in response.split(b"\r\n", 1)[0]:
        raise RuntimeError("websocket handshake refused: " + response.split(b"\r\n", 1)[0].decode())
    return sock, response.split(b"\r\n\r\n", 1)[1]

class DevTools:
    def __init__(self, url):
        self.sock, self.pending = websocket_connect(url)
        self.next_id = 1

    def _read_exact(self, count):
        while len(self.pending) < count:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RuntimeError("devtools connection closed")
            self.pending += chunk
        data, self.pending = self.pending[:count], self.pending[count:]
        return data

    def _read_message(self):
        message = b""
        while True:
            first, second = self._read_exact(2)
            length = second & 0x7F
            if length == 126:
                length = struct.unpack(">H", self._read_exact(2))[0]
            elif length == 127:
                length = struct.unpack(">Q", self._read_exact(8))[0]
            message += self._read_exact(length)
            if first & 0x80:
                return message

    def call(self, method, params):
        ident = self.next_id
        self.next_id += 1
        payload = json.dumps({"id": ident, "method": method, "params": params}).encode()
        mask = os.urandom(4)
        header = bytes([0x81])
        if len(payload) < 126:
            header += bytes([0x80 | len(payload)])
        elif len(payload) < 65536:
            header += bytes([0x80 | 126]) + struct.pack(">H", len(payload))
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", len(payload))
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
        while True:
            reply = json.loads(self._read_message())
            if reply.get("id") == ident:
                return reply

PROBE = """JSON.stringify([...document.querySelectorAll('video')].map(v => ({
  src: v.currentSrc, currentTime: v.currentTime, readyState: v.readyState, paused: v.paused,
  error: v.error ? v.error.code : null, width: v.videoWidth, height: v.videoHeight})))"""

class Browser:
    """Headless Chromium on a page, driven over DevTools; `close()` ends it and its profile."""
    def __init__(self, url, flags=()):
        self.profile = tempfile.mkdtemp(prefix="abr-chromium-")
        self.process = subprocess.Popen(
            ["chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--mute-audio", "--no-first-run",
             "--autoplay-policy=no-user-gesture-required", "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
             f"--user-data-dir={self.profile}", *flags, url],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            # Its own process group: closing ends every Chromium process, not only the first.
            start_new_session=True)
        self.devtools = None
        endpoint = None
        deadline = time.time() + 30
        while time.time() < deadline and endpoint is None:
            line = self.process.stderr.readline()
            if not line and self.process.poll() is not None:
                break
            match = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line)
            if match:
                endpoint = int(match.group(1))
        if endpoint is None:
            return
        page = None
        while time.time() < deadline and page is None:
            targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{endpoint}/json/list", timeout=5))
            page = next((t for t in targets if t.get("type") == "page" and "webSocketDebuggerUrl" in t), None)
            if page is None:
                time.sleep(0.2)
        if page is not None:
            self.devtools = DevTools(page["webSocketDebuggerUrl"])

    def evaluate(self, expression, await_promise=False):
        reply = self.devtools.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": await_promise})
        return reply.get("result", {}).get("result", {}).get("value")

    def close(self):
        group = self.process.pid
        try:
            os.killpg(group, signal.SIGTERM)
            self.process.wait(timeout=3)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            pass
        try:
            os.killpg(group, signal.SIGKILL)  # what did not end on SIGTERM (renderers, crashpad)
        except ProcessLookupError:
            pass
        shutil.rmtree(self.profile, ignore_errors=True)

def main():
    url = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 20
    browser = Browser(url)
    try:
        if browser.devtools is None:
            print(json.dumps({"error": "chromium did not open its DevTools port"}))
            return 2
        devtools = browser.devtools
        first, last = {}, {}
        end = time.time() + seconds
        while time.time() < end:
            reply = devtools.call("Runtime.evaluate", {"expression": PROBE, "returnByValue": True})
            videos = json.loads(reply.get("result", {}).get("result", {}).get("value", "[]") or "[]")
            print(json.dumps({"t": round(seconds - (end - time.time()), 1), "videos": videos}), flush=True)
            for index, video in enumerate(videos):
                if video["currentTime"] > 0 and index not in first:
                    first[index] = video["currentTime"]
                last[index] = video
            if videos and len(first) == len(videos) and all(last[i]["currentTime"] - first[i] >= 2 for i in first):
                break
            time.sleep(1)
        advanced = {i: round(last[i]["currentTime"] - first.get(i, last[i]["currentTime"]), 2) for i in last}
        played = bool(last) and all(a >= 2 for a in advanced.values())
        print(json.dumps({"played": played, "advanced": advanced, "videos": list(last.values())}), flush=True)
        return 0 if played else 1
    finally:
        browser.close()

if __name__ == "__main__":
    sys.exit(main())
