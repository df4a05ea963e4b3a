import Foundation
import Testing
import TestSupport

/// `abr-worker serve` end to end, as a stream manager, publishers, players and operators use it:
/// real process, real ports (picked by the system), curl, ffmpeg, ffprobe and Chromium.
@Suite(.serialized) struct ServeTests {
    static let credentials = ["ABR_WORKER_ADMIN_USER": "manager", "ABR_WORKER_ADMIN_PASSWORD": "s3cret-pass",
                              "ABR_WORKER_JWT_SECRET": "0123456789abcdef0123456789abcdef-serve-tests"]

    static func scratch() -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("abr-serve-\(UUID().uuidString)")
    }

    /// ffmpeg publishing the bundled clip to a node, for `seconds` of media.
    static func publish(_ url: String, seconds: Int) throws -> ProcessResult {
        try runProcess("ffmpeg", ["-hide_banner", "-loglevel", "error", "-re", "-i", fixture("720p30-h264-aac.mp4"), "-t", "\(seconds)",
                                  "-c", "copy", "-f", "rtsp", "-rtsp_transport", "tcp", url], timeout: Double(seconds) + 60)
    }

    /// ffmpeg publishing the bundled clip in the background (looped for `seconds` when `loop`); stop it with SIGINT.
    static func startPublishing(_ url: String, seconds: Int, loop: Bool = false) throws -> Process {
        let publisher = Process()
        publisher.executableURL = URL(fileURLWithPath: "/usr/bin/ffmpeg")
        publisher.arguments = ["-hide_banner", "-loglevel", "error", "-re"] + (loop ? ["-stream_loop", "-1"] : [])
            + ["-i", fixture("720p30-h264-aac.mp4"), "-t", "\(seconds)", "-c", "copy", "-f", "rtsp", "-rtsp_transport", "tcp", url]
        publisher.standardError = FileHandle.nullDevice
        try publisher.runDeliveringSignals()
        return publisher
    }

    /// Plays `url` over RTSP/TCP for `seconds` into `file` (stream copy), and checks the picture size.
    static func play(_ url: String, seconds: Int, into file: URL, width: Int, height: Int) throws {
        let player = try runProcess("ffmpeg", ["-hide_banner", "-loglevel", "error", "-rtsp_transport", "tcp", "-i", url,
                                               "-t", "\(seconds)", "-c", "copy", "-y", file.path], timeout: 60)
        #expect(player.status == 0, "\(player.stderr)")
        let stream = try MediaProbe.videoStream(file.path)
        #expect(stream.width == width && stream.height == height)
    }

    /// The seed's Stream Manager 2.0 flow: login, provision, publish, play a lower variant,
    /// read the hints, delete; with the job's events followed over SSE across an interruption.
    @Test func streamManager2FlowWithEventsAcrossAnInterruption() throws {
        let scratch = Self.scratch()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let node = try ServeProcess(dataDirectory: scratch.appendingPathComponent("data"), arguments: ["--grace", "30"],
                                    environment: Self.credentials)
        defer { node.stop() }
        let token = try node.login(user: "manager", password: "s3cret-pass")
        let auth = ["Authorization": "Bearer \(token)", "Content-Type": "application/json"]
        let created = try node.http("POST", "/as/v1/streams/provision/default", headers: auth, body: provisionBody)
        #expect(created.status == 201, "\(created.body)")

        // Follow the job's events with curl, as a dashboard would.
        let events = Process()
        let eventsFile = scratch.appendingPathComponent("events.txt")
        FileManager.default.createFile(atPath: eventsFile.path, contents: nil)
        events.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
        events.arguments = ["-s", "-N", "--max-time", "120", node.httpBase + "/v1/streams/live/stream1/events"]
        events.standardOutput = try FileHandle(forWritingTo: eventsFile)
        try events.runDeliveringSignals()
        defer { stopProcess(events) }
        #expect(node.waitFor(timeout: 10) { ((try? String(contentsOf: eventsFile, encoding: .utf8)) ?? "").contains("event: state") })

        let first = try Self.publish("\(node.rtspBase)/live/stream1_1", seconds: 8)
        #expect(first.status == 0, "\(first.stderr)")
        #expect(node.waitFor(timeout: 15) { node.jobState("live/stream1") == "interrupted" })

        // Resume, and meanwhile play the lowest variant over RTSP (looped: a busy machine must not
        // see the publisher run out before the job view is read).
        let publisher = try Self.startPublishing("\(node.rtspBase)/live/stream1_1", seconds: 20, loop: true)
        defer { stopProcess(publisher, signal: SIGINT) }
        #expect(node.waitFor(timeout: 15) { node.jobState("live/stream1") == "running" })
        try Self.play("\(node.rtspBase)/live/stream1_3", seconds: 3, into: scratch.appendingPathComponent("stream1_3.mp4"), width: 640, height: 360)

        let job = try #require(try node.http("GET", "/v1/jobs/live/stream1").json as? [String: Any])
        let publisherView = try #require(job["publisher"] as? [String: Any])
        #expect((publisherView["codecs"] as? String)?.hasPrefix("avc1.") == true)
        #expect(publisherView["width"] as? Int == 1280)
        let hints = try #require(try node.http("GET", "/v1/streams/live/stream1/abr").json as? [String: Any])
        let variants = try #require(hints["variants"] as? [[String: Any]])
        #expect(variants.count == 3)
        #expect(variants.allSatisfy { ($0["averageBitRate"] as? Int ?? 0) > 0 && ($0["codecs"] as? String ?? "").hasPrefix("avc1.") })

        stopProcess(publisher, signal: SIGINT)  // its TEARDOWN interrupts the job
        #expect(node.waitFor(timeout: 15) { node.jobState("live/stream1") == "interrupted" })
        let deleted = try node.http("DELETE", "/as/v1/streams/provision/default/live/stream1", headers: auth)
        #expect(deleted.status == 200)
        #expect(try node.http("GET", "/as/v1/streams/provision/default/live/stream1", headers: auth).status == 404)
        #expect(node.waitFor(timeout: 10) { ((try? String(contentsOf: eventsFile, encoding: .utf8)) ?? "").contains("event: ended") })
        let text = (try? String(contentsOf: eventsFile, encoding: .utf8)) ?? ""
        let kinds = text.split(separator: "\n").filter { $0.hasPrefix("event: ") }.map { String($0.dropFirst(7)) }
        let lifecycle = kinds.filter { ["publisherConnected", "interrupted", "resumed", "ended"].contains($0) }
        #expect(lifecycle == ["publisherConnected", "interrupted", "resumed", "interrupted", "ended"], "\(kinds)")
        #expect(kinds.contains("hintsUpdated"))
        let master = try String(contentsOf: scratch.appendingPathComponent("data/hls/live/stream1/stream1_2/index.m3u8"), encoding: .utf8)
        #expect(master.contains("#EXT-X-ENDLIST"))

        node.stop()
        #expect(node.process.terminationStatus == 0, "\(node.log.suffix(2000))")
    }

    /// A provision that got 201 survives `kill -9` right after; generated credentials are shown
    /// once and kept, so tokens issued before the restart still work.
    @Test func provisionsAndTokensSurviveAHardKill() throws {
        let scratch = Self.scratch()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let data = scratch.appendingPathComponent("data")
        let first = try ServeProcess(dataDirectory: data)
        let password = try #require(first.output.firstMatch(of: /admin user admin, password (\S+)/).map { String($0.output.1) })
        let token = try first.login(user: "admin", password: password)
        let created = try first.http("POST", "/as/v1/streams/provision/east", headers: ["Authorization": "Bearer \(token)"], body: provisionBody)
        #expect(created.status == 201)
        first.stop(signal: SIGKILL)
        #expect(first.process.terminationReason == .uncaughtSignal)

        let second = try ServeProcess(dataDirectory: data)
        defer { second.stop() }
        #expect(!second.output.contains(password), "the password is printed only when generated")
        let listed = try second.http("GET", "/as/v1/streams/provision/east", headers: ["Authorization": "Bearer \(token)"])
        #expect(listed.status == 200)
        #expect((listed.json as? [[String: Any]])?.compactMap { $0["streamGuid"] as? String } == ["live/stream1"])
        #expect(second.jobState("live/stream1") == "waitingForPublisher")
        #expect(second.output.contains("\(second.rtspBase)/live/stream1_1"))
        let relogin = try second.login(user: "admin", password: password)
        #expect(!relogin.isEmpty)
    }

    /// A new user's first steps: the manual's own off switches work as written (`--srt-port -1`,
    /// which the argument parser once read as an option), the banner names the node group served,
    /// and a provision under a group no node serves is kept but answered with a warning, not left
    /// to fail at publish time.
    @Test func firstStepsAsTheManualWritesThem() throws {
        let manual = try String(contentsOfFile: repositoryFile("README.md"), encoding: .utf8)
        let offSwitches = manual.matches(of: /--(rtmp|srt|webrtc)-port -1/).map { String($0.output.0) }
        #expect(Set(offSwitches.map { $0.split(separator: " ")[0] }).count == 3, "the manual shows no off switch for each of RTMP, SRT, WebRTC: \(offSwitches)")
        let scratch = Self.scratch()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let node = try ServeProcess(dataDirectory: scratch.appendingPathComponent("data"),
                                    arguments: Array(Set(offSwitches)).flatMap { $0.split(separator: " ").map(String.init) },
                                    environment: Self.credentials)
        defer { node.stop() }
        #expect(node.rtmpBase == nil && node.srtBase == nil, "\(node.output)")
        for off in ["RTMP: off", "SRT: off", "WebRTC: off", "serves node group default"] {
            #expect(node.output.contains(off), "the banner does not say \(off): \(node.output)")
        }
        let token = try node.login(user: "manager", password: "s3cret-pass")
        let auth = ["Authorization": "Bearer \(token)", "Content-Type": "application/json"]
        let unserved = try node.http("POST", "/as/v1/streams/provision/studio", headers: auth, body: provisionBody)
        #expect(unserved.status == 201, "\(unserved.body)")
        let warnings = (unserved.json as? [[String: Any]])?.compactMap { $0["warnings"] as? [String] }.flatMap { $0 } ?? []
        #expect(!warnings.isEmpty && warnings.allSatisfy { $0.contains("no node serves node group studio") && $0.contains("default") }, "\(unserved.body)")
        #expect(node.waitFor(timeout: 5) { node.log.contains("provisioned under a node group no node serves") }, "\(node.log.suffix(800))")
        let stored = try node.http("GET", "/as/v1/streams/provision/studio", headers: auth)
        #expect(stored.status == 200 && !stored.body.contains("warnings"), "the warning is the answer's, not the provision's: \(stored.body)")
        let served = try node.http("POST", "/as/v1/streams/provision/default", headers: auth,
                                   body: provisionBody.replacingOccurrences(of: "live/stream1", with: "live/stream2"))
        #expect(served.status == 201 && !served.body.contains("warnings"), "\(served.body)")
    }

    /// The HTTP plane can listen apart from RTSP (here another loopback address).
    @Test func httpListensOnItsOwnHost() throws {
        let scratch = Self.scratch()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let node = try ServeProcess(dataDirectory: scratch.appendingPathComponent("data"), arguments: ["--http-host", "127.0.0.2"],
                                    environment: Self.credentials)
        defer { node.stop() }
        #expect(node.httpBase.hasPrefix("http://127.0.0.2:"))
        #expect(node.rtspBase.hasPrefix("rtsp://127.0.0.1:"))
        #expect(try node.http("GET", "/health").status == 200)
        let port = node.httpBase.split(separator: ":").last!
        let elsewhere = try runProcess("/usr/bin/curl", ["-s", "--max-time", "5", "http://127.0.0.1:\(port)/health"])
        #expect(elsewhere.status != 0, "HTTP answered on the RTSP address too")
    }

    /// Under a descriptor limit too small for the configured connections, the node caps RTSP and
    /// HTTP connections so a reserve stays for files and the store, says so, and serves.
    @Test func aLowDescriptorLimitCapsConnectionsAndIsLogged() throws {
        let scratch = Self.scratch()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let node = try ServeProcess(dataDirectory: scratch.appendingPathComponent("data"), environment: Self.credentials,
                                    launcher: ["/usr/bin/prlimit", "--nofile=600:600", "--"])
        defer { node.stop() }
        #expect(try node.http("GET", "/health").status == 200)
        #expect(node.log.contains("the descriptor limit (ulimit -n) is 600: connections capped at 229 RTSP and 115 HTTP"), "\(node.log)")
    }

    /// A node that cannot encode another ladder in real time refuses the publish, and says why.
    @Test func publishOverCapacityIsRefused() throws {
        let scratch = Self.scratch()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let node = try ServeProcess(dataDirectory: scratch.appendingPathComponent("data"),
                                    arguments: ["--capacity-cores", "0.05", "--provision", fixture("provisions/sm2-3-level.json")],
                                    environment: Self.credentials)
        defer { node.stop() }
        let capacity = try #require(try node.http("GET", "/v1/capacity").json as? [String: Any])
        #expect(capacity["acceptsJob"] as? Bool == false)
        #expect((capacity["reason"] as? String)?.contains("over capacity") == true)
        // With the provision's publisher credentials: the refusal must be for capacity, not for authentication.
        let refused = try Self.publish(node.rtspBase.replacingOccurrences(of: "rtsp://", with: "rtsp://user:pass@") + "/live/stream1_1", seconds: 2)
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("503"), "\(refused.stderr)")
        #expect(node.jobState("live/stream1") == "waitingForPublisher")
        #expect(node.log.contains("publish refused: node over capacity: live/stream1 needs about"))
    }

    /// A node given more encoding than its cores can do in real time (x264's slowest preset on
    /// the lower rungs of a real-time 720p publish) sheds its lowest rung, counts it in job
    /// status, metrics and events, and keeps the passed-through top flowing to its players.
    @Test func anOverloadedNodeShedsItsLowestRungAndTheTopKeepsFlowing() throws {
        let scratch = Self.scratch()
        defer { try? FileManager.default.removeItem(at: scratch) }
        // ServeProcess turns shedding off for the other tests; the last flag wins.
        let node = try ServeProcess(dataDirectory: scratch.appendingPathComponent("data"),
                                    arguments: ["--load-shedding", "--preset", "placebo", "--provision", fixture("provisions/sm2-3-level.json")],
                                    environment: Self.credentials)
        defer { node.stop() }
        let publisher = try Self.startPublishing(node.rtspBase.replacingOccurrences(of: "rtsp://", with: "rtsp://user:pass@") + "/live/stream1_1",
                                                 seconds: 60, loop: true)
        defer { stopProcess(publisher, signal: SIGINT) }

        func variants() -> [[String: Any]] {
            ((try? node.http("GET", "/v1/jobs/live/stream1").json as? [String: Any])?["variants"] as? [[String: Any]]) ?? []
        }
        func level(_ number: Int) -> [String: Any]? { variants().first { $0["abrLevel"] as? Int == number } }
        #expect(node.waitFor(timeout: 40) { level(3)?["shed"] as? Bool == true }, "\(variants())")
        #expect(node.waitFor(timeout: 10) { (level(3)?["shedFrames"] as? Int ?? 0) > 0 })
        #expect(level(1)?["shed"] as? Bool == false)
        #expect(level(1)?["passthrough"] as? Bool == true)

        let metrics = try node.http("GET", "/metrics").body
        #expect(metrics.contains("abr_worker_variant_shed{level=\"3\"} 1"), "\(metrics)")
        #expect(metrics.contains("abr_worker_variant_shed{level=\"1\"} 0"))
        let job = try #require(try node.http("GET", "/v1/jobs/live/stream1").json as? [String: Any])
        let history = (job["history"] as? [[String: Any]]) ?? []
        #expect(history.contains { $0["kind"] as? String == "rungShed" && ($0["detail"] as? String ?? "").contains("level 3") }, "\(history)")

        // A player of the top gets real-time pictures while the node is over capacity.
        let framesBefore = level(1)?["framesOut"] as? Int ?? 0
        let played = scratch.appendingPathComponent("top.mp4")
        try Self.play("\(node.rtspBase)/live/stream1_1", seconds: 4, into: played, width: 1280, height: 720)
        #expect(try MediaProbe.decodedFrameCount(played.path) >= 90, "a player of the top stalled")
        #expect((level(1)?["framesOut"] as? Int ?? 0) - framesBefore >= 90)
        #expect(level(1)?["droppedFrames"] as? Int == 0)
    }

    /// The status page's native <video> plays the live ladder in headless Chromium.
    @Test func statusPagePlaysInHeadlessChromium() throws {
        let scratch = Self.scratch()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let node = try ServeProcess(dataDirectory: scratch.appendingPathComponent("data"),
                                    arguments: ["--provision", fixture("provisions/sm2-3-level.json"),
                                                "--publish-loop", fixture("720p30-h264-aac.mp4")],
                                    environment: Self.credentials)
        defer { node.stop() }
        #expect(node.output.contains("HLS: \(node.httpBase)/hls/live/stream1/master.m3u8"))
        let ready = node.waitFor(timeout: 30) {
            let playlist = try? node.http("GET", "/hls/live/stream1/stream1_3/index.m3u8")
            return playlist?.status == 200 && (playlist?.body.components(separatedBy: "#EXTINF").count ?? 0) >= 3
        }
        #expect(ready)
        let script = fixturesDirectory.deletingLastPathComponent().appendingPathComponent("Tests/Peers/chromium-video-check.py")
        let check = try runProcess("/usr/bin/python3", [script.path, node.httpBase + "/", "40"], timeout: 120)
        #expect(check.status == 0, "\(check.stdout.suffix(1500)) \(check.stderr.suffix(500))")

        // The charts: drawn from the node's own history, with data points, in human units.
        let history = try node.http("GET", "/v1/history")
        let samples = (history.json as? [String: Any])?["samples"] as? [[String: Any]] ?? []
        #expect(samples.count >= 3 && samples.last?["residentBytes"] as? Int ?? 0 > 10_000_000, "\(history.body.prefix(600))")
        let rungs = ((samples.last?["jobs"] as? [[String: Any]])?.first?["rungs"] as? [[String: Any]]) ?? []
        #expect(rungs.count == 3 && rungs.allSatisfy { ($0["fps"] as? Double ?? 0) > 0 && ($0["bitRate"] as? Int ?? 0) > 0 }, "\(rungs)")
        let screenshot = scratch.appendingPathComponent("status.png")
        let charts = try runProcess("/usr/bin/python3", [fixturesDirectory.deletingLastPathComponent().appendingPathComponent("Tests/Peers/chromium-status-charts.py").path,
                                                         node.httpBase + "/", screenshot.path, "30"], timeout: 90)
        #expect(charts.status == 0, "\(charts.stdout.suffix(3000)) \(charts.stderr.suffix(500))")
        let drawn = (try? JSONSerialization.jsonObject(with: Data(charts.stdout.utf8))) as? [String: Any]
        let names = Set(((drawn?["charts"] as? [[String: Any]]) ?? []).compactMap { $0["chart"] as? String })
        #expect(names == ["cpu", "memory", "bitrate", "fps", "players", "latency"], "\(names)")
        let labels = ((drawn?["charts"] as? [[String: Any]]) ?? []).filter { $0["chart"] as? String == "bitrate" }
            .flatMap { $0["labels"] as? [String] ?? [] }
        #expect(labels.contains { $0.hasSuffix("kbit/s") || $0.hasSuffix("Mbit/s") }, "bit rates not in human units: \(labels)")
        #expect((try? Data(contentsOf: screenshot).count) ?? 0 > 10_000, "no screenshot")
        let page = try node.http("GET", "/").body
        #expect(page.contains("Mbit/s") || page.contains("kbit/s"), "the declared rates are not in human units")
        node.stop()
        #expect(node.process.terminationStatus == 0)
        #expect(!node.log.contains("loop publisher did not stop"), "ffmpeg must get SIGINT's default action back")
        #expect(!FileManager.default.fileExists(atPath: scratch.appendingPathComponent("data/abr-worker.sqlite-wal").path)
                || ((try? FileManager.default.attributesOfItem(atPath: scratch.appendingPathComponent("data/abr-worker.sqlite-wal").path)[.size] as? Int) ?? 0) == 0,
                "the store is checkpointed on shutdown")
    }
}
