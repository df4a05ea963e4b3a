#!/usr/bin/env python3
"""Plays a stream over WHEP in headless Chromium (the node's own player page) and reports what
Chromium decoded, from the page's RTCPeerConnection getStats().

Usage: chromium-whep-check.py PAGE_URL [seconds] [min_frames]

Prints one JSON line per second (framesDecoded, frameWidth, frameHeight, freezeCount, the page's
status line) and a summary; exits 0 once framesDecoded reached min_frames (default 60) with a
picture of nonzero width, 1 otherwise, 2 when Chromium could not be driven.
"""
import importlib.util, json, os, sys, time

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("chromium_video_check", os.path.join(here, "chromium-video-check.py"))
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)

STATS = """(async () => {
  const status = (document.getElementById('status') || {}).textContent || '';
  if (!window.pc) return JSON.stringify({status});
  const report = await window.pc.getStats();
  let video = {};
  report.forEach(s => { if (s.type === 'inbound-rtp' && s.kind === 'video') video = s; });
  return JSON.stringify({status, connection: window.pc.connectionState, framesDecoded: video.framesDecoded || 0,
    frameWidth: video.frameWidth || 0, frameHeight: video.frameHeight || 0, freezeCount: video.freezeCount || 0,
    packetsLost: video.packetsLost || 0, nackCount: video.nackCount || 0, firstDecodedAfterPost: window.firstDecodedAfterPost || null});
})()"""

def main():
    url = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 20
    wanted = int(sys.argv[3]) if len(sys.argv) > 3 else 60
    # Chromium keeps WebRTC off loopback unless told (the node and the page are both on 127.0.0.1).
    browser = check.Browser(url, flags=["--allow-loopback-in-peer-connection"])
    try:
        if browser.devtools is None:
            print(json.dumps({"error": "chromium did not open its DevTools port"}))
            return 2
        last = {}
        end = time.time() + seconds
        while time.time() < end:
            value = browser.evaluate(STATS, await_promise=True)
            last = json.loads(value or "{}")
            print(json.dumps(last), flush=True)
            if last.get("framesDecoded", 0) >= wanted and last.get("frameWidth", 0) > 0:
                break
            time.sleep(1)
        ok = last.get("framesDecoded", 0) >= wanted and last.get("frameWidth", 0) > 0
        print(json.dumps({"decoded": ok, **last}), flush=True)
        return 0 if ok else 1
    finally:
        browser.close()

if __name__ == "__main__":
    sys.exit(main())
