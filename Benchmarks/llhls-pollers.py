#!/usr/bin/env python3
"""N players that follow Low-Latency HLS's blocking-reload protocol, spread over a ladder's rungs,
each from its own loopback address (the node caps connections per address), plus a watcher of
`/health`.

Usage: llhls-pollers.py BASE_URL SECONDS COUNT RUNG_PATH...

Each poller asks its rung's playlist for the part after the newest it knows
(`_HLS_msn`/`_HLS_part`), and again as soon as it is answered, on a keep-alive connection.
Prints a JSON summary: requests answered and failed; for every part, how long after the first
poller of its rung got it each other poller did (the node answers a blocked reload once for all
waiting on it, so this spread is the cost of holding them), p50/p99; `/health` times p50/p99/max.
"""
import asyncio, json, re, resource, sys, time, urllib.parse

BASE, SECONDS, COUNT, RUNGS = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
HOST, PORT = urllib.parse.urlparse(BASE).hostname, urllib.parse.urlparse(BASE).port


class Connection:
    def __init__(self, source):
        self.source = source
        self.reader = self.writer = None

    async def get(self, path, timeout=10):
        for attempt in range(2):
            try:
                if self.writer is None:
                    self.reader, self.writer = await asyncio.open_connection(HOST, PORT, local_addr=(self.source, 0))
                self.writer.write(f"GET {path} HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
                await self.writer.drain()
                head = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), timeout)
                status = int(head.split(b" ", 2)[1])
                length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
                body = await asyncio.wait_for(self.reader.readexactly(length), timeout)
                return status, body
            except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, AttributeError, ValueError):
                if self.writer is not None:
                    self.writer.close()
                self.writer = None
        return None, b""


def latest(text):
    sequence = int(re.search(r"#EXT-X-MEDIA-SEQUENCE:(\d+)", text).group(1))
    skipped = int(m.group(1)) if (m := re.search(r"SKIPPED-SEGMENTS=(\d+)", text)) else 0
    segments = text.count("#EXTINF")
    tail = text.rsplit("#EXTINF", 1)[-1]
    open_parts = tail.count("#EXT-X-PART:")
    if open_parts:
        return sequence + skipped + segments, open_parts - 1
    return sequence + skipped + segments - 1, text.rsplit("#EXTINF", 1)[0].rsplit("segment_", 1)[-1].count("#EXT-X-PART:") - 1


async def poller(index, rung, end, arrivals, counts):
    connection = Connection(f"127.0.1.{index % 250 + 1}" if index < 250 else f"127.0.2.{index % 250 + 1}")
    status, body = await connection.get(rung)
    if status != 200:
        counts["failed"] += 1
        return
    msn, part = latest(body.decode(errors="replace"))
    while time.monotonic() < end:
        status, body = await connection.get(f"{rung}?_HLS_msn={msn}&_HLS_part={part + 1}&_HLS_skip=YES")
        now = time.monotonic()
        if status != 200:
            counts["failed"] += 1
            await asyncio.sleep(0.2)
            status, body = await connection.get(rung)
            if status != 200:
                continue
            msn, part = latest(body.decode(errors="replace"))
            continue
        counts["answered"] += 1
        msn, part = latest(body.decode(errors="replace"))
        arrivals.setdefault((rung, msn, part), []).append(now)


async def health(end, times):
    connection = Connection("127.0.3.1")
    while time.monotonic() < end:
        start = time.monotonic()
        status, _ = await connection.get("/health")
        if status == 200:
            times.append(time.monotonic() - start)
        await asyncio.sleep(0.5)


def percentile(values, share):
    values = sorted(values)
    return round(values[min(len(values) - 1, int(len(values) * share))] * 1000, 1) if values else None


async def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    end = time.monotonic() + SECONDS
    arrivals, counts, health_times = {}, {"answered": 0, "failed": 0}, []
    await asyncio.gather(health(end, health_times),
                         *(poller(index, RUNGS[index % len(RUNGS)], end, arrivals, counts) for index in range(COUNT)))
    spreads = [t - min(times) for times in arrivals.values() if len(times) > 1 for t in times]
    print(json.dumps({"pollers": COUNT, **counts, "parts": len(arrivals),
                      "spread_ms_p50": percentile(spreads, 0.5), "spread_ms_p99": percentile(spreads, 0.99),
                      "health_ms_p50": percentile(health_times, 0.5), "health_ms_p99": percentile(health_times, 0.99),
                      "health_ms_max": percentile(health_times, 1.0)}), flush=True)


asyncio.run(main())
