import Foundation
import Synchronization
import Testing
import TestSupport

/// Low-Latency HLS end to end: hls.js in headless Chromium plays a live rung under 2 s behind
/// live, with parts and blocking reloads, while every rung's playlists are checked against the
/// spec's rules; a player that knows nothing of it (GStreamer's hlsdemux2) plays the same
/// playlists; and `--hls-low-latency off` gives the plain ones back.
@Suite(.serialized) struct LowLatencyHLSTests {
    static func scratch() -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("abr-llhls-\(UUID().uuidString)")
    }

    static var peers: URL { fixturesDirectory.deletingLastPathComponent().appendingPathComponent("Tests/Peers") }

    /// hls.js as an ES module, where `./abr test` puts it (from PyPI's gradio wheel).
    static var hlsJS: URL { fixturesDirectory.deletingLastPathComponent().appendingPathComponent(".build/hlsjs/hls.mjs") }

    static func liveNode(_ scratch: URL, extra: [String] = []) throws -> ServeProcess {
        try ServeProcess(dataDirectory: scratch.appendingPathComponent("data"),
                         arguments: ["--provision", fixture("provisions/sm2-3-level.json"), "--publish-loop", fixture("720p30-h264-aac.mp4")] + extra,
                         environment: ServeTests.credentials)
    }

    @Test func hlsJsPlaysARungUnderTwoSecondsBehindLiveAndEveryPlaylistKeepsTheRules() throws {
        #expect(FileManager.default.fileExists(atPath: Self.hlsJS.path), "hls.js is missing at \(Self.hlsJS.path): `./abr test` fetches it")
        let scratch = Self.scratch()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let node = try Self.liveNode(scratch, extra: ["--hls-js", Self.hlsJS.path])
        defer { node.stop() }
        let rung = "/hls/live/stream1/stream1_3/index.m3u8"
        let ready = node.waitFor(timeout: 40) {
            let master = try? node.http("GET", "/hls/live/stream1/master.m3u8")
            let playlist = try? node.http("GET", rung)
            return master?.status == 200 && (playlist?.body.components(separatedBy: "#EXTINF").count ?? 0) >= 3
        }
        #expect(ready)

        // Requests the node cannot answer are refused at once, saying why.
        let ahead = try node.http("GET", rung + "?_HLS_msn=999999&_HLS_part=0")
        #expect(ahead.status == 400 && ahead.body.contains("_HLS_msn=999999 is more than 2 segments past"), "\(ahead)")
        let partAlone = try node.http("GET", rung + "?_HLS_part=1")
        #expect(partAlone.status == 400 && partAlone.body.contains("_HLS_part needs _HLS_msn"), "\(partAlone)")
        let badSkip = try node.http("GET", rung + "?_HLS_skip=please")
        #expect(badSkip.status == 400 && badSkip.body.contains("_HLS_skip: expected YES or v2"), "\(badSkip)")

        let check = try runProcess("/usr/bin/python3", [Self.peers.appendingPathComponent("hlsjs-latency-check.py").path,
                                                        node.httpBase + rung, Self.hlsJS.path, "35",
                                                        node.httpBase + "/hls/live/stream1/master.m3u8"], timeout: 120)
        #expect(check.status == 0, "\(check.stdout.suffix(2500)) \(check.stderr.suffix(800))")
        #expect(check.stdout.contains("\"hlsjs\": \"1.6."), "the player is hls.js 1.6: \(check.stdout.suffix(400))")
    }

    /// Two more players of the same playlists at once, neither of them timed (so this runs beside
    /// the other suites, not alone as the latency test does): GStreamer's hlsdemux2, which knows no
    /// parts and plays them as segments, and the status page's hls.js in Chromium.
    @Test func theStatusPagesHlsJsAndGStreamerPlayTheLowLatencyPlaylists() throws {
        let scratch = Self.scratch()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let node = try Self.liveNode(scratch, extra: ["--hls-js", Self.hlsJS.path])
        defer { node.stop() }
        let ready = node.waitFor(timeout: 40) {
            ((try? node.http("GET", "/hls/live/stream1/stream1_2/index.m3u8"))?.body.components(separatedBy: "#EXTINF").count ?? 0) >= 3
        }
        #expect(ready)
        let gstreamer = Mutex<(ended: Bool, result: ProcessResult?)>((false, nil))
        let gstreamerThread = Thread {
            let result = try? runProcess("/usr/bin/python3", [Self.peers.appendingPathComponent("gst-hls-check.py").path,
                                                              node.httpBase + "/hls/live/stream1/stream1_2/index.m3u8", "20"], timeout: 90)
            gstreamer.withLock { $0 = (true, result) }
        }
        gstreamerThread.start()
        // The status page's player is hls.js, from the node, in low-latency mode.
        let page = try node.http("GET", "/")
        #expect(page.body.contains("import { H as Hls } from \"/assets/hls.mjs\"") && page.body.contains("data-hls=\"/hls/live/stream1/master.m3u8\""))
        #expect(try node.http("GET", "/assets/hls.mjs").status == 200)
        let statusPage = try runProcess("/usr/bin/python3", [Self.peers.appendingPathComponent("chromium-video-check.py").path, node.httpBase + "/", "30"],
                                        timeout: 90)
        #expect(statusPage.status == 0, "\(statusPage.stdout.suffix(1500)) \(statusPage.stderr.suffix(500))")
        #expect(waitUntil(timeout: 100) { gstreamer.withLock { $0.ended } }, "gst-hls-check.py did not end")
        let played = try #require(gstreamer.withLock { $0.result }, "gst-hls-check.py did not run")
        #expect(played.status == 0, "\(played.stdout.suffix(1000)) \(played.stderr.suffix(800))")
    }

    @Test func turnedOffThePlaylistsArePlainHLS() throws {
        let scratch = Self.scratch()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let node = try Self.liveNode(scratch, extra: ["--hls-low-latency", "off"])
        defer { node.stop() }
        let rung = "/hls/live/stream1/stream1_3/index.m3u8"
        var text = ""
        let ready = node.waitFor(timeout: 40) {
            text = (try? node.http("GET", rung))?.body ?? ""
            return text.components(separatedBy: "#EXTINF").count >= 2
        }
        #expect(ready)
        #expect(!text.contains("#EXT-X-PART") && !text.contains("#EXT-X-SERVER-CONTROL") && !text.contains("PRELOAD-HINT"), "\(text)")
        let files = try FileManager.default.contentsOfDirectory(atPath: scratch.appendingPathComponent("data/hls/live/stream1/stream1_3").path)
        #expect(!files.contains { $0.hasPrefix("part_") }, "\(files)")
        // A directive to a plain playlist is ignored, as by any server without Low-Latency HLS.
        let blocking = try node.http("GET", rung + "?_HLS_msn=999999&_HLS_part=0")
        #expect(blocking.status == 200 && blocking.body.hasPrefix("#EXTM3U"))
        #expect(try node.http("GET", "/hls/live/stream1/master.m3u8").status == 200)
        // Without --hls-js the status page plays natively, and there is no script to serve.
        #expect(try node.http("GET", "/").body.contains("src=\"/hls/live/stream1/master.m3u8\""))
        #expect(try node.http("GET", "/assets/hls.mjs").status == 404)
    }

    /// With a certificate the HTTP port is HTTPS, and speaks HTTP/2 to players that offer it
    /// (Apple's ask for Low-Latency HLS over HTTP/2) and HTTP/1.1 to the rest; a blocked reload
    /// works over either. A certificate that cannot be used stops the node with the file's name.
    @Test func overHTTPSPlayersGetHTTP2() throws {
        let scratch = Self.scratch()
        defer { try? FileManager.default.removeItem(at: scratch) }
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        let certificate = scratch.appendingPathComponent("cert.pem").path, key = scratch.appendingPathComponent("key.pem").path
        let made = try runProcess("/usr/bin/openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                                                       "-keyout", key, "-out", certificate, "-days", "1", "-subj", "/CN=127.0.0.1",
                                                       "-addext", "subjectAltName=IP:127.0.0.1"], timeout: 30)
        #expect(made.status == 0, "\(made.stderr)")

        let wrong = try runProcess(workerExecutable, ["serve", "--data-dir", scratch.appendingPathComponent("wrong").path, "--tls-cert", key,
                                                      "--tls-key", key, "--http-port", "0", "--rtsp-port", "0"], timeout: 30)
        #expect(wrong.status != 0 && (wrong.stderr + wrong.stdout).contains("--tls-cert \(key): not a readable PEM certificate"),
                "\(wrong.stderr) \(wrong.stdout)")
        let alone = try runProcess(workerExecutable, ["serve", "--data-dir", scratch.appendingPathComponent("alone").path, "--tls-cert", certificate],
                                   timeout: 30)
        #expect(alone.status != 0 && (alone.stderr + alone.stdout).contains("--tls-cert and --tls-key go together"), "\(alone.stderr)")

        let node = try Self.liveNode(scratch, extra: ["--tls-cert", certificate, "--tls-key", key])
        defer { node.stop() }
        #expect(node.httpBase.hasPrefix("https://"))
        let rung = "/hls/live/stream1/stream1_3/index.m3u8"
        var text = ""
        let ready = node.waitFor(timeout: 40) {
            text = (try? node.http("GET", rung))?.body ?? ""
            return text.components(separatedBy: "#EXTINF").count >= 2 && text.contains("#EXT-X-PRELOAD-HINT")
        }
        #expect(ready, "\(text)")
        let hint = text.firstMatch(of: /PRELOAD-HINT:TYPE=PART,URI="part_(\d+)_(\d+)\.m4s"/)
        let mediaSequence = Int(text.firstMatch(of: /#EXT-X-MEDIA-SEQUENCE:(\d+)/)?.output.1 ?? "") ?? 0
        let next = mediaSequence + text.components(separatedBy: "#EXTINF").count - 1
        let part = Int(hint?.output.2 ?? "0") ?? 0
        for version in ["--http2", "--http1.1"] {
            let reply = try runProcess("/usr/bin/curl", ["-sk", version, "--max-time", "20", "-w", "\n%{http_version} %{http_code}",
                                                         node.httpBase + rung + "?_HLS_msn=\(next)&_HLS_part=\(part)"], timeout: 30)
            let status = reply.stdout.split(separator: "\n").last.map(String.init) ?? ""
            #expect(status == (version == "--http2" ? "2 200" : "1.1 200"), "\(version): \(status) \(reply.stderr)")
            #expect(reply.stdout.contains("part_\(hint?.output.1 ?? "?")_\(part).m4s"), "the blocked reload lists the hinted part")
        }

        // A flood of streams over HTTP/2: 100 blocking reloads at once (the node's streams per
        // connection), multiplexed. Each stream counts as a connection: past the per-address limit
        // it is answered 503, and none goes unanswered or waits past the spec's limit.
        let flood = try runProcess("/usr/bin/curl", ["-sk", "--http2", "--parallel", "--parallel-max", "100", "--max-time", "15",
                                                     "-o", "/dev/null", "-w", "%{http_version} %{http_code}\n",
                                                     node.httpBase + rung + "?_HLS_msn=\(next + 1)&_HLS_part=0&n=[1-100]"], timeout: 60)
        let answers = flood.stdout.split(separator: "\n").map(String.init)
        #expect(answers.count == 100, "\(answers.count) answers: \(flood.stderr.suffix(300))")
        #expect(answers.allSatisfy { $0 == "2 200" || $0 == "2 503" }, "\(Dictionary(answers.map { ($0, 1) }, uniquingKeysWith: +))")
        #expect(answers.contains("2 200"))
        #expect(try node.http("GET", "/health").status == 200)
    }

    /// A thousand blocking reloads from one address at once: each gets an answer (the playlist once
    /// its part exists, or `503` with `Retry-After` past the node's per-address limit), none waits past
    /// the spec's limit, and a viewer on another address goes on getting playlists and parts.
    @Test func aThousandHeldRequestsFromOneAddressEachGetAnAnswer() throws {
        let scratch = Self.scratch()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let node = try Self.liveNode(scratch)
        defer { node.stop() }
        let rung = "/hls/live/stream1/stream1_3/index.m3u8"
        let ready = node.waitFor(timeout: 40) {
            ((try? node.http("GET", rung))?.body.components(separatedBy: "#EXTINF").count ?? 0) >= 2
        }
        #expect(ready)
        let run = try runProcess("/usr/bin/python3", [Self.peers.appendingPathComponent("hls-held-requests.py").path, node.httpBase, rung, "1000"],
                                 timeout: 120)
        let summary = (try? JSONSerialization.jsonObject(with: Data(run.stdout.utf8))) as? [String: Any] ?? [:]
        #expect(run.status == 0 && !summary.isEmpty, "\(run.stdout) \(run.stderr.suffix(800))")
        let statuses = summary["statuses"] as? [String: Int] ?? [:]
        #expect(statuses.values.reduce(0, +) == 1000, "\(summary)")
        #expect((summary["playlists"] as? Int ?? 0) >= 1 && (summary["hung"] as? Int) == 0, "\(summary)")
        // Over the per-address limit a request is answered 503 with Retry-After, not dropped unanswered.
        #expect(Set(statuses.keys).isSubset(of: ["200", "503"]), "\(summary)")
        #expect((summary["retry_after"] as? Int) == statuses["503"] ?? 0, "\(summary)")
        #expect((summary["bystander_requests"] as? Int ?? 0) >= 3 && (summary["bystander_failures"] as? Int) == 0, "\(summary)")
        #expect((summary["bystander_max_s"] as? Double ?? 99) < 2, "\(summary)")
        // And the node is still there for everyone.
        #expect(try node.http("GET", "/health").status == 200)
    }
}
