#!/usr/bin/env python3
"""Open-loop node requests: RATE requests a second for SECONDS, spread over the given nodes'
HTTP bases, half publish and half subscribe requests over the given stream names. Latency is
measured from each request's scheduled time (so a stall is not hidden by sending less), on
keep-alive connections, one per worker thread. Prints JSON: count, errors by status, p50/p90/p99/max ms.

    fleet-requests.py RATE SECONDS http://127.0.0.1:PORT[,http://127.0.0.2:PORT...] live/a,live/b,...
"""
import http.client, json, sys, threading, time, urllib.parse

rate, seconds = float(sys.argv[1]), float(sys.argv[2])
bases = sys.argv[3].split(",")
streams = sys.argv[4].split(",")
workers = 16
latencies, statuses, lock = [], {}, threading.Lock()
start = time.monotonic() + 0.5
total = int(rate * seconds)

def worker(index):
    connections = {}
    for n in range(index, total, workers):
        due = start + n / rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        base = urllib.parse.urlparse(bases[n % len(bases)])
        # Each stream gets a publish request, then a subscribe request (answered by the node it was placed on).
        stream = streams[(n // 2) % len(streams)]
        path = (f"/as/v1/streams/stream/default/publish/{stream}_1?transcode=true" if n % 2 == 0
                else f"/as/v1/streams/stream/default/subscribe/{stream}_2")
        status = 0
        for attempt in range(2):
            connection = connections.get(base.netloc) or http.client.HTTPConnection(base.hostname, base.port, timeout=10)
            connections[base.netloc] = connection
            try:
                connection.request("GET", path)
                response = connection.getresponse()
                response.read()
                status = response.status
                break
            except Exception:
                connection.close()
                connections.pop(base.netloc, None)
        elapsed = (time.monotonic() - due) * 1000
        with lock:
            latencies.append(elapsed)
            statuses[status] = statuses.get(status, 0) + 1

threads = [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
for t in threads: t.start()
for t in threads: t.join()
latencies.sort()
pick = lambda q: round(latencies[min(len(latencies) - 1, int(q * len(latencies)))], 2)
print(json.dumps({"requests": len(latencies), "statuses": statuses, "p50_ms": pick(0.5), "p90_ms": pick(0.9),
                  "p99_ms": pick(0.99), "max_ms": round(latencies[-1], 2)}))
