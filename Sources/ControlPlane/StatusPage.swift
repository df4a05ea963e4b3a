import Foundation

/// `GET /`: the node at a glance. Each job with its variants' live figures (refreshed from
/// `/v1/jobs` every two seconds) and a `<video>` on its master playlist: played by hls.js in
/// low-latency mode when the node serves it (`--hls-js`), else natively. No external scripts or
/// styles: it works on an air-gapped node, and Safari/Chromium play HLS natively.
enum StatusPage {
    /// Where the node serves hls.js when it has it.
    static let hlsScriptPath = "/assets/hls.mjs"

    /// The rung's player page, or why WebRTC cannot carry it (the page would start a lower rung).
    static func webrtcLink(_ variant: ControlPlane.JobView.VariantView) -> String {
        if let why = variant.webrtcUnavailable { return " <span title=\"\(html(why))\">no WebRTC (B-frames)</span>" }
        return " <a href=\"/play/\(html(variant.streamGuid))\">WebRTC</a>"
    }

    static func render(_ plane: ControlPlane) -> String {
        let jobs = plane.jobViews()
        let capacity = plane.capacitySnapshot()
        let rtsp = plane.rtspBaseURL ?? "rtsp://(not listening)"
        let webrtc = plane.webrtcPort != nil
        let lowLatency = plane.configuration.hlsPlayerScript != nil
        var sections = ""
        for job in jobs {
            let id = html(job.streamGuid)
            let rows = job.variants.map { v in
                """
                <tr data-variant="\(html(v.streamGuid))"><td>\(v.abrLevel)</td><td>\(v.width)×\(v.height)</td><td>\(v.declaredBitRate / 1000)k</td>\
                <td class="avg">–</td><td class="peak">–</td><td class="fps">–</td><td class="frames">–</td><td class="drops">–</td>\
                <td class="players">–</td><td class="lat">–</td><td><a href="\(html(v.hls))">HLS</a>\(webrtc ? webrtcLink(v) : "") <code>\(html(v.rtsp ?? "\(rtsp)/\(v.streamGuid)"))</code></td></tr>
                """
            }.joined(separator: "\n")
            sections += """
            <section data-job="\(id)">
              <h2>\(id) <span class="state">\(html(job.state))</span></h2>
              <p>Publish to \(plane.publishURLs(top: job.variants.first?.streamGuid ?? "").map { "<code>\(html($0))</code>" }.joined(separator: " or ")) ·
                 <a href="\(html(job.hlsMaster))">master.m3u8</a> · <a href="/v1/streams/\(id)/abr">hints</a> ·
                 <a href="/v1/streams/\(id)/events">events</a> · <span class="publisher"></span></p>
              <video controls muted autoplay playsinline preload="auto" width="640" \(lowLatency ? "data-hls" : "src")="\(html(job.hlsMaster))"></video>
              <p>Player position: <span class="position">not playing</span></p>
              <table><thead><tr><th>Level</th><th>Size</th><th>Declared</th><th>Average</th><th>Peak</th><th>fps</th><th>Frames</th>\
            <th>Drops</th><th>Players</th><th>Latency p50/p99</th><th>Play</th></tr></thead>
              <tbody>\(rows)</tbody></table>
              <table class="players"><thead><tr><th>Player</th><th>Transport</th><th>Asked for</th><th>Level now</th>\
            <th>Estimate</th><th>Switches</th><th>RTT / loss</th></tr></thead><tbody></tbody></table>
            </section>
            """
        }
        if jobs.isEmpty {
            sections = "<p>No stream is provisioned. POST one to <code>/as/v1/streams/provision/{nodeGroup}</code>.</p>"
        }
        return """
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8"><title>abr-worker</title>
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <style>
          body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }
          table { border-collapse: collapse; margin: .5em 0 1.5em; }
          td, th { border: 1px solid #ccc; padding: 2px 8px; text-align: right; }
          .state { font-size: 60%; padding: 2px 6px; border-radius: 4px; background: #eee; }
          video { background: #000; max-width: 100%; }
        </style></head>
        <body>
        <h1>abr-worker</h1>
        <p id="capacity">Capacity: \(String(format: "%.0f", capacity.encodeLoad * 100)) % of \(String(format: "%g", capacity.capacityCores)) cores in use ·
          \(capacity.runningJobs) running of \(capacity.provisionedJobs) jobs · \(capacity.acceptsJob ? "accepts another job" : "full")</p>
        \(sections)
        <p><a href="/v1/jobs">/v1/jobs</a> · <a href="/v1/capacity">/v1/capacity</a> · <a href="/metrics">/metrics</a></p>
        <script>
        "use strict";
        const kbps = b => b ? Math.round(b / 1000) + "k" : "–";
        async function refresh() {
          try {
            const jobs = await (await fetch("/v1/jobs", { cache: "no-store" })).json();
            for (const job of jobs) {
              const section = [...document.querySelectorAll("section[data-job]")].find(s => s.dataset.job === job.streamGuid);
              if (!section) continue;
              section.querySelector(".state").textContent = job.state;
              const p = job.publisher;
              section.querySelector(".publisher").textContent = p ? `publisher ${p.address} (${p.protocol || "rtsp"}), ${p.width}×${p.height} ${p.codecs || ""} ${p.fps || ""} fps` : "no publisher";
              for (const v of job.variants) {
                const row = [...section.querySelectorAll("tr[data-variant]")].find(r => r.dataset.variant === v.streamGuid);
                if (!row) continue;
                const set = (c, t) => row.querySelector(c).textContent = t;
                set(".avg", kbps(v.averageBitRate)); set(".peak", kbps(v.peakBitRate)); set(".fps", v.fps);
                set(".frames", v.framesOut); set(".drops", v.shed ? v.droppedFrames + " (shed)" : v.droppedFrames); set(".players", v.players);
                set(".lat", v.latencyP50Ms == null ? "–" : `${v.latencyP50Ms}/${v.latencyP99Ms} ms`);
              }
              const body = section.querySelector("table.players tbody");
              body.replaceChildren(...(job.players || []).map(p => {
                const row = document.createElement("tr");
                row.dataset.session = p.session;
                for (const text of [p.address || p.session, p.transport, p.requested, (p.abrLevel ?? "–") + (p.adaptive ? "" : " (pinned)"),
                                    kbps(p.estimateBitRate), p.switches,
                                    p.roundTripMs == null ? "–" : `${p.roundTripMs} ms / ${p.lossPercent ?? 0} %`]) {
                  const cell = document.createElement("td");
                  cell.textContent = text;
                  row.append(cell);
                }
                return row;
              }));
            }
          } catch (e) { /* the node restarting: try again next time */ }
          for (const section of document.querySelectorAll("section[data-job]")) {
            const video = section.querySelector("video");
            const position = section.querySelector(".position");
            if (video.error) { position.textContent = "error " + video.error.code; }
            else if (video.currentTime > 0) { position.textContent = video.currentTime.toFixed(1) + " s"; }
            position.dataset.seconds = video.currentTime;
            // A live playlist that was not there yet at page load: try again (hls.js retries on its own).
            if (!video.dataset.hls && (video.error || (video.readyState === 0 && video.networkState === 3))) { video.load(); video.play().catch(() => {}); }
          }
        }
        for (const video of document.querySelectorAll("video")) video.play().catch(() => {});
        refresh();
        setInterval(refresh, 2000);
        </script>\(lowLatency ? Self.lowLatencyPlayer : "")
        </body></html>
        """
    }

    /// hls.js on every `video[data-hls]`, in low-latency mode (parts, blocking reloads); where
    /// the browser has no Media Source Extensions (iOS Safari), its own player, which knows
    /// Low-Latency HLS too.
    static let lowLatencyPlayer = """

        <script type="module">
        import { H as Hls } from "\(hlsScriptPath)";
        for (const video of document.querySelectorAll("video[data-hls]")) {
          if (Hls.isSupported()) {
            const hls = new Hls({ lowLatencyMode: true });
            hls.loadSource(video.dataset.hls);
            hls.attachMedia(video);
            video.hls = hls;
          } else {
            video.src = video.dataset.hls;
          }
          video.play().catch(() => {});
        }
        </script>
        """

    static func html(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
    }
}
