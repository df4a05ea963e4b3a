import Foundation
import Logging
import MediaCore
import NIOPosix
import RTSP
import RTSPServer
import TestSupport
import Testing

/// Who may publish and play, and how many may connect: provision credentials checked with the
/// schemes real clients use (ffmpeg answers Digest, the raw client sends Basic, GStreamer is in
/// LiveNodeTests), node-wide player credentials, the RECORD deadline and connection limits.
@Suite(.serialized) struct AuthenticationAndLimitsTests {
    static func ffmpegPublish(_ url: String, seconds: Int = 2) throws -> ProcessResult {
        try runProcess("ffmpeg", ["-hide_banner", "-loglevel", "error", "-re", "-i", fixture("720p30-h264-aac.mp4"), "-t", String(seconds),
                                  "-c", "copy", "-f", "rtsp", "-rtsp_transport", "tcp", url], timeout: TimeInterval(seconds + 20))
    }

    @Test func aProvisionWithCredentialsRefusesPublishersWithoutThemAndTakesDigestFromFFmpeg() throws {
        let node = try LiveTestNode()
        // Without credentials, and with a wrong password: 401, nothing reaches the job.
        let anonymous = try Self.ffmpegPublish(node.url("live/stream1_1"))
        #expect(anonymous.status != 0 && anonymous.stderr.contains("401"), "\(anonymous.stderr)")
        let wrong = try Self.ffmpegPublish("rtsp://user:nope@127.0.0.1:\(node.port)/live/stream1_1")
        #expect(wrong.status != 0 && wrong.stderr.contains("401"), "\(wrong.stderr)")
        #expect(node.node.job("live/stream1")?.state == .waitingForPublisher)

        // The raw 401 offers both schemes.
        let client = try RawRTSPClient(port: node.port)
        let challenge = client.announce(node.url("live/stream1_1"))
        #expect(challenge.hasPrefix("RTSP/1.0 401"))
        #expect(challenge.contains("WWW-Authenticate: Digest realm=\"abr-worker\", nonce=\""))
        #expect(challenge.contains("WWW-Authenticate: Basic realm=\"abr-worker\""))

        // ffmpeg with the URL's credentials answers the Digest challenge and publishes.
        let publisher = try FFmpegPublisher(url: node.publishURL("live/stream1_1"), transport: "tcp", seconds: 6)
        #expect(node.waitUntilPlayable(["live/stream1_1", "live/stream1_3"]), "\(publisher.errorText)")
        #expect(waitForExit(publisher.process, timeout: 30))
        // The node sees the TEARDOWN (or the silence) a moment after ffmpeg exits.
        #expect(waitUntil(timeout: 15) { node.node.job("live/stream1")?.state == .interrupted })

        // Resuming within grace needs the credentials too.
        let resumeAnonymous = try Self.ffmpegPublish(node.url("live/stream1_1"))
        #expect(resumeAnonymous.status != 0 && resumeAnonymous.stderr.contains("401"))
        #expect(node.node.job("live/stream1")?.state == .interrupted)
        let resumed = try Self.ffmpegPublish(node.publishURL("live/stream1_1"), seconds: 3)
        #expect(resumed.status == 0, "\(resumed.stderr)")
        #expect(waitUntil(timeout: 10) { node.node.job("live/stream1")?.events.contains { $0.kind == "resumed" } == true })
    }

    @Test func aProvisionWithoutCredentialsStaysOpen() throws {
        let node = try LiveTestNode(provision: "sm2-4-level.json")
        let client = try RawRTSPClient(port: node.port)
        #expect(client.startPublishing(node.url("live/room1/show_1")).statuses == [200, 200, 200])
    }

    /// An ANNOUNCE claims the stream; one that never RECORDs must not keep it from the real publisher.
    @Test func anAnnounceWithoutRecordReleasesTheStream() throws {
        let node = try LiveTestNode(configureRTSP: { $0.announceTimeout = 1 })
        let squatter = try RawRTSPClient(port: node.port)
        #expect(squatter.announce(node.url("live/stream1_1"), authorization: RawRTSPClient.basic("user", "pass")).hasPrefix("RTSP/1.0 200"))
        let early = try RawRTSPClient(port: node.port)
        #expect(early.announce(node.url("live/stream1_1"), authorization: RawRTSPClient.basic("user", "pass")).hasPrefix("RTSP/1.0 403"))
        // Once the squatter's announce times out (1 s), the next publisher gets the stream.
        let published = try waitUntil(timeout: 10, every: 0.25) {
            let late = try RawRTSPClient(port: node.port)
            return late.startPublishing(node.url("live/stream1_1"), authorization: RawRTSPClient.basic("user", "pass")).statuses == [200, 200, 200]
        }
        #expect(published, "the stream stayed claimed by an ANNOUNCE that never recorded")
    }

    /// The SPS and PPS of a 4096×2160 picture, made by x264.
    static func oversizedParameterSets() throws -> (sps: [UInt8], pps: [UInt8]) {
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("big-\(UUID().uuidString.prefix(8)).h264").path
        defer { try? FileManager.default.removeItem(atPath: work) }
        let made = try runProcess("ffmpeg", ["-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i", "color=size=4096x2160:duration=0.04",
                                             "-c:v", "libx264", "-preset", "ultrafast", "-f", "h264", work])
        try #require(made.status == 0, "\(made.stderr)")
        let units = H264.annexBUnits(Array(try Data(contentsOf: URL(fileURLWithPath: work))))
        return (Array(try #require(units.first { ($0.first ?? 0) & 0x1F == 7 })), Array(try #require(units.first { ($0.first ?? 0) & 0x1F == 8 })))
    }

    /// A picture far larger than the ladder's top is refused at ANNOUNCE, before any decoder is
    /// opened for it; a node-wide limit applies to relayed streams too.
    @Test func oversizedPicturesAreRefusedAtAnnounce() throws {
        let sps = try Self.oversizedParameterSets().sps
        let sdp = RawRTSPClient.videoSDP + "a=fmtp:96 packetization-mode=1;sprop-parameter-sets=\(Data(sps).base64EncodedString())\r\n"

        let node = try LiveTestNode()
        let refused = try RawRTSPClient(port: node.port).announce(node.url("live/stream1_1"), sdp: sdp, authorization: RawRTSPClient.basic("user", "pass"))
        #expect(refused.hasPrefix("RTSP/1.0 415") && refused.contains("4096x2160"), "\(refused)")
        #expect(node.node.job("live/stream1")?.state == .waitingForPublisher)

        let relay = try TestNode(configure: { $0.maximumPublishPixels = 1920 * 1080 })
        let tooBig = try RawRTSPClient(port: relay.port).announce(relay.url("live/big_1"), sdp: sdp)
        #expect(tooBig.hasPrefix("RTSP/1.0 415") && tooBig.contains("larger than the node's limit"), "\(tooBig)")
    }

    /// An SPS that arrives in the stream instead of the ANNOUNCE is held to the same limit: the
    /// publish stops and its connection closes before any of it reaches the job, and the stream
    /// is free for the next publisher.
    @Test func anOversizedPictureAnnouncedInBandStopsThePublish() throws {
        let (sps, pps) = try Self.oversizedParameterSets()

        let node = try LiveTestNode()
        let publisher = try RawRTSPClient(port: node.port)
        // The ANNOUNCE carries no parameter sets, so nothing can be checked before RECORD.
        #expect(publisher.startPublishing(node.url("live/stream1_1"), authorization: RawRTSPClient.basic("user", "pass")).statuses == [200, 200, 200])
        for (sequence, unit) in [sps, pps, [0x65, 0x88, 0x84, 0x00]].enumerated() {
            let rtp: [UInt8] = [0x80, sequence == 2 ? 0xE0 : 0x60, 0, UInt8(sequence), 0, 0, 0x10, 0, 0, 0, 0, 1] + unit
            _ = publisher.send([0x24, 0, UInt8(rtp.count >> 8), UInt8(rtp.count & 0xFF)] + rtp)
        }
        publisher.send("OPTIONS \(node.url("live/stream1_1")) RTSP/1.0\r\nCSeq: 9\r\n\r\n")
        #expect(publisher.status() == nil, "the connection should be closed")
        #expect(node.node.job("live/stream1")?.state == .waitingForPublisher)

        let next = try RawRTSPClient(port: node.port)
        #expect(next.startPublishing(node.url("live/stream1_1"), authorization: RawRTSPClient.basic("user", "pass")).statuses == [200, 200, 200])
    }

    /// An origin that answers with an empty `Session:` fails that push attempt (counted, retried),
    /// and the node keeps serving.
    @Test func anOriginAnsweringWithAnEmptySessionFailsThePushNotTheNode() throws {
        let origin = Process()
        origin.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        origin.arguments = ["-c", """
            import socket, re, sys, time
            server = socket.socket(); server.bind(("127.0.0.1", 0)); server.listen(4); server.settimeout(30)
            print(server.getsockname()[1], flush=True)
            deadline = time.time() + 30
            while time.time() < deadline:
                try: client, _ = server.accept()
                except socket.timeout: break
                client.settimeout(5)
                try:
                    data = client.recv(65536)
                    cseq = re.search(rb"CSeq: *([0-9]+)", data)
                    client.sendall(b"RTSP/1.0 200 OK\\r\\nCSeq: " + (cseq.group(1) if cseq else b"1") + b"\\r\\nSession: \\r\\n\\r\\n")
                    client.recv(65536)
                except OSError: pass
                client.close()
            """]
        let output = Pipe()
        origin.standardOutput = output
        try origin.runDeliveringSignals()
        defer { stopProcess(origin) }
        let portLine = String(decoding: output.fileHandleForReading.availableData, as: UTF8.self)
        let originPort = try #require(Int(portLine.trimmingCharacters(in: .whitespacesAndNewlines)))

        let node = try TestNode()
        let publisher = try FFmpegPublisher(url: node.url("live/pushed_1"), transport: "tcp", seconds: 20)
        try #require(node.waitUntilPlayable("live/pushed_1"), "\(publisher.errorText)")
        let pusher = try #require(OriginPusher(stream: node.registry.stream("live/pushed_1"), origin: "rtsp://127.0.0.1:\(originPort)",
                                               group: MultiThreadedEventLoopGroup.singleton, logger: Logger(label: "test.origin")))
        pusher.start()
        defer { pusher.stop() }
        let deadline = Date().addingTimeInterval(10)
        while pusher.statistics.failures == 0, Date() < deadline { Thread.sleep(forTimeInterval: 0.1) }
        #expect(pusher.statistics.failures >= 1)
        #expect(pusher.statistics.lastError?.contains("empty Session") == true, "\(pusher.statistics.lastError ?? "none")")
        #expect(!pusher.statistics.connected)
        let played = try play(node.url("live/pushed_1"), transport: "tcp", seconds: 1)
        #expect(played.status == 0, "the node must keep serving: \(played.stderr)")
    }

    @Test func nodeWidePlayerCredentialsGuardDescribeAndSetup() throws {
        let node = try TestNode(configure: { $0.playerCredentials = StreamCredentialsFixture.viewer })
        let publisher = try FFmpegPublisher(url: node.url("live/guarded_1"), transport: "tcp", seconds: 15)
        try #require(node.waitUntilPlayable("live/guarded_1"), "\(publisher.errorText)")
        let client = try RawRTSPClient(port: node.port)
        client.send("DESCRIBE \(node.url("live/guarded_1")) RTSP/1.0\r\nCSeq: 1\r\n\r\n" as String)
        #expect(client.status() == 401)
        client.send("SETUP \(node.url("live/guarded_1"))/trackID=0 RTSP/1.0\r\nCSeq: 2\r\nTransport: RTP/AVP/TCP;unicast;interleaved=0-1\r\n\r\n")
        #expect(client.status() == 401)
        let refused = try play(node.url("live/guarded_1"), transport: "tcp", seconds: 1)
        #expect(refused.status != 0 && refused.stderr.contains("401"), "\(refused.stderr)")
        let played = try play("rtsp://viewer:pw%40home@127.0.0.1:\(node.port)/live/guarded_1", transport: "tcp", seconds: 2)
        #expect(played.status == 0 && played.stream.frames > 30, "\(played.stderr)")
    }

    @Test func connectionsAreLimitedPerAddressAndFreedOnClose() throws {
        let node = try TestNode(configure: { $0.maximumConnectionsPerAddress = 3 })
        var clients = try (0..<3).map { _ in try RawRTSPClient(port: node.port) }
        for client in clients {
            client.send("OPTIONS * RTSP/1.0\r\nCSeq: 1\r\n\r\n")
            #expect(client.status() == 200)
        }
        let extra = try RawRTSPClient(port: node.port)
        extra.send("OPTIONS * RTSP/1.0\r\nCSeq: 1\r\n\r\n")
        let refusal = extra.receiveResponse()
        #expect(refusal.hasPrefix("RTSP/1.0 503"), "\(refusal)")
        clients.removeLast()  // closes one
        let deadline = Date().addingTimeInterval(5)
        while node.service.connectionCount > 2, Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        let again = try RawRTSPClient(port: node.port)
        again.send("OPTIONS * RTSP/1.0\r\nCSeq: 1\r\n\r\n")
        #expect(again.status() == 200)
    }

    /// Publishers are counted apart from players: a full house of viewers cannot keep a publisher out.
    @Test func publishersAndPlayersHaveTheirOwnQuotas() throws {
        let node = try TestNode(configure: {
            $0.maximumPublishers = 2
            $0.maximumSessions = 1
        })
        let publisher = try FFmpegPublisher(url: node.url("live/quota_1"), transport: "tcp", seconds: 15)
        try #require(node.waitUntilPlayable("live/quota_1"), "\(publisher.errorText)")
        let setup = "SETUP \(node.url("live/quota_1"))/trackID=0 RTSP/1.0\r\nCSeq: 1\r\nTransport: RTP/AVP/TCP;unicast;interleaved=0-1\r\n\r\n"
        let viewer = try RawRTSPClient(port: node.port)
        viewer.send(setup)
        #expect(viewer.status() == 200)
        let crowd = try RawRTSPClient(port: node.port)
        crowd.send(setup)
        #expect(crowd.receiveResponse().contains("too many players"))
        // Players are full; a second publisher still gets in, a third does not.
        let second = try RawRTSPClient(port: node.port)
        #expect(second.startPublishing(node.url("live/quota_2")).statuses == [200, 200, 200])
        let third = try RawRTSPClient(port: node.port)
        let refused = third.announce(node.url("live/quota_3"))
        #expect(refused.hasPrefix("RTSP/1.0 503") && refused.contains("too many publishers"), "\(refused)")
    }

    /// A client that sends requests and never reads the answers: the node stops reading from it
    /// instead of queueing answers, and a normal client is served meanwhile.
    @Test func aClientThatNeverReadsIsNotAnsweredWithoutBound() throws {
        let node = try TestNode()
        let flooder = try RawRTSPClient(port: node.port, receiveBuffer: 4096)
        let request = Array("OPTIONS * RTSP/1.0\r\nCSeq: 1\r\nX-Pad: \(String(repeating: "a", count: 1000))\r\n\r\n".utf8)
        let batch = Array(Array(repeating: request, count: 200).joined())
        // Without backpressure the node would read (and answer into its own memory) all it is sent.
        var sent = 0
        let deadline = Date().addingTimeInterval(4)
        while Date() < deadline, sent < 256 * 1024 * 1024 {
            let taken = flooder.send(batch, nonBlocking: true)
            sent += taken
            if taken == 0 { Thread.sleep(forTimeInterval: 0.01) }
        }
        #expect(sent < 32 * 1024 * 1024, "the node kept reading \(sent / 1024 / 1024) MB from a client that reads nothing")
        let other = try RawRTSPClient(port: node.port)
        other.send("OPTIONS * RTSP/1.0\r\nCSeq: 1\r\n\r\n")
        #expect(other.status() == 200)
    }
}

enum StreamCredentialsFixture {
    static let viewer = StreamCredentials(username: "viewer", password: "pw@home")
}
