import Foundation
import Testing
import TestSupport

/// Real players on shaped links. The node, its publisher and its players run in a network
/// namespace this test creates; `tc` shapes each player's traffic on that namespace's loopback.
/// ffmpeg and GStreamer play over TCP through a step (wide → 1.3 Mbit/s → 650 kbit/s → wide), and
/// an ffmpeg player over UDP gets a narrow link with a short queue (it loses what does not fit)
/// until it is on the lowest rung, then a wide one again.
/// Each must end up on the rung its link carries, decode without an error (TCP), and the moves
/// must show in the job view, the events and the metrics.
@Suite(.serialized) struct ShapedLinkTests {
    /// The ladder the steps fall clearly between, for RTSP players here and WebRTC viewers in
    /// `WHEPShapedStepTests`: the top as published (about 1.7 Mbit/s with audio), 480p at 800 kbit/s
    /// (about 0.95 Mbit/s with audio) and 360p at 300 kbit/s.
    static let stepLadder = """
        [{"streamGuid": "live/stream1", "messageType": "ProvisionCommand", "credentials": {"username": "user", "password": "pass"},
          "streams": [
            {"streamGuid": "live/stream1_1", "abrLevel": 1, "videoParams": {"videoBitRate": 1600000, "videoWidth": 1280, "videoHeight": 720}},
            {"streamGuid": "live/stream1_2", "abrLevel": 2, "videoParams": {"videoBitRate": 800000, "videoWidth": 854, "videoHeight": 480}},
            {"streamGuid": "live/stream1_3", "abrLevel": 3, "videoParams": {"videoBitRate": 300000, "videoWidth": 640, "videoHeight": 360}}]}]
        """

    /// A process inside the namespace, its standard error kept in a file.
    final class Background: @unchecked Sendable {
        let process = Process()
        let errorFile: URL
        let input = Pipe()

        init(_ namespace: NetworkNamespace, _ command: [String], in folder: URL, name: String) throws {
            errorFile = folder.appendingPathComponent("\(name).err")
            _ = FileManager.default.createFile(atPath: errorFile.path, contents: nil)
            process.executableURL = URL(fileURLWithPath: namespace.launcher[0])
            process.arguments = Array(namespace.launcher.dropFirst()) + command
            process.standardInput = input
            process.standardOutput = FileHandle.nullDevice
            process.standardError = try FileHandle(forWritingTo: errorFile)
            try process.runDeliveringSignals()
        }

        var errors: String { (try? String(contentsOf: errorFile, encoding: .utf8)) ?? "" }

        /// ffmpeg's own way to stop (`q`): it ends what it writes cleanly; then SIGINT if need be.
        func stop() {
            if process.isRunning { try? input.fileHandleForWriting.write(contentsOf: Data("q".utf8)) }
            _ = waitUntil(timeout: 10) { !process.isRunning }
            stopProcess(process, signal: SIGINT, grace: 10)
        }
    }

    /// One player as the job view shows it.
    struct Player {
        var address: String
        var transport: String
        var level: Int?
        var switches: Int
        var port: Int { Int(address.split(separator: ":").last ?? "") ?? 0 }
    }

    static func players(_ node: ServeProcess) -> [Player] {
        guard let job = (try? node.http("GET", "/v1/jobs/live/stream1"))?.json as? [String: Any],
              let players = job["players"] as? [[String: Any]] else { return [] }
        return players.compactMap { player in
            guard let address = player["address"] as? String, let transport = player["transport"] as? String else { return nil }
            return Player(address: address, transport: transport, level: player["abrLevel"] as? Int, switches: player["switches"] as? Int ?? 0)
        }
    }

    /// Waits for `condition` on the player at `address`; the seconds it took, or nil.
    static func seconds(until node: ServeProcess, _ address: String, timeout: TimeInterval, _ condition: (Player) -> Bool) -> Double? {
        let start = Date()
        let met = waitUntil(timeout: timeout, every: 0.25) { players(node).first { $0.address == address }.map(condition) ?? false }
        return met ? Date().timeIntervalSince(start) : nil
    }

    @Test func playersFollowAStepOnTheirLinksOverTCPAndUDP() throws {
        let namespace = try NetworkNamespace()
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("shaped-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let rtpPort = 50000
        let provision = folder.appendingPathComponent("provision.json")
        try Data(Self.stepLadder.utf8).write(to: provision)
        let node = try ServeProcess(dataDirectory: folder.appendingPathComponent("data"),
                                    arguments: ["--rtp-port", String(rtpPort), "--provision", provision.path],
                                    environment: ["ABR_WORKER_LOG_LEVEL": "trace"], launcher: namespace.launcher)
        defer { node.stop() }
        let rtspPort = try #require(Int(node.rtspBase.split(separator: ":").last ?? ""))
        let url = "rtsp://127.0.0.1:\(rtspPort)/live/stream1_1"
        let publisher = try Background(namespace, ["ffmpeg", "-hide_banner", "-loglevel", "error", "-re", "-stream_loop", "-1",
                                                   "-i", fixture("720p30-h264-aac.mp4"), "-t", "180", "-c", "copy", "-f", "rtsp",
                                                   "-rtsp_transport", "tcp", "rtsp://user:pass@127.0.0.1:\(rtspPort)/live/stream1_1"],
                                       in: folder, name: "publisher")
        defer { publisher.stop() }
        let ready = node.waitFor(timeout: 40) {
            guard let job = (try? node.http("GET", "/v1/jobs/live/stream1"))?.json as? [String: Any],
                  let variants = job["variants"] as? [[String: Any]] else { return false }
            return variants.count == 3 && variants.allSatisfy { ($0["framesOut"] as? Int ?? 0) > 60 }
        }
        try #require(ready, "the ladder never ran: \(publisher.errors) \(node.log.suffix(2000))")

        // The players, one at a time so each one's address is known.
        func start(_ make: () throws -> Void) throws -> Player {
            let before = Set(Self.players(node).map(\.address))
            try make()
            var found: Player?
            _ = waitUntil(timeout: 20, every: 0.25) {
                found = Self.players(node).first { !before.contains($0.address) }
                return found != nil
            }
            return try #require(found, "a player did not start: \(node.log.suffix(1500))")
        }
        // ffmpeg records what it gets as it comes; ffprobe decodes every picture of it afterwards.
        let recording = folder.appendingPathComponent("ffmpeg-tcp.ts").path
        var ffmpegTCP: Background?
        let tcpPlayer = try start {
            ffmpegTCP = try Background(namespace, ["ffmpeg", "-hide_banner", "-loglevel", "error", "-rtsp_transport", "tcp", "-i", url,
                                                   "-t", "150", "-c", "copy", "-f", "mpegts", "-y", recording], in: folder, name: "ffmpeg-tcp")
        }
        defer { ffmpegTCP?.stop() }
        let gstreamerResult = Mutex<RTSPSourcePlayback?>(nil)
        // It plays until the steps are over (at most 75 s of pictures).
        let gstreamerEnd = PlaybackEnd()
        let gstreamerThread = Thread {
            let playback = try? playWithRTSPSource(url, protocols: "tcp", pictures: 30 * 75, timeout: 120, launcher: namespace.launcher,
                                                   end: gstreamerEnd)
            gstreamerResult.withLock { $0 = playback }
        }
        let gstreamerStarted = Date()
        let gstreamerPlayer = try start { gstreamerThread.start() }
        var ffmpegUDP: Background?
        let udpPlayer = try start {
            ffmpegUDP = try Background(namespace, ["ffmpeg", "-hide_banner", "-loglevel", "error", "-rtsp_transport", "udp", "-i", url,
                                                   "-t", "150", "-f", "null", "-"], in: folder, name: "ffmpeg-udp")
        }
        defer { ffmpegUDP?.stop() }
        // A player that asked to stay on the top (`?abr=off`), on a link that cannot carry it.
        var ffmpegPinned: Background?
        let pinnedPlayer = try start {
            ffmpegPinned = try Background(namespace, ["ffmpeg", "-hide_banner", "-loglevel", "error", "-rtsp_transport", "tcp",
                                                      "-i", url + "?abr=off", "-t", "150", "-c", "copy", "-f", "null", "-"], in: folder, name: "ffmpeg-pinned")
        }
        defer { ffmpegPinned?.stop() }
        #expect(udpPlayer.transport == "udp" && tcpPlayer.transport == "tcp" && gstreamerPlayer.transport == "tcp")

        // Each player's traffic from the node in its own class: TCP by the player's port, UDP by the node's RTP port.
        let wide = 100_000
        let tcpClasses = try [tcpPlayer, gstreamerPlayer, pinnedPlayer].map { player in
            try namespace.shape(matching: [["ip", "sport", String(rtspPort), "0xffff"], ["ip", "dport", String(player.port), "0xffff"]], kilobits: wide)
        }
        let udpClass = try namespace.shape(matching: [["ip", "protocol", "17", "0xff"], ["ip", "sport", String(rtpPort), "0xffff"]],
                                           kilobits: wide)
        let tcpAddresses = [tcpPlayer.address, gstreamerPlayer.address]
        // The node's account of each move, its probes and the UDP player's reports (logged at
        // trace, as the TCP players' samples, which are too many to show), for a failure's message.
        var moves: String {
            node.log.split(separator: "\n").filter { line in ["player moves", "player skips", "probing", "probe ended", "] report"].contains { line.contains($0) } }
                .joined(separator: "\n")
        }

        // Wide: everyone stays on the top.
        Thread.sleep(forTimeInterval: 4)
        for player in Self.players(node) { #expect(player.level == 1 && player.switches == 0, "on a wide link: \(player)") }

        // 1.3 Mbit/s for TCP (the 480p rung fits); 600 kbit/s with a 50-packet queue for UDP: only
        // 360p gets through whole, more is lost.
        for id in tcpClasses { try namespace.setRate(id, kilobits: 1300) }
        try namespace.setRate(udpClass, kilobits: 600)
        try namespace.setQueue(udpClass, packets: 50)
        for address in tcpAddresses {
            let took = Self.seconds(until: node, address, timeout: 10) { $0.level == 2 }
            #expect(took != nil, "not on level 2 at 1.3 Mbit/s: \(Self.players(node))\n\(moves)")
        }
        #expect(Self.seconds(until: node, udpPlayer.address, timeout: 20) { $0.level == 3 } != nil, "UDP player at 1 Mbit/s: \(Self.players(node))\n\(moves)")
        // The UDP player's link is wide again at once: judged on reports that come every few
        // seconds, it climbs while the TCP players go through the rest of their step.
        try namespace.setRate(udpClass, kilobits: wide)
        try namespace.setQueue(udpClass, packets: 1000)
        Thread.sleep(forTimeInterval: 3)
        for address in tcpAddresses {
            #expect(Self.players(node).first { $0.address == address }?.level == 2, "held 1.3 Mbit/s: \(Self.players(node))\n\(moves)")
        }

        // 650 kbit/s: the lowest rung.
        for id in tcpClasses { try namespace.setRate(id, kilobits: 650) }
        for address in tcpAddresses {
            #expect(Self.seconds(until: node, address, timeout: 10) { $0.level == 3 } != nil, "at 650 kbit/s: \(Self.players(node))\n\(moves)")
        }
        Thread.sleep(forTimeInterval: 4)
        let pinnedNow = Self.players(node).first { $0.address == pinnedPlayer.address }
        #expect(pinnedNow?.level == 1 && pinnedNow?.switches == 0, "a pinned player was moved: \(String(describing: pinnedNow))")

        // Wide again: back up to the top (TCP), and up from the lowest rung (UDP, judged on its reports).
        for id in tcpClasses { try namespace.setRate(id, kilobits: wide) }
        for address in tcpAddresses {
            #expect(Self.seconds(until: node, address, timeout: 45) { $0.level == 1 } != nil, "link wide again: \(Self.players(node))\n\(moves)")
        }
        #expect(Self.seconds(until: node, udpPlayer.address, timeout: 30) { ($0.level ?? 3) < 3 } != nil, "UDP link wide again: \(Self.players(node))\n\(moves)")

        ffmpegTCP?.stop()
        ffmpegUDP?.stop()
        ffmpegPinned?.stop()
        gstreamerEnd.end()
        let gstreamerSeconds = Date().timeIntervalSince(gstreamerStarted)
        _ = waitUntil(timeout: 60) { gstreamerResult.withLock { $0 } != nil }
        // Decoded across every switch: ffmpeg took every packet, its decoder reports nothing; GStreamer reports nothing.
        #expect(ffmpegTCP?.errors.isEmpty == true, "ffmpeg over TCP: \(ffmpegTCP?.errors.suffix(2000) ?? "")")
        let frames = try runProcess("ffprobe", ["-v", "error", "-select_streams", "v", "-show_entries", "frame=width,height", "-of", "csv=p=0", recording])
        #expect(frames.status == 0 && frames.stderr.isEmpty, "decoder errors: \(frames.stderr.prefix(800))")
        let sizes = frames.stdout.split(separator: "\n").map { $0.split(separator: ",").prefix(2).joined(separator: "x") }
            .reduce(into: [String]()) { if $0.last != $1 { $0.append($1) } }
        #expect(sizes.first == "1280x720" && sizes.last == "1280x720" && sizes.contains("854x480") && sizes.contains("640x360"), "\(sizes)")
        let gstreamer = try #require(gstreamerResult.withLock { $0 })
        // It played throughout: at least 60 % of its seconds' pictures (moves down skip to the
        // next IDR, and what a narrow link delayed is still on its way at the end).
        #expect(gstreamer.errors.isEmpty && gstreamer.reachedEnd && Double(gstreamer.pictures) > 0.6 * 30 * gstreamerSeconds,
                "\(gstreamerSeconds) s: \(gstreamer.summary)")
        print("GStreamer over the step: \(gstreamer.pictures) pictures in \(Int(gstreamerSeconds)) s")

        // Operators see the moves: events in the job's history, and the switch counters.
        let history = ((try node.http("GET", "/v1/jobs/live/stream1")).json as? [String: Any])?["history"] as? [[String: Any]] ?? []
        #expect(history.filter { $0["kind"] as? String == "playerSwitched" }.count >= 7, "\(history.map { $0["kind"] ?? "" })")
        let metrics = try node.http("GET", "/metrics").body
        let down = metrics.firstMatch(of: /abr_worker_player_switches_total\{direction="down"\} (\d+)/).flatMap { Int($0.output.1) } ?? 0
        let up = metrics.firstMatch(of: /abr_worker_player_switches_total\{direction="up"\} (\d+)/).flatMap { Int($0.output.1) } ?? 0
        #expect(down >= 5 && up >= 3, "switch counters: down \(down), up \(up)")
    }
}

import Synchronization
