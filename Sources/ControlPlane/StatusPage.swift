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
                <tr data-variant="\(html(v.streamGuid))"><td>\(v.abrLevel)</td><td>\(v.width)×\(v.height)</td><td>\(bitRate(v.declaredBitRate))</td>\
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
              <div class="charts">
                \(chart("bitrate", "Bit rate per rung"))\(chart("fps", "Frames per second per rung"))
                \(chart("players", "Players per rung; ticks: switches"))\(chart("latency", "Added latency, worst rung: p50 and p99"))
              </div>
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
          .charts { display: flex; flex-wrap: wrap; gap: 12px; margin: .5em 0; }
          figure { margin: 0; } figcaption { font-size: 90%; color: #555; }
          svg.chart { width: 320px; height: 130px; background: #fafafa; border: 1px solid #ddd; }
          svg.chart text { font: 10px system-ui, sans-serif; fill: #555; }
        </style></head>
        <body>
        <h1>abr-worker</h1>
        <p id="capacity">Capacity: \(String(format: "%.0f", capacity.encodeLoad * 100)) % of \(String(format: "%g", capacity.capacityCores)) cores in use ·
          \(capacity.runningJobs) running of \(capacity.provisionedJobs) jobs · \(capacity.acceptsJob ? "accepts another job" : "full")</p>
        <div class="charts" data-node>\(chart("cpu", "Node CPU (cores)"))\(chart("memory", "Node memory (resident)"))</div>
        \(sections)
        <p><a href="/v1/jobs">/v1/jobs</a> · <a href="/v1/capacity">/v1/capacity</a> · <a href="/v1/history">/v1/history</a> · <a href="/metrics">/metrics</a></p>
        <script>
        "use strict";
        // Figures in the units people read: 950 kbit/s, 2.50 Mbit/s, 42.3 Gbit/s; 87 MiB.
        const rate = b => !b ? "–" : b >= 1e9 ? (b / 1e9).toPrecision(3) + " Gbit/s" : b >= 1e6 ? (b / 1e6).toPrecision(3) + " Mbit/s" : Math.round(b / 1000) + " kbit/s";
        const bytes = n => n >= 2 ** 30 ? (n / 2 ** 30).toPrecision(3) + " GiB" : Math.round(n / 2 ** 20) + " MiB";
        const colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];
        const svgNS = "http://www.w3.org/2000/svg";
        function svgElement(name, attributes, text) {
          const element = document.createElementNS(svgNS, name);
          for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, value);
          if (text != null) element.textContent = text;
          return element;
        }
        // One chart of the last ten minutes: lines (name, [time, value] points), ticks at marked times.
        function draw(svg, lines, format, marks = []) {
          const width = 320, height = 130, left = 4, top = 14, bottom = 14, now = Date.now() / 1000, span = 600;
          const x = t => left + (width - left - 4) * (1 - (now - t) / span);
          const top_ = Math.max(0, ...lines.flatMap(l => l.points.map(p => p[1]))) * 1.1 || 1;
          const y = v => height - bottom - (height - top - bottom) * v / top_;
          const children = [svgElement("line", { x1: left, x2: width - 4, y1: y(0), y2: y(0), stroke: "#bbb" }),
                            svgElement("text", { x: left, y: 10 }, format(top_)),
                            svgElement("text", { x: left, y: height - 2 }, "−10 min"),
                            svgElement("text", { x: width - 4, y: height - 2, "text-anchor": "end" }, "now")];
          for (const t of marks) children.push(svgElement("line", { class: "mark", x1: x(t), x2: x(t), y1: y(0), y2: y(0) - 8, stroke: "#d62728" }));
          lines.forEach((line, index) => {
            const points = line.points.filter(p => p[1] != null && now - p[0] <= span);
            children.push(svgElement("polyline", { fill: "none", stroke: line.color || colors[index % colors.length], "stroke-width": 1.5,
                                                    "data-name": line.name, "data-points": points.length,
                                                    points: points.map(p => x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1)).join(" ") }));
            const last = points[points.length - 1];
            children.push(svgElement("text", { x: width - 4, y: 10 + 11 * index, "text-anchor": "end", fill: line.color || colors[index % colors.length] },
                                     line.name + (last ? " " + format(last[1]) : "")));
          });
          svg.replaceChildren(...children);
        }
        // The ten minutes once, then only what is new each time.
        let samples = [];
        async function drawCharts() {
          const since = samples.length ? "?since=" + samples[samples.length - 1].time : "";
          const history = await (await fetch("/v1/history" + since, { cache: "no-store" })).json();
          samples = samples.concat(history.samples).filter(s => s.time > Date.now() / 1000 - 600);
          const node = document.querySelector("[data-node]");
          draw(node.querySelector("[data-chart=cpu]"), [{ name: "cores", points: samples.map(s => [s.time, s.cpuCores]) }], v => v.toFixed(2));
          draw(node.querySelector("[data-chart=memory]"), [{ name: "RSS", points: samples.map(s => [s.time, s.residentBytes]) }], bytes);
          for (const section of document.querySelectorAll("section[data-job]")) {
            const jobAt = s => s.jobs.find(j => j.streamGuid === section.dataset.job);
            const levels = [...new Set(samples.flatMap(s => (jobAt(s)?.rungs || []).map(r => r.level)))].sort((a, b) => a - b);
            const perRung = field => levels.map((level, index) => ({ name: "L" + level, color: colors[index % colors.length],
              points: samples.map(s => [s.time, jobAt(s)?.rungs.find(r => r.level === level)?.[field]]) }));
            const marks = samples.filter(s => (jobAt(s)?.switches || 0) > 0).map(s => s.time);
            const worst = field => samples.map(s => [s.time, Math.max(...(jobAt(s)?.rungs || []).map(r => r[field] ?? 0), 0)]);
            draw(section.querySelector("[data-chart=bitrate]"), perRung("bitRate"), rate);
            draw(section.querySelector("[data-chart=fps]"), perRung("fps"), v => v.toFixed(1));
            draw(section.querySelector("[data-chart=players]"), perRung("players"), v => v.toFixed(0), marks);
            draw(section.querySelector("[data-chart=latency]"), [{ name: "p50", points: worst("latencyP50Ms") },
                                                                 { name: "p99", points: worst("latencyP99Ms") }], v => v.toFixed(0) + " ms");
          }
        }
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
                set(".avg", rate(v.averageBitRate)); set(".peak", rate(v.peakBitRate)); set(".fps", v.fps);
                set(".frames", v.framesOut); set(".drops", v.shed ? v.droppedFrames + " (shed)" : v.droppedFrames); set(".players", v.players);
                set(".lat", v.latencyP50Ms == null ? "–" : `${v.latencyP50Ms}/${v.latencyP99Ms} ms`);
              }
              const body = section.querySelector("table.players tbody");
              body.replaceChildren(...(job.players || []).map(p => {
                const row = document.createElement("tr");
                row.dataset.session = p.session;
                for (const text of [p.address || p.session, p.transport, p.requested, (p.abrLevel ?? "–") + (p.adaptive ? "" : " (pinned)"),
                                    rate(p.estimateBitRate), p.switches,
                                    p.roundTripMs == null ? "–" : `${p.roundTripMs} ms / ${p.lossPercent ?? 0} %`]) {
                  const cell = document.createElement("td");
                  cell.textContent = text;
                  row.append(cell);
                }
                return row;
              }));
            }
            await drawCharts();
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
            // Up to 1.5× speed towards hls.js's target latency (three parts): at its default of
            // 1× it keeps whatever distance it started at, 1.4 to 2.2 s depending on the moment.
            const hls = new Hls({ lowLatencyMode: true, maxLiveSyncPlaybackRate: 1.5 });
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

    /// An empty chart the page's script draws into.
    static func chart(_ name: String, _ caption: String) -> String {
        "<figure><figcaption>\(html(caption))</figcaption><svg class=\"chart\" data-chart=\"\(name)\" viewBox=\"0 0 320 130\"></svg></figure>"
    }

    /// A bit rate as people read it: 950 kbit/s, 2.50 Mbit/s, 42.3 Gbit/s.
    static func bitRate(_ bitsPerSecond: Int) -> String {
        let value = Double(bitsPerSecond)
        if value >= 1e9 { return String(format: "%.3g Gbit/s", value / 1e9) }
        if value >= 1e6 { return String(format: "%.3g Mbit/s", value / 1e6) }
        return "\(bitsPerSecond / 1000) kbit/s"
    }

    static func html(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
    }
}
