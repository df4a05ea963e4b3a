#!/usr/bin/env python3
"""Opens the node's status page in headless Chromium, waits for its charts to have data, and
takes a screenshot.

Usage: chromium-status-charts.py URL SCREENSHOT.png [seconds]

Every second it reads each `svg.chart`: its name and, per line, how many points it drew. Prints
a final JSON summary; exits 0 when every chart has a line of at least 2 points and the screenshot
was written, 1 otherwise, 2 when Chromium could not be driven.
"""
import base64, importlib.util, json, os, sys, time

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("chromium_video_check", os.path.join(here, "chromium-video-check.py"))
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)

PROBE = """JSON.stringify([...document.querySelectorAll('svg.chart')].map(svg => ({
  chart: svg.dataset.chart, job: svg.closest('section')?.dataset.job || null,
  lines: [...svg.querySelectorAll('polyline')].map(p => ({ name: p.dataset.name, points: Number(p.dataset.points) })),
  marks: svg.querySelectorAll('line.mark').length,
  labels: [...svg.querySelectorAll('text')].map(t => t.textContent) })))"""

def main():
    url, screenshot = sys.argv[1], sys.argv[2]
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 30
    browser = check.Browser(url, flags=["--window-size=1280,1600"])
    try:
        if browser.devtools is None:
            print(json.dumps({"error": "chromium did not open its DevTools port"}))
            return 2
        charts, end = [], time.time() + seconds
        while time.time() < end:
            charts = json.loads(browser.evaluate(PROBE) or "[]")
            if charts and all(any(line["points"] >= 2 for line in chart["lines"]) for chart in charts):
                break
            time.sleep(1)
        shot = browser.devtools.call("Page.captureScreenshot", {"format": "png"})
        data = base64.b64decode(shot.get("result", {}).get("data", ""))
        with open(screenshot, "wb") as file:
            file.write(data)
        drawn = bool(charts) and all(any(line["points"] >= 2 for line in chart["lines"]) for chart in charts)
        print(json.dumps({"drawn": drawn, "screenshotBytes": len(data), "charts": charts}), flush=True)
        return 0 if drawn and data.startswith(b"\x89PNG") else 1
    finally:
        browser.close()

if __name__ == "__main__":
    sys.exit(main())
