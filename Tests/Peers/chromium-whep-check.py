#!/usr/bin/env python3
"""Plays a stream over WHEP in headless Chromium (the node's own player page) and reports what
Chromium decoded, from the page's RTCPeerConnection getStats().

Usage: chromium-whep-check.py PAGE_URL [seconds] [min_frames] [audio]

With min_frames 0 it watches for all of `seconds`, a line every half second (for a test that
changes the link meanwhile), and exits 0 if anything was decoded.

Prints one JSON line per second (framesDecoded, frameWidth, frameHeight, freezeCount, the page's
status line; with audio, the samples played and concealed, and the audio's playout against the
video's) and a summary; exits 0 once framesDecoded reached min_frames (default 60) with a
picture of nonzero width (and, with `audio`, two seconds of audio played), 1 otherwise, 2 when
Chromium could not be driven.

Latency: the node's sender reports put each picture at the wall-clock time the node had it, so
the video's estimatedPlayoutTimestamp against the browser's clock (the same machine's) is how long
after that the picture plays (playoutLagMs).

Lip sync: each inbound-rtp's estimatedPlayoutTimestamp is the sender's NTP time (from its RTCP
sender reports) of what plays now, so audio's minus video's is how far apart they play.
"""
import importlib.util, json, os, signal, sys, time

# A test or benchmark that stops this script with SIGTERM gets Chromium closed too (`finally`).
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("chromium_video_check", os.path.join(here, "chromium-video-check.py"))
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)

STATS = """(async () => {
  const status = (document.getElementById('status') || {}).textContent || '';
  if (!window.pc) return JSON.stringify({status});
  const report = await window.pc.getStats();
  let video = {}, audio = {};
  report.forEach(s => { if (s.type === 'inbound-rtp' && s.kind === 'video') video = s;
                        if (s.type === 'inbound-rtp' && s.kind === 'audio') audio = s; });
  const sync = audio.estimatedPlayoutTimestamp && video.estimatedPlayoutTimestamp
    ? audio.estimatedPlayoutTimestamp - video.estimatedPlayoutTimestamp : null;
  return JSON.stringify({status, connection: window.pc.connectionState, reconnections: window.restarts || 0, framesDecoded: video.framesDecoded || 0,
    frameWidth: video.frameWidth || 0, frameHeight: video.frameHeight || 0, freezeCount: video.freezeCount || 0,
    totalFreezesDuration: video.totalFreezesDuration || 0, pliCount: video.pliCount || 0, framesDropped: video.framesDropped || 0,
    packetsLost: video.packetsLost || 0, nackCount: video.nackCount || 0, firstDecodedAfterPost: window.firstDecodedAfterPost || null,
    bytesReceived: video.bytesReceived || 0, audioBytesReceived: audio.bytesReceived || 0,
    audioHeaderBytesReceived: audio.headerBytesReceived || 0, audioPacketsReceived: audio.packetsReceived || 0,
    playoutLagMs: video.estimatedPlayoutTimestamp ? Date.now() + 2208988800000 - video.estimatedPlayoutTimestamp : null,
    audioSamples: audio.totalSamplesReceived || 0, audioConcealed: audio.concealedSamples || 0, audioAheadOfVideoMs: sync,
    jitterBufferDelay: video.jitterBufferDelay || 0, jitterBufferTargetDelay: video.jitterBufferTargetDelay || 0,
    jitterBufferEmittedCount: video.jitterBufferEmittedCount || 0, totalDecodeTime: video.totalDecodeTime || 0,
    framesReceived: video.framesReceived || 0, keyFramesDecoded: video.keyFramesDecoded || 0,
    audioJitterBufferDelay: audio.jitterBufferDelay || 0, audioJitterBufferTargetDelay: audio.jitterBufferTargetDelay || 0,
    audioJitterBufferEmittedCount: audio.jitterBufferEmittedCount || 0});
})()"""

# Counters that start again at zero on each new peer connection (the page posts a new session
# after ICE fails): carried over so a run reads as one viewer's.
COUNTERS = ["framesDecoded", "freezeCount", "totalFreezesDuration", "pliCount", "framesDropped", "packetsLost", "nackCount",
            "bytesReceived", "audioBytesReceived", "audioHeaderBytesReceived", "audioPacketsReceived", "audioSamples",
            "audioConcealed", "jitterBufferDelay", "jitterBufferTargetDelay", "jitterBufferEmittedCount", "totalDecodeTime",
            "framesReceived", "keyFramesDecoded", "audioJitterBufferDelay", "audioJitterBufferTargetDelay",
            "audioJitterBufferEmittedCount"]

class Carry:
    """Adds what earlier connections counted. The time from the last picture of a failed
    connection to the first of the next counts as one freeze: Chromium never counts it (the
    failed connection decodes nothing more, the new one starts with no freeze)."""
    def __init__(self):
        self.carried = {name: 0 for name in COUNTERS}
        self.previous = None
        self.last_progress = None
        self.gap_from = None

    def __call__(self, row):
        if self.previous is not None and row.get("reconnections", 0) != self.previous.get("reconnections", 0):
            for name in COUNTERS:
                self.carried[name] += self.previous.get(name, 0)
            self.gap_from = self.last_progress
            self.previous = None
        raw = dict(row)
        if self.gap_from is not None and row.get("framesDecoded", 0) > 0:
            self.carried["totalFreezesDuration"] += row["wall"] - self.gap_from
            self.carried["freezeCount"] += 1
            self.gap_from = None
        for name in COUNTERS:
            if isinstance(row.get(name), (int, float)):
                row[name] = row[name] + self.carried[name]
        if self.previous is None or raw.get("framesDecoded", 0) > self.previous.get("framesDecoded", 0):
            self.last_progress = row["wall"]
        self.previous = raw
        return row

def main():
    url = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 20
    wanted = int(sys.argv[3]) if len(sys.argv) > 3 else 60
    needs_audio = len(sys.argv) > 4 and sys.argv[4] == "audio"
    done = lambda r: r.get("framesDecoded", 0) >= wanted and r.get("frameWidth", 0) > 0 and (
        not needs_audio or r.get("audioSamples", 0) >= 2 * 48000)
    # Chromium keeps WebRTC off loopback unless told (the node and the page are both on 127.0.0.1).
    browser = check.Browser(url, flags=["--allow-loopback-in-peer-connection"])
    try:
        if browser.devtools is None:
            print(json.dumps({"error": "chromium did not open its DevTools port"}))
            return 2
        last = {}
        carry = Carry()
        start = time.time()
        end = start + seconds
        while time.time() < end:
            value = browser.evaluate(STATS, await_promise=True)
            last = json.loads(value or "{}")
            last["t"] = round(time.time() - start, 2)
            last["wall"] = round(time.time(), 3)
            last = carry(last)
            print(json.dumps(last), flush=True)
            if wanted == 0:
                time.sleep(0.5)
                continue
            if done(last):
                break
            time.sleep(1)
        if wanted == 0:
            print(json.dumps({"decoded": last.get("framesDecoded", 0) > 0, **last}), flush=True)
            return 0 if last.get("framesDecoded", 0) > 0 else 1
        ok = done(last)
        print(json.dumps({"decoded": ok, **last}), flush=True)
        return 0 if ok else 1
    finally:
        # The session ends now, as a page closed by its viewer ends it (DELETE on its WHEP
        # resource): left to the node's 30 s silence timeout, the media it is still sent shares a
        # shaped link with whatever plays next.
        try:
            browser.evaluate("window.whepResource ? fetch(window.whepResource, {method: 'DELETE'}).then(r => r.status) : 0", await_promise=True)
        except Exception:
            pass
        browser.close()

if __name__ == "__main__":
    sys.exit(main())
