import Foundation
import NIOCore
import RTSP
import RTSPServer
import TestSupport
import Testing

/// The RTSP server against real clients on loopback: ffmpeg and GStreamer publishing and playing,
/// over TCP and UDP, and hostile clients that must not disturb them.
@Suite(.serialized) struct RTSPServerTests {
    @Test(arguments: ["tcp", "udp"])
    func ffmpegPublishesAndEveryTransportPlays(_ publishTransport: String) throws {
        let node = try TestNode()
        let publisher = try FFmpegPublisher(url: node.url("live/relay_1"), transport: publishTransport, seconds: 20)
        try #require(node.waitUntilPlayable("live/relay_1"), "publisher never got through: \(publisher.errorText)")
        for playTransport in ["tcp", "udp"] {
            let played = try play(node.url("live/relay_1"), transport: playTransport, seconds: 3)
            #expect(played.status == 0, "\(publishTransport) → \(playTransport): \(played.stderr)")
            #expect(played.stream.width == 1280 && played.stream.height == 720)
            // 3 s at 30 fps; a player starts at the cached GOP's IDR, so it may get a little more.
            #expect((80...200).contains(played.stream.frames), "\(publishTransport) → \(playTransport): \(played.stream.frames) frames")
            #expect(played.keyframes.first == 0, "the first picture a player gets must be an IDR")
        }
    }

    @Test func gstreamerPublishesAndPlays() throws {
        let node = try TestNode()
        let publisher = Process()
        publisher.executableURL = URL(fileURLWithPath: "/usr/bin/gst-launch-1.0")
        publisher.arguments = ["-q", "videotestsrc", "is-live=true", "num-buffers=600", "!", "video/x-raw,width=640,height=360,framerate=30/1",
                               "!", "x264enc", "tune=zerolatency", "speed-preset=veryfast", "key-int-max=30", "!", "video/x-h264,profile=high", "!", "h264parse",
                               "!", "rtspclientsink", "location=\(node.url("live/gst_1"))"]
        publisher.standardOutput = FileHandle.nullDevice
        publisher.standardError = FileHandle.nullDevice
        try publisher.runDeliveringSignals()
        defer { stopProcess(publisher, signal: SIGINT) }
        try #require(node.waitUntilPlayable("live/gst_1"), "rtspclientsink never got through")

        let ffmpegPlayed = try play(node.url("live/gst_1"), transport: "tcp", seconds: 2)
        #expect(ffmpegPlayed.stream.width == 640 && ffmpegPlayed.stream.height == 360)
        for protocols in ["tcp", "udp"] {
            let playback = try playWithRTSPSource(node.url("live/gst_1"), protocols: protocols, pictures: 45, timeout: 20)
            #expect(playback.played(45), "rtspsrc over \(protocols): \(playback.summary)")
        }
    }

    /// A GStreamer player that records what it plays (its jitterbuffer times packets by arrival,
    /// mp4mux refuses a buffer without a time) joins mid-GOP: every picture must come with a time,
    /// from the cached IDR on, increasing, and the recording must reach the live edge.
    @Test func aGStreamerRecorderJoiningMidGOPGetsTimedPictures() throws {
        let node = try TestNode()
        let publisher = try FFmpegPublisher(url: node.url("live/rec_1"), transport: "tcp", seconds: 25)
        try #require(node.waitUntilPlayable("live/rec_1"), "\(publisher.errorText)")
        Thread.sleep(forTimeInterval: 1.3)  // the fixture's GOP is 2 s: join in its middle
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("gst-rec-\(UUID().uuidString).mp4").path
        defer { try? FileManager.default.removeItem(atPath: file) }
        let recorder = Process()
        recorder.executableURL = URL(fileURLWithPath: "/usr/bin/gst-launch-1.0")
        // 150 pictures, then end of stream: mp4mux writes its index and gst-launch exits by itself.
        recorder.arguments = ["rtspsrc", "location=\(node.url("live/rec_1"))", "protocols=tcp", "!", "rtph264depay", "!", "h264parse",
                              "!", "identity", "eos-after=150", "!", "mp4mux", "!", "filesink", "location=\(file)"]
        let logFile = file + ".log"
        FileManager.default.createFile(atPath: logFile, contents: nil)
        defer { try? FileManager.default.removeItem(atPath: logFile) }
        recorder.standardOutput = FileHandle(forWritingAtPath: logFile)
        recorder.standardError = recorder.standardOutput
        try recorder.runDeliveringSignals()
        #expect(waitForExit(recorder, timeout: 30), "the recorder did not finish")
        let log = (try? String(contentsOfFile: logFile, encoding: .utf8)) ?? ""
        #expect(!log.contains("Buffer has no PTS"), "\(log.suffix(600))")
        let packets = try runProcess("ffprobe", ["-v", "error", "-select_streams", "v", "-show_entries", "packet=pts_time,flags",
                                                 "-of", "csv=p=0", file]).stdout.split(separator: "\n")
        let times = packets.compactMap { Double($0.split(separator: ",").first ?? "") }
        #expect(times.count >= 140, "recorded \(times.count) pictures")
        #expect(packets.first?.contains("K") == true, "the first recorded picture must be the IDR")
        #expect(zip(times, times.dropFirst()).allSatisfy { $0 < $1 }, "picture times must increase")
        // Never slower than real time (150 pictures at 30 fps); the cached ones came faster.
        #expect((times.last ?? 0) <= 5.1, "\(times.last ?? 0)")
    }

    @Test func unprovisionedPublishIsRefused() throws {
        let node = try TestNode(makePolicy: { _ in RefuseEverything() })
        let result = try runProcess("ffmpeg", ["-hide_banner", "-loglevel", "error", "-re", "-i", fixture("720p30-h264-aac.mp4"), "-t", "2",
                                               "-c", "copy", "-f", "rtsp", "-rtsp_transport", "tcp", node.url("live/nobody_1")], timeout: 20)
        #expect(result.status != 0)
        #expect(result.stderr.contains("404"), "\(result.stderr)")
        #expect(node.registry.existingStream("live/nobody_1") == nil)
    }

    @Test func aSecondPublisherIsRefusedAndTheFirstKeepsGoing() throws {
        let node = try TestNode()
        let first = try FFmpegPublisher(url: node.url("live/busy_1"), transport: "tcp", seconds: 20)
        try #require(node.waitUntilPlayable("live/busy_1"), "\(first.errorText)")
        let second = try runProcess("ffmpeg", ["-hide_banner", "-loglevel", "error", "-re", "-i", fixture("720p30-h264-aac.mp4"), "-t", "2",
                                               "-c", "copy", "-f", "rtsp", "-rtsp_transport", "tcp", node.url("live/busy_1")], timeout: 20)
        #expect(second.status != 0)
        #expect(second.stderr.contains("403"), "\(second.stderr)")
        let played = try play(node.url("live/busy_1"), transport: "tcp", seconds: 2)
        #expect(played.stream.frames >= 45, "the first publisher's stream stopped")
    }

    /// Garbage, oversized and out-of-order requests get error replies while a player keeps receiving.
    @Test func hostileRequestsGetErrorsAndDoNotDisturbAPlayer() throws {
        let node = try TestNode()
        let publisher = try FFmpegPublisher(url: node.url("live/steady_1"), transport: "tcp", seconds: 25)
        try #require(node.waitUntilPlayable("live/steady_1"), "\(publisher.errorText)")

        // A player records for 6 s while the attacks run.
        let recording = FileManager.default.temporaryDirectory.appendingPathComponent("steady-\(UUID().uuidString).mkv").path
        defer { try? FileManager.default.removeItem(atPath: recording) }
        let player = Process()
        player.executableURL = URL(fileURLWithPath: "/usr/bin/ffmpeg")
        player.arguments = ["-hide_banner", "-loglevel", "error", "-rtsp_transport", "tcp", "-i", node.url("live/steady_1"),
                            "-t", "6", "-c", "copy", "-y", recording]
        player.standardError = FileHandle.nullDevice
        player.standardInput = FileHandle.nullDevice
        try player.runDeliveringSignals()
        #expect(waitUntil(timeout: 15) { !node.service.playerSessions(of: "live/steady_1").isEmpty }, "the steady player never started")

        let cases: [(String, Int?)] = [
            ("GARBAGE\r\n\r\n", 400),
            ("OPTIONS rtsp://x/y RTSP/1.0\r\n\r\n", 400),                                    // no CSeq
            ("OPTIONS rtsp://x/y RTSP/9.9\r\nCSeq: 1\r\n\r\n", 505),
            ("PLAY \(node.url("live/steady_1")) RTSP/1.0\r\nCSeq: 2\r\nSession: 1234\r\n\r\n", 454),
            ("PLAY \(node.url("live/steady_1")) RTSP/1.0\r\nCSeq: 3\r\n\r\n", 454),          // PLAY before SETUP
            ("RECORD \(node.url("live/steady_1")) RTSP/1.0\r\nCSeq: 4\r\n\r\n", 454),
            ("DESCRIBE \(node.url("live/none")) RTSP/1.0\r\nCSeq: 5\r\n\r\n", 404),
            ("DESCRIBE \(node.url("live/../../etc")) RTSP/1.0\r\nCSeq: 6\r\n\r\n", 400),
            ("SETUP \(node.url("live/steady_1"))/trackID=0 RTSP/1.0\r\nCSeq: 7\r\nTransport: RTP/SAVPF;unicast\r\n\r\n", 461),
            ("ANNOUNCE \(node.url("live/bad_1")) RTSP/1.0\r\nCSeq: 8\r\nContent-Type: application/sdp\r\nContent-Length: 5\r\n\r\nhello", 400),
            ("BREW \(node.url("live/steady_1")) RTSP/1.0\r\nCSeq: 9\r\n\r\n", 501),
            // Each of these once crashed the whole node (a trap in a parser).
            ("OPTIONS \(node.url("live/steady_1")) RTSP/1.0\r\nCSeq: 10\r\nSession: \r\n\r\n", 454),
            ("OPTIONS \(node.url("live/steady_1")) RTSP/1.0\r\nCSeq: 11\r\nSession: ;;\r\n\r\n", 454),
            ("SETUP \(node.url("live/steady_1"))/trackID=0 RTSP/1.0\r\nCSeq: 12\r\nTransport: RTP/AVP/TCP; ;=;=5;;interleaved\r\n\r\n", 200),
            ("SETUP \(node.url("live/steady_1"))/trackID=0 RTSP/1.0\r\nCSeq: 13\r\nTransport: ,, ; ,RTP/AVP;;\r\n\r\n", 461),
            (Self.announce(node.url("live/bad_2"), cseq: 14, sdp: "v=0\r\na=\r\na=:\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\n"), 200),
            (Self.announce(node.url("live/bad_3"), cseq: 15, sdp: "v=0\r\nm=video / RTP/AVP 96\r\n"), 400),
            (Self.announce(node.url("live/bad_4"), cseq: 16, sdp: "v=0\r\nm=\r\n"), 400),
            (Self.announce(node.url("live/bad_5"), cseq: 17, sdp: "v=0\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\na=framerate:1e308\r\n"), 400),
            (Self.announce(node.url("live/bad_6"), cseq: 18, sdp: "v=0\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\nm=audio 0 RTP/AVP 97\r\na=rtpmap:97 MPEG4-GENERIC/0/2\r\n"), 400),
            (Self.announce(node.url("live/bad_7"), cseq: 19, sdp: "v=0\r\n" + String(repeating: "m=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\n", count: 200)), 400),
            (String(repeating: "\r\n", count: 200_000) + "OPTIONS \(node.url("live/steady_1")) RTSP/1.0\r\nCSeq: 20\r\n\r\n", 200),
        ]
        for (request, expected) in cases {
            let client = try RawRTSPClient(port: node.port)
            client.send(request)
            #expect(client.status() == expected, "\(request.prefix(40))")
        }
        // Oversized: a header line past the limit, and a body past the limit.
        let huge = try RawRTSPClient(port: node.port)
        huge.send("OPTIONS rtsp://x/y RTSP/1.0\r\nCSeq: 1\r\nX-Pad: " + String(repeating: "a", count: 10_000) + "\r\n\r\n")
        #expect(huge.status() == 431)
        let big = try RawRTSPClient(port: node.port)
        big.send("ANNOUNCE rtsp://x/y RTSP/1.0\r\nCSeq: 1\r\nContent-Length: 10000000\r\n\r\n")
        #expect(big.status() == 413)
        // Random bytes, and an interleaved frame for a channel nobody set up.
        let noise = try RawRTSPClient(port: node.port)
        noise.send((0..<2000).map { _ in UInt8.random(in: 0...255) })
        noise.send([UInt8(ascii: "$"), 9, 0, 4, 1, 2, 3, 4])
        // A client that keeps a connection and a session, then goes quiet.
        let keeper = try RawRTSPClient(port: node.port)
        keeper.send("OPTIONS \(node.url("live/steady_1")) RTSP/1.0\r\nCSeq: 1\r\n\r\n")
        #expect(keeper.status() == 200)

        #expect(waitForExit(player, timeout: 40), "the player did not finish")
        #expect(player.terminationStatus == 0)
        let frames = try MediaProbe.videoStream(recording).frames
        #expect(frames >= 150, "the player got \(frames) frames in 6 s")
    }

    static func announce(_ url: String, cseq: Int, sdp: String) -> String {
        "ANNOUNCE \(url) RTSP/1.0\r\nCSeq: \(cseq)\r\nContent-Type: application/sdp\r\nContent-Length: \(sdp.utf8.count)\r\n\r\n\(sdp)"
    }

    /// A player that stops reading only hurts itself: it skips to later IDRs, others get everything.
    @Test func aSlowPlayerSkipsAheadAndDoesNotSlowOthers() throws {
        let node = try TestNode(playerBacklogLimit: 128 * 1024)
        let publisher = try FFmpegPublisher(url: node.url("live/slow_1"), transport: "tcp", seconds: 30)
        try #require(node.waitUntilPlayable("live/slow_1"), "\(publisher.errorText)")
        let stalled = try RawRTSPClient(port: node.port, receiveBuffer: 4096)
        stalled.send("SETUP \(node.url("live/slow_1"))/trackID=0 RTSP/1.0\r\nCSeq: 1\r\nTransport: RTP/AVP/TCP;unicast;interleaved=0-1\r\n\r\n")
        let session = RawRTSPClient.sessionID(in: stalled.receiveResponse())
        stalled.send("PLAY \(node.url("live/slow_1")) RTSP/1.0\r\nCSeq: 2\r\nSession: \(session)\r\n\r\n")
        // From here on the stalled client reads nothing.
        let played = try play(node.url("live/slow_1"), transport: "tcp", seconds: 8)
        #expect(played.stream.frames >= 220, "a healthy player beside a stalled one got \(played.stream.frames) frames in 8 s")
        #expect(try #require(node.registry.existingStream("live/slow_1")).playerDrops > 0, "the stalled player never skipped")
        // Operators see whose pictures were skipped: the stalled player's, not the healthy one's.
        let drops = node.service.players().map(\.droppedPictures)
        #expect(drops.count == 1 && drops[0] > 0, "the players' dropped pictures: \(drops)")
        _ = stalled
    }

    /// A publisher gets RTCP receiver reports on its transport, counting the packets it lost.
    @Test func publishersGetReceiverReports() throws {
        let node = try TestNode()
        let client = try RawRTSPClient(port: node.port)
        #expect(client.startPublishing(node.url("live/rr_1")).statuses == [200, 200, 200])
        // 20 packets with sequence numbers 10 and 11 missing.
        var packetizer = H264Packetizer(ssrc: 0xCAFE, initialSequence: 0)
        for index in 0..<22 {
            let packets = packetizer.packetize([[0x65, 1, 2, 3][...]], timestamp: UInt32(index * 3000))
            guard index != 10, index != 11 else { continue }
            var rtp = ByteBuffer()
            packets[0].write(to: &rtp)
            var frame = ByteBuffer()
            RTSPSerialization.writeInterleaved(channel: 0, payload: rtp, to: &frame)
            client.send(Array(frame.readableBytesView))
        }
        let received = client.receiveRaw(for: 7)
        var buffer = ByteBuffer(bytes: received)
        var reports: [RTCPPacket] = []
        var parser = RTSPMessageParser()
        while let item = try? parser.parse(&buffer) {
            if case let .interleaved(channel, payload) = item, channel == 1 { reports += RTCPPacket.parseCompound(payload) }
        }
        let blocks = reports.compactMap { if case let .receiverReport(_, blocks) = $0 { return blocks.first } else { return nil } }
        let block = try #require(blocks.first, "no receiver report in \(received.count) bytes")
        #expect(block.ssrc == 0xCAFE)
        #expect(block.cumulativeLost == 2)
        #expect(block.highestSequence == 21)
    }

    @Test func sessionsTimeOutAndEndThePublish() throws {
        let node = try TestNode(sessionTimeout: 2)
        let client = try RawRTSPClient(port: node.port)
        #expect(client.announce(node.url("live/quiet_1")).hasPrefix("RTSP/1.0 200"))
        #expect(node.service.sessionCount == 1)
        #expect(waitUntil(timeout: 10) { node.service.sessionCount == 0 }, "the quiet session did not time out")
        // The path is free again for a new publisher.
        let again = try RawRTSPClient(port: node.port)
        #expect(again.announce(node.url("live/quiet_1")).hasPrefix("RTSP/1.0 200"))
    }
}

extension RTSPServerTests {
    /// A TCP player that sends nothing after PLAY (no RTCP, no keep-alive: a recorder, a relay,
    /// a small custom client) is alive while its connection acknowledges the media: it keeps
    /// its session past the session timeout and goes on receiving.
    @Test func aSilentTCPPlayerLivesOnItsAcknowledgements() throws {
        let node = try TestNode(sessionTimeout: 2)
        let publisher = try FFmpegPublisher(url: node.url("live/silent_1"), transport: "tcp", seconds: 12)
        try #require(node.waitUntilPlayable("live/silent_1"), "\(publisher.errorText)")
        let player = try RawRTSPClient(port: node.port, sourceAddress: "127.0.0.2")
        player.send("SETUP \(node.url("live/silent_1"))/trackID=0 RTSP/1.0\r\nCSeq: 1\r\nTransport: RTP/AVP/TCP;unicast;interleaved=0-1\r\n\r\n")
        let setup = player.receiveResponse()
        let session = try #require(setup.split(separator: "\r\n").first { $0.hasPrefix("Session:") }?.dropFirst(8)
            .split(separator: ";").first?.trimmingCharacters(in: .whitespaces), "\(setup)")
        player.send("PLAY \(node.url("live/silent_1")) RTSP/1.0\r\nCSeq: 2\r\nSession: \(session)\r\n\r\n")
        // Three times the session timeout, reading only.
        let received = player.receiveRaw(for: 6)
        #expect(received.count > 100_000, "received \(received.count) bytes")
        #expect(node.service.sessionCount == 2, "the silent player's session ended")
        let late = player.receiveRaw(for: 1)
        #expect(late.count > 10_000, "nothing arrived after \(6) s")
    }
}
