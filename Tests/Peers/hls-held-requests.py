#!/usr/bin/env python3
"""Holds many blocking playlist reloads from one address at once, while a bystander on another
address plays the same rung, and reports what each got.

Usage: hls-held-requests.py BASE_URL RUNG_PATH [count]

BASE_URL is the node's `http://127.0.0.1:PORT`; RUNG_PATH a rung's media playlist
(`/hls/live/stream1/stream1_3/index.m3u8`). `count` requests (default 1000), each on its own
connection from 127.0.0.1, ask for the first part of the segment after the open one (held up to
a segment's length). Meanwhile a bystander from 127.0.0.2 reloads the playlist and fetches its
newest part every 0.3 s. Prints a JSON summary: how many requests got the playlist, how many
were refused (a status, with Retry-After or not, or the connection closed unanswered), how many got
nothing within the spec's limit, and the bystander's failures and slowest answers.
"""
import asyncio, json, re, resource, sys, time, urllib.parse

BASE, RUNG = sys.argv[1], sys.argv[2]
COUNT = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
HOST, PORT = urllib.parse.urlparse(BASE).hostname, urllib.parse.urlparse(BASE).port
LIMIT = 8.0  # three target durations of 2 s, and room to answer


async def get(path, source="127.0.0.1", timeout=LIMIT):
    """One request on its own connection: (status or None when closed unanswered, body (a 503's
    head), seconds)."""
    start = time.monotonic()
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, PORT, local_addr=(source, 0)), timeout)
    except (OSError, asyncio.TimeoutError):
        return None, b"", time.monotonic() - start
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), timeout)
    except (OSError, asyncio.TimeoutError):
        data = b""
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    match = re.match(rb"HTTP/1\.1 (\d{3})", head)
    return (int(match.group(1)) if match else None), (head if match and match.group(1) == b"503" else body), time.monotonic() - start


async def bystander(stop, results):
    while not stop.is_set():
        status, body, seconds = await get(RUNG, source="127.0.0.2", timeout=5)
        parts = re.findall(rb'#EXT-X-PART:[^\n]*URI="([^"]+)"', body)
        ok = status == 200
        if ok and parts:
            part_status, _, part_seconds = await get(urllib.parse.urljoin(RUNG, parts[-1].decode()), source="127.0.0.2", timeout=5)
            ok = part_status == 200
            seconds = max(seconds, part_seconds)
        results.append((ok, seconds))
        await asyncio.sleep(0.3)


async def main():
    # A thousand sockets at once: more than the usual soft limit of descriptors.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    status, body, _ = await get(RUNG, source="127.0.0.2")
    text = body.decode(errors="replace")
    sequence = int(re.search(r"#EXT-X-MEDIA-SEQUENCE:(\d+)", text).group(1))
    open_segment = sequence + text.count("#EXTINF")
    target = f"{RUNG}?_HLS_msn={open_segment + 1}&_HLS_part=0"
    stop, watched = asyncio.Event(), []
    watcher = asyncio.create_task(bystander(stop, watched))
    await asyncio.sleep(1)
    start = time.monotonic()
    outcomes = await asyncio.gather(*(get(target) for _ in range(COUNT)))
    elapsed = time.monotonic() - start
    await asyncio.sleep(1)
    stop.set()
    await watcher
    statuses = {}
    for status, _, _ in outcomes:
        key = "closed" if status is None else str(status)
        statuses[key] = statuses.get(key, 0) + 1
    answered = [seconds for status, body, seconds in outcomes if status == 200 and b"#EXTM3U" in body]
    hung = [seconds for status, _, seconds in outcomes if seconds >= LIMIT]
    retry_after = sum(1 for status, head, _ in outcomes if status == 503 and re.search(rb"(?i)\r\nretry-after: *\d+", head))
    times = sorted(seconds for _, seconds in watched)
    print(json.dumps({
        "requests": COUNT, "statuses": statuses, "playlists": len(answered), "retry_after": retry_after,
        "slowest_playlist_s": round(max(answered), 3) if answered else None, "hung": len(hung), "all_done_s": round(elapsed, 2),
        "bystander_requests": len(watched), "bystander_failures": sum(1 for ok, _ in watched if not ok),
        "bystander_p95_s": round(times[int(len(times) * 0.95)], 3) if times else None,
        "bystander_max_s": round(times[-1], 3) if times else None,
    }), flush=True)


asyncio.run(main())
