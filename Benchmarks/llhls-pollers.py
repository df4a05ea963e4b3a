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

What is timed is the node, not this script: a reply's time is when its first bytes reached the
poller's socket (taken in the protocol's `data_received`, before any parsing), each rung's pollers
run in their own process, and `/health` is timed from a process of its own with a blocking
socket. One asyncio loop parsing 300 replies in turn would otherwise add its own queue to every
figure (tens of milliseconds on two cores).
"""
import asyncio, json, multiprocessing, re, resource, socket, sys, time, urllib.parse

BASE, SECONDS, COUNT, RUNGS = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
HOST, PORT = urllib.parse.urlparse(BASE).hostname, urllib.parse.urlparse(BASE).port
LENGTH = re.compile(rb"(?i)content-length: *(\d+)")


class Reply(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection: one request at a time, its reply's arrival time."""

    def __init__(self):
        self.buffer = bytearray()
        self.arrived = None
        self.waiter = None
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        if self.arrived is None:
            self.arrived = time.monotonic()
        self.buffer += data
        self.complete()

    def connection_lost(self, exc):
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def complete(self):
        head_end = self.buffer.find(b"\r\n\r\n")
        if head_end < 0 or self.waiter is None or self.waiter.done():
            return
        head = bytes(self.buffer[:head_end])
        match = LENGTH.search(head)
        length = int(match.group(1)) if match else 0
        if len(self.buffer) < head_end + 4 + length:
            return
        body = bytes(self.buffer[head_end + 4:head_end + 4 + length])
        del self.buffer[:head_end + 4 + length]
        try:
            status = int(head.split(b" ", 2)[1])
        except (IndexError, ValueError):
            status = None
        self.waiter.set_result((status, body, self.arrived))
        self.arrived = None


class Connection:
    def __init__(self, source):
        self.source = source
        self.protocol = None

    async def get(self, path, timeout=10):
        loop = asyncio.get_running_loop()
        for attempt in range(2):
            try:
                if self.protocol is None or self.protocol.transport.is_closing():
                    _, self.protocol = await loop.create_connection(Reply, HOST, PORT, local_addr=(self.source, 0))
                self.protocol.waiter = loop.create_future()
                self.protocol.transport.write(f"GET {path} HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
                reply = await asyncio.wait_for(self.protocol.waiter, timeout)
                if reply is None:
                    raise OSError("closed")
                return reply
            except (OSError, asyncio.TimeoutError):
                if self.protocol is not None:
                    self.protocol.transport.close()
                self.protocol = None
        return None, b"", time.monotonic()


def latest(text):
    sequence = int(re.search(r"#EXT-X-MEDIA-SEQUENCE:(\d+)", text).group(1))
    skipped = int(m.group(1)) if (m := re.search(r"SKIPPED-SEGMENTS=(\d+)", text)) else 0
    segments = text.count("#EXTINF")
    tail = text.rsplit("#EXTINF", 1)[-1]
    open_parts = tail.count("#EXT-X-PART:")
    if open_parts:
        return sequence + skipped + segments, open_parts - 1
    return sequence + skipped + segments - 1, text.rsplit("#EXTINF", 1)[0].rsplit("segment_", 1)[-1].count("#EXT-X-PART:") - 1


def source_address(index):
    return f"127.0.1.{index % 250 + 1}" if index < 250 else f"127.0.2.{index % 250 + 1}"


async def poller(index, rung, end, arrivals, counts):
    connection = Connection(source_address(index))
    status, body, _ = await connection.get(rung)
    if status != 200:
        counts["failed"] += 1
        return
    msn, part = latest(body.decode(errors="replace"))
    while time.monotonic() < end:
        status, body, arrived = await connection.get(f"{rung}?_HLS_msn={msn}&_HLS_part={part + 1}&_HLS_skip=YES")
        if status != 200:
            counts["failed"] += 1
            await asyncio.sleep(0.2)
            status, body, _ = await connection.get(rung)
            if status != 200:
                continue
            msn, part = latest(body.decode(errors="replace"))
            continue
        counts["answered"] += 1
        msn, part = latest(body.decode(errors="replace"))
        arrivals.setdefault(f"{msn}/{part}", []).append(arrived)


def rung_process(rung, indices, end, results):
    """One rung's pollers in this process; puts (counts, arrivals by part) on `results`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    arrivals, counts = {}, {"answered": 0, "failed": 0}

    async def run():
        await asyncio.gather(*(poller(index, rung, end, arrivals, counts) for index in indices))
    asyncio.run(run())
    results.put((rung, counts, arrivals))


def health_process(end, results):
    """`/health` twice a second on one keep-alive connection, timed with a blocking socket."""
    times, sock = [], None
    while time.monotonic() < end:
        try:
            if sock is None:
                sock = socket.create_connection((HOST, PORT), timeout=10, source_address=("127.0.3.1", 0))
            start = time.monotonic()
            sock.sendall(f"GET /health HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = sock.recv(65536)
                if not chunk:
                    raise OSError("closed")
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = int(m.group(1)) if (m := LENGTH.search(head)) else 0
            while len(body) < length:
                chunk = sock.recv(65536)
                if not chunk:
                    raise OSError("closed")
                body += chunk
            if head.split(b" ", 2)[1] == b"200":
                times.append(time.monotonic() - start)
        except (OSError, IndexError, ValueError):
            if sock is not None:
                sock.close()
            sock = None
        time.sleep(0.5)
    results.put(("/health", times, None))


def percentile(values, share):
    values = sorted(values)
    return round(values[min(len(values) - 1, int(len(values) * share))] * 1000, 1) if values else None


def main():
    end = time.monotonic() + SECONDS
    results = multiprocessing.Queue()
    processes = [multiprocessing.Process(target=health_process, args=(end, results))]
    for offset, rung in enumerate(RUNGS):
        indices = list(range(offset, COUNT, len(RUNGS)))
        processes.append(multiprocessing.Process(target=rung_process, args=(rung, indices, end, results)))
    for process in processes:
        process.start()
    counts, spreads, health_times, parts = {"answered": 0, "failed": 0}, [], [], 0
    for _ in processes:
        name, first, second = results.get(timeout=SECONDS + 120)
        if name == "/health":
            health_times = first
            continue
        counts["answered"] += first["answered"]
        counts["failed"] += first["failed"]
        parts += len(second)
        spreads += [t - min(times) for times in second.values() if len(times) > 1 for t in times]
    for process in processes:
        process.join()
    print(json.dumps({"pollers": COUNT, **counts, "parts": parts,
                      "spread_ms_p50": percentile(spreads, 0.5), "spread_ms_p99": percentile(spreads, 0.99),
                      "health_ms_p50": percentile(health_times, 0.5), "health_ms_p99": percentile(health_times, 0.99),
                      "health_ms_max": percentile(health_times, 1.0)}), flush=True)


if __name__ == "__main__":
    main()
