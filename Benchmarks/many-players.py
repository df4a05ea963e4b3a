#!/usr/bin/env python3
"""Many RTSP players over TCP for `Benchmarks/edge-cpu.sh`: N sessions on one stream, read and
discarded as fast as the link gives them (one thread, selectors), with a keep-alive every 15 s.
Players bind to 127.0.0.2, 127.0.0.3, ... (30 each), since the node caps sessions per address.
With MODE=pinned each asks for `?abr=off`; with MODE=adaptive the node moves it as it sees fit.

Prints one JSON object: bytes received, players still connected at the end, and the switches
the node counted for them.

    many-players.py RTSP_URL HTTP_BASE N SECONDS MODE
"""
import json, selectors, sys, time, urllib.request

from rtsp_play import start_session

url, http_base, count, seconds, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
play_url = url + ("?abr=off" if mode == "pinned" else "")


def open_player(index):
    s, session, _ = start_session(url, (f"127.0.0.{2 + index // 30}", 0), play_url)
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
