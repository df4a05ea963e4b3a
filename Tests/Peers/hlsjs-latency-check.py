#!/usr/bin/env python3
"""Plays a live HLS rung with hls.js in headless Chromium in low-latency mode, and checks the
node's Low-Latency playlists against the spec's rules while it plays.

Usage: hlsjs-latency-check.py PLAYLIST_URL HLS_JS_MODULE [seconds] [RULES_URL]

PLAYLIST_URL is a rung's media playlist or the multivariant playlist; RULES_URL (default the
same) names the playlists the rules are checked on (a multivariant one: every rung's). HLS_JS_MODULE is hls.js as
an ES module (the copy in PyPI's gradio wheel; `./abr` puts it in .build/hlsjs/hls.mjs). A
local page (served here, on loopback) loads hls.js as the node's status page does (`lowLatencyMode:
true`, `maxLiveSyncPlaybackRate: 1.5`); every second
the script reads hls.js's `latency`, the video's time and which requests the page made (parts,
and playlist reloads that blocked with `_HLS_msn`). Meanwhile it fetches every rung's playlist
itself, full, blocking and as a delta update, and checks:

- every part is no longer than PART-TARGET;
- the parts of a segment add up to its duration;
- the preload hint names the next part (the next playlist's first new part is the hinted one);
- each rendition report names a part that its rung's playlist lists, and whose file exists;
- a delta update is the full playlist minus the segments it says it skips.

Prints JSON lines, then a summary; exits 0 when the video played, hls.js fetched parts and made
blocking reloads, its latency stayed under 2 s after the first seconds, and no rule was broken.
"""
import http.server, importlib.util, json, os, re, sys, threading, time, urllib.error, urllib.parse, urllib.request

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("chromium_video_check", os.path.join(here, "chromium-video-check.py"))
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)

WARM_UP = 8.0  # seconds before latency counts: hls.js seeks to the live edge after its first parts
LATENCY_LIMIT = 2.0

PAGE = """<!doctype html><meta charset="utf-8"><video id="v" muted autoplay playsinline></video>
<script type="module">
import { H as Hls } from "./hls.mjs";
const video = document.getElementById("v");
// As the node's status page configures it: catching up to the target latency at up to 1.5×.
const hls = new Hls({ lowLatencyMode: true, maxLiveSyncPlaybackRate: 1.5 });
window.hlsErrors = [];
hls.on(Hls.Events.ERROR, (_, data) => window.hlsErrors.push(`${data.type}/${data.details}/${data.fatal}`));
hls.loadSource(%s);
hls.attachMedia(video);
video.play().catch(() => {});
window.hls = hls;
</script>"""

PROBE = """JSON.stringify((() => {
  const v = document.getElementById('v'), h = window.hls;
  const names = performance.getEntriesByType('resource').map(e => e.name);
  return { version: h ? h.constructor.version : null, time: v ? v.currentTime : 0, paused: v ? v.paused : true, readyState: v ? v.readyState : 0,
    latency: h ? h.latency : null, targetLatency: h ? h.targetLatency : null,
    parts: names.filter(n => /part_\\d+_\\d+\\.m4s/.test(n)).length,
    blocking: names.filter(n => n.includes('_HLS_msn=')).length,
    errors: window.hlsErrors || [] };
})())"""


def fetch(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, response.read().decode(errors="replace")


class Playlist:
    """A media playlist as the rules need it."""
    def __init__(self, text):
        self.text = text
        self.part_target = None
        self.skip_until = None
        self.media_sequence = 0
        self.skipped = 0
        self.segments = []  # (uri, duration, [(uri, duration)])
        self.open_parts = []
        self.hint = None
        self.reports = []  # (uri, msn, part)
        pending = []
        for line in text.splitlines():
            if line.startswith("#EXT-X-PART-INF:"):
                self.part_target = float(re.search(r"PART-TARGET=([\d.]+)", line).group(1))
            elif line.startswith("#EXT-X-SERVER-CONTROL:") and "CAN-SKIP-UNTIL=" in line:
                self.skip_until = float(re.search(r"CAN-SKIP-UNTIL=([\d.]+)", line).group(1))
            elif line.startswith("#EXT-X-MEDIA-SEQUENCE:"):
                self.media_sequence = int(line.split(":", 1)[1])
            elif line.startswith("#EXT-X-SKIP:"):
                self.skipped = int(re.search(r"SKIPPED-SEGMENTS=(\d+)", line).group(1))
            elif line.startswith("#EXT-X-PART:"):
                pending.append((re.search(r'URI="([^"]+)"', line).group(1), float(re.search(r"DURATION=([\d.]+)", line).group(1))))
            elif line.startswith("#EXTINF:"):
                duration = float(line.split(":", 1)[1].split(",")[0])
            elif line.startswith("#EXT-X-PRELOAD-HINT:"):
                self.hint = re.search(r'URI="([^"]+)"', line).group(1)
            elif line.startswith("#EXT-X-RENDITION-REPORT:"):
                self.reports.append((re.search(r'URI="([^"]+)"', line).group(1), int(re.search(r"LAST-MSN=(\d+)", line).group(1)),
                                     int(re.search(r"LAST-PART=(\d+)", line).group(1))))
            elif line and not line.startswith("#"):
                self.segments.append((line, duration, pending))
                pending = []
        self.open_parts = pending

    def all_parts(self):
        return [p for _, _, parts in self.segments for p in parts] + self.open_parts

    def part_at(self, msn, index):
        """The part `index` of segment `msn` (the open one after the last), or None."""
        first = self.media_sequence + self.skipped
        position = msn - first
        if 0 <= position < len(self.segments):
            parts = self.segments[position][2]
        elif position == len(self.segments):
            parts = self.open_parts
        else:
            return None
        return parts[index] if 0 <= index < len(parts) else None

    def latest(self):
        msn = self.media_sequence + self.skipped + len(self.segments)
        if self.open_parts:
            return msn, len(self.open_parts) - 1
        return msn - 1, max(0, len(self.segments[-1][2]) - 1) if self.segments else 0


class RuleChecker(threading.Thread):
    """Fetches every rung's playlist while the player plays, and checks each against the rules."""
    def __init__(self, playlists, seconds):
        super().__init__(daemon=True)
        self.playlists = playlists
        self.seconds = seconds
        self.broken = []
        self.checked = 0
        self.deltas = 0
        self.skippable_deltas = 0
        self.hints = 0
        self.reports = 0

    def fail(self, message):
        if len(self.broken) < 20:
            self.broken.append(message)

    def check_one(self, url, text, previous):
        playlist = Playlist(text)
        self.checked += 1
        if playlist.part_target is None:
            self.fail(f"{url}: no EXT-X-PART-INF")
            return playlist
        for uri, duration in playlist.all_parts():
            if duration > playlist.part_target + 1e-6:
                self.fail(f"{url}: part {uri} lasts {duration} s, over PART-TARGET {playlist.part_target}")
        for uri, duration, parts in playlist.segments:
            if parts and abs(sum(d for _, d in parts) - duration) > 0.002:
                self.fail(f"{url}: the parts of {uri} add up to {sum(d for _, d in parts):.5f} s, the segment lasts {duration:.5f}")
        if previous is not None and previous.hint:
            known = {uri for uri, _ in previous.all_parts()}
            new = [uri for uri, _ in playlist.all_parts() if uri not in known]
            if new:
                self.hints += 1
                if new[0] != previous.hint:
                    self.fail(f"{url}: the hint named {previous.hint}, the next part was {new[0]}")
        for uri, msn, part in playlist.reports:
            other_url = urllib.parse.urljoin(url, uri)
            status, other_text = fetch(f"{other_url}{'&' if '?' in other_url else '?'}_HLS_msn={msn}&_HLS_part={part}")
            other = Playlist(other_text)
            named = other.part_at(msn, part)
            self.reports += 1
            if status != 200 or named is None:
                self.fail(f"{url}: the report for {uri} names part {part} of segment {msn}, which it does not list")
                continue
            part_status, _ = fetch(urllib.parse.urljoin(other_url, named[0]))
            if part_status != 200:
                self.fail(f"{url}: the reported part {named[0]} of {uri} answers {part_status}")
        return playlist

    def check_delta(self, url, playlist):
        msn, part = playlist.latest()
        separator = "&" if "?" in url else "?"
        _, full_text = fetch(f"{url}{separator}_HLS_msn={msn}&_HLS_part={part}")
        _, delta_text = fetch(f"{url}{separator}_HLS_msn={msn}&_HLS_part={part}&_HLS_skip=YES")
        full, delta = Playlist(full_text), Playlist(delta_text)
        if full.latest() != delta.latest():
            return  # the playlist moved on between the two requests
        self.deltas += 1
        # Segments that end more than CAN-SKIP-UNTIL before the playlist's end may be skipped.
        total = sum(d for _, d, _ in full.segments) + sum(d for _, d in full.open_parts)
        skippable = full.skip_until is not None and full.segments and total - full.segments[0][1] > full.skip_until + 0.01
        if skippable and delta.skipped == 0:
            self.fail(f"{url}: a delta update skipped nothing, though its first segment ends {total - full.segments[0][1]:.1f} s before the end")
        if skippable:
            self.skippable_deltas += 1
        if [s[0] for s in full.segments[delta.skipped:]] != [s[0] for s in delta.segments] or full.open_parts != delta.open_parts:
            self.fail(f"{url}: the delta update is not the full playlist minus its {delta.skipped} skipped segments")

    def run(self):
        end = time.time() + self.seconds
        previous = {}
        rounds = 0
        while time.time() < end:
            for url in self.playlists:
                try:
                    _, text = fetch(url)
                    previous[url] = self.check_one(url, text, previous.get(url))
                    if rounds % 4 == 0:
                        self.check_delta(url, previous[url])
                except (urllib.error.URLError, OSError, ValueError, AttributeError) as error:
                    self.fail(f"{url}: {error}")
            rounds += 1
            time.sleep(0.4)


def rung_playlists(url):
    """The media playlists a URL leads to: itself, or every rung of a multivariant playlist."""
    _, text = fetch(url)
    if "#EXT-X-STREAM-INF" not in text:
        return [url]
    return [urllib.parse.urljoin(url, line) for line in text.splitlines() if line and not line.startswith("#")]


def main():
    url, module = sys.argv[1], sys.argv[2]
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 30
    hls_js = open(module, "rb").read()
    page = (PAGE % json.dumps(url)).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body, kind = (hls_js, "text/javascript") if self.path.startswith("/hls.mjs") else (page, "text/html")
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    rules = RuleChecker(rung_playlists(sys.argv[4] if len(sys.argv) > 4 else url), seconds)
    rules.start()
    browser = check.Browser(f"http://127.0.0.1:{server.server_address[1]}/")
    samples = []
    try:
        if browser.devtools is None:
            print(json.dumps({"error": "chromium did not open its DevTools port"}))
            return 2
        start = time.time()
        while time.time() - start < seconds:
            value = browser.evaluate(PROBE)
            sample = json.loads(value) if value else {}
            sample["t"] = round(time.time() - start, 1)
            samples.append(sample)
            print(json.dumps(sample), flush=True)
            time.sleep(1)
    finally:
        browser.close()
        server.shutdown()
    rules.join(timeout=15)
    played = [s for s in samples if s.get("time", 0) > 0]
    counted = [s["latency"] for s in samples if s["t"] >= WARM_UP and s.get("latency") is not None and s.get("time", 0) > 0]
    last = samples[-1] if samples else {}
    advanced = (played[-1]["time"] - played[0]["time"]) if len(played) > 1 else 0
    summary = {
        "hlsjs": last.get("version"), "played": advanced >= seconds / 3, "advanced": round(advanced, 2),
        "latency_max": max(counted) if counted else None,
        "latency_median": sorted(counted)[len(counted) // 2] if counted else None,
        "latency_samples": len(counted), "targetLatency": last.get("targetLatency"),
        "parts": last.get("parts", 0), "blocking_reloads": last.get("blocking", 0), "hls_errors": last.get("errors", [])[:10],
        "playlists_checked": rules.checked, "deltas_checked": rules.deltas, "deltas_with_skips": rules.skippable_deltas, "hints_checked": rules.hints,
        "reports_checked": rules.reports, "rules_broken": rules.broken,
    }
    ok = (summary["played"] and counted and max(counted) < LATENCY_LIMIT and summary["parts"] > 0 and summary["blocking_reloads"] > 0
          and not rules.broken and rules.checked > 0 and rules.skippable_deltas > 0 and rules.hints > 0)
    summary["ok"] = bool(ok)
    print(json.dumps(summary), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
