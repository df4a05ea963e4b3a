#!/usr/bin/env python3
"""Many RTSP players over TCP for `Benchmarks/edge-cpu.sh`: N sessions on one stream, read and
discarded as fast as the link gives them (one thread, selectors), with a keep-alive every 15 s.
Players bind to 127.0.0.2, 127.0.0.3, ... (30 each), since the node caps sessions per address.
With MODE=pinned each asks for `?abr=off`; with MODE=adaptive the node moves it as it sees fit.

Prints one JSON object: bytes received, players still connected at the end, and the switches
the node counted for them.

    many-players.py RTSP_URL HTTP_BASE N SECONDS MODE
"""
import json, re, selectors, socket, sys, time, urllib.request

url, http_base, count, seconds, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
host, port = re.match(r"rtsp://([^:/]+):(\d+)/", url).groups()
play_url = url + ("?abr=off" if mode == "pinned" else "")


def open_player(index):
    s = socket.socket()
    s.bind((f"127.0.0.{2 + index // 30}", 0))
    s.connect((host, int(port)))
    s.settimeout(5)
    buffer = b""

    def request(text):
        nonlocal buffer
        s.sendall(text.encode())
        while b"\r\n\r\n" not in buffer:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("closed during setup")
            buffer += chunk
        head, _, buffer = buffer.partition(b"\r\n\r\n")
        return head.decode(errors="replace")

    reply = request(f"SETUP {url}/trackID=0 RTSP/1.0\r\nCSeq: 1\r\nTransport: RTP/AVP/TCP;unicast;interleaved=0-1\r\n\r\n")
    session = re.search(r"Session: *([^;\r\n]+)", reply).group(1)
    s.sendall(f"PLAY {play_url} RTSP/1.0\r\nCSeq: 2\r\nSession: {session}\r\n\r\n".encode())
    s.setblocking(False)
    return s, session


players = []
for index in range(count):
    players.append(open_player(index))
selector = selectors.DefaultSelector()
for s, _ in players:
    selector.register(s, selectors.EVENT_READ)
received, open_count = 0, count
deadline = time.monotonic() + seconds
keepalive = time.monotonic() + 15
sequence = 3
while time.monotonic() < deadline and open_count:
    for key, _ in selector.select(timeout=0.5):
        try:
            chunk = key.fileobj.recv(262144)
        except BlockingIOError:
            continue
        except OSError:
            chunk = b""
        if not chunk:
            selector.unregister(key.fileobj)
            open_count -= 1
            continue
        received += len(chunk)
    if time.monotonic() > keepalive:
        for s, session in players:
            try:
                s.send(f"GET_PARAMETER {url} RTSP/1.0\r\nCSeq: {sequence}\r\nSession: {session}\r\n\r\n".encode())
            except OSError:
                pass
        keepalive, sequence = time.monotonic() + 15, sequence + 1

switches = 0
try:
    with urllib.request.urlopen(f"{http_base}/v1/jobs", timeout=5) as reply:
        sessions = {session for _, session in players}
        switches = sum(p.get("switches", 0) for job in json.load(reply) for p in job.get("players", []) if p.get("session") in sessions)
except Exception:
    pass
for s, _ in players:
    s.close()
print(json.dumps({"mode": mode, "players": count, "connectedAtEnd": open_count, "megabitsPerSecond": round(received * 8 / seconds / 1e6, 1),
                  "switches": switches}))
