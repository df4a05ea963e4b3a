import Foundation
import LiveNode
import Logging
import MediaCore
import RTSPServer
import TestSupport
import Testing
import Transcoder

/// A live node (provisions → jobs → RTSP) on a free loopback port with its own data directory.
final class LiveTestNode: @unchecked Sendable {
    // @unchecked: its fields are immutable after init and each is thread-safe itself.
    let registry = StreamRegistry()
    let node: LiveNode
    let service: RTSPService
    let port: Int
    let dataDirectory: URL
    /// A directory given by the test outlives the node (a restart reuses it).
    private let ownsDataDirectory: Bool

    init(grace: Double = 30, provision: String = "sm2-3-level.json", origin: String? = nil, allowUnprovisioned: Bool = false,
         dataDirectory: URL? = nil, configureRTSP: (inout RTSPService.Configuration) -> Void = { _ in }) throws {
        self.dataDirectory = dataDirectory ?? FileManager.default.temporaryDirectory.appendingPathComponent("abr-live-\(UUID().uuidString.prefix(8))")
        ownsDataDirectory = dataDirectory == nil
        var configuration = LiveNode.Configuration(dataDirectory: self.dataDirectory)
        configuration.grace = grace
        configuration.origin = origin
        configuration.allowUnprovisioned = allowUnprovisioned
        var logger = Logger(label: "test.live")
        logger.logLevel = .warning
        node = LiveNode(configuration: configuration, registry: registry, logger: logger)
        try node.provision(ProvisionParser.parse(Data(contentsOf: fixturesDirectory.appendingPathComponent("provisions/\(provision)"))))
        var rtsp = RTSPService.Configuration()
        rtsp.port = 0
        configureRTSP(&rtsp)
        service = RTSPService(configuration: rtsp, registry: registry, policy: node, logger: logger)
        port = try service.start()
    }

    deinit {
        node.shutdown(timeout: 20)
        service.shutdown()
        if ownsDataDirectory { try? FileManager.default.removeItem(at: dataDirectory) }
    }

    func url(_ path: String) -> String { "rtsp://127.0.0.1:\(port)/\(path)" }

    /// With the bundled provisions' publisher credentials, as ffmpeg takes them in the URL.
    func publishURL(_ path: String) -> String { "rtsp://user:pass@127.0.0.1:\(port)/\(path)" }

    func waitUntilPlayable(_ paths: [String], timeout: TimeInterval = 15) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if paths.allSatisfy({ registry.existingStream($0).map { $0.isPlayable && $0.framesWritten > 0 } ?? false }) { return true }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return false
    }

    func hls(_ relative: String) -> URL { dataDirectory.appendingPathComponent("hls/live/stream1/\(relative)") }
}

/// A temporary folder removed with the value.
final class ScratchFolder {
    let url: URL

    init(_ prefix: String) throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(at: url) }

    /// A 720p testsrc2 clip as a publisher's x264 makes it (veryfast, so B-frames; no audio), with
    /// a keyframe every 2 s; `variableRate` drops the picture before each keyframe, as a phone
    /// that misses a capture would.
    func x264Clip(rate: Int, seconds: Int, bitRate: String, variableRate: Bool = false) throws -> String {
        let path = url.appendingPathComponent("\(rate)fps.mp4").path
        let thinning = variableRate ? ["-vf", "select='not(eq(mod(n\\,\(2 * rate))\\,\(2 * rate - 1)))'", "-fps_mode", "vfr"] : []
        let made = try runProcess("ffmpeg", ["-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi",
                                             "-i", "testsrc2=size=1280x720:rate=\(rate):duration=\(seconds)"] + thinning +
                                            ["-c:v", "libx264", "-preset", "veryfast", "-b:v", bitRate, "-g", "\(2 * rate)",
                                             "-force_key_frames", "expr:gte(t,n_forced*2)", path])
        guard made.status == 0 else { throw ScratchError.ffmpegFailed(made.stderr) }
        return path
    }

    enum ScratchError: Error { case ffmpegFailed(String) }
}

/// A node with an x264 clip (`ScratchFolder.x264Clip`) published to the top of its ladder, once
/// its top and lowest variant play.
func publishClip(rate: Int, seconds: Int, bitRate: String, variableRate: Bool = false,
                 grace: Double, provision: String = "sm2-3-level.json") throws -> (ScratchFolder, LiveTestNode, FFmpegPublisher) {
    let work = try ScratchFolder("clip")
    let source = try work.x264Clip(rate: rate, seconds: seconds, bitRate: bitRate, variableRate: variableRate)
    let node = try LiveTestNode(grace: grace, provision: provision)
    let publisher = try FFmpegPublisher(url: node.publishURL("live/stream1_1"), transport: "tcp", seconds: seconds, input: source)
    try #require(node.waitUntilPlayable(["live/stream1_1", "live/stream1_3"]), "\(publisher.errorText)")
    return (work, node, publisher)
}

/// Video packet times a player received until the stream ended (or `seconds` passed).
func probePackets(_ url: String, transport: String = "tcp", seconds: Int) throws -> [MediaProbe.VideoPacket] {
    let result = try runProcess("ffprobe", ["-v", "error", "-rtsp_transport", transport, "-timeout", "20000000", "-select_streams", "v",
                                            "-read_intervals", "%+\(seconds)", "-show_entries", "packet=pts_time,flags", "-of", "csv=p=0", url],
                                timeout: TimeInterval(seconds + 30))
    return result.stdout.split(separator: "\n").compactMap { line in
        let parts = line.split(separator: ",")
        guard parts.count >= 2, let pts = Double(parts[0]) else { return nil }
        return MediaProbe.VideoPacket(pts: pts, isKeyframe: parts[1].contains("K"))
    }
}

@Suite(.serialized) struct LiveNodeTests {
    @Test(arguments: ["tcp", "udp"])
    func aPublishedTopBecomesAWholeLadderOnEveryTransport(_ publishTransport: String) throws {
        let node = try LiveTestNode()
        let publishedAt = Date()
        let publisher = try FFmpegPublisher(url: node.publishURL("live/stream1_1"), transport: publishTransport, seconds: 90)
        let paths = (1...3).map { "live/stream1_\($0)" }
        try #require(node.waitUntilPlayable(paths), "ladder never came up: \(publisher.errorText)")
        #expect(Date().timeIntervalSince(publishedAt) < 10, "variants took more than a few seconds")

        // Every level over TCP and UDP at once, judged by what ffmpeg recorded.
        let sizes = [1: (1280, 720), 2: (854, 480), 3: (640, 360)]
        let cases = (1...3).flatMap { level in ["tcp", "udp"].map { (level, $0) } }
        nonisolated(unsafe) var results: [Int: (status: Int32, stream: MediaProbe.VideoStream, keyframes: [Double], stderr: String)] = [:]
        let lock = NSLock()
        DispatchQueue.concurrentPerform(iterations: cases.count) { index in
            let (level, transport) = cases[index]
            let played = try? play(node.url("live/stream1_\(level)"), transport: transport, seconds: 3)
            lock.lock()
            if let played { results[index] = played }
            lock.unlock()
        }
        for (index, (level, transport)) in cases.enumerated() {
            let played = try #require(results[index], "L\(level) over \(transport) did not play")
            #expect(played.status == 0, "L\(level) \(transport): \(played.stderr)")
            #expect(played.stream.width == sizes[level]!.0 && played.stream.height == sizes[level]!.1, "L\(level) \(transport)")
            #expect(played.stream.frames >= 75, "L\(level) \(transport): \(played.stream.frames) frames in 3 s")
            #expect(played.keyframes.first == 0)
        }

        // The SDP carries the bandwidth hints.
        let client = try RawRTSPClient(port: node.port)
        client.send("DESCRIBE \(node.url("live/stream1_2")) RTSP/1.0\r\nCSeq: 1\r\nAccept: application/sdp\r\n\r\n")
        let sdp = client.receiveResponse()
        for line in ["b=AS:", "b=TIAS:", "a=x-abr-level:2", "a=x-abr-declared-bitrate:1000000", "a=x-abr-upswitch-above:",
                     "a=x-abr-downswitch-below:", "a=framerate:30", "profile-level-id=64", "sprop-parameter-sets=", "a=control:trackID=0",
                     "MPEG4-GENERIC/48000/2", "Content-Base: \(node.url("live/stream1_2"))/"] {
            #expect(sdp.contains(line), "SDP lacks \(line)")
        }

        // Live HLS: identical segment boundaries, each segment starting on an IDR, in every variant.
        let deadline = Date().addingTimeInterval(15)
        let reader = SegmentStartsReader()
        var starts: [[String: Double]] = []
        var common = Set<String>()
        while Date() < deadline {
            starts = try (1...3).map { try reader.starts(node.hls("stream1_\($0)")) }
            common = Set(starts[0].keys).intersection(starts[1].keys).intersection(starts[2].keys)
            if common.count >= 3 { break }
            Thread.sleep(forTimeInterval: 0.5)
        }
        #expect(common.count >= 2, "too few common segments: \(starts)")
        for level in 1...3 {
            let folder = node.hls("stream1_\(level)")
            #expect(reader.segmentsNotStartingOnAKeyframe(folder).isEmpty, "L\(level)'s segments not on a keyframe: \(reader.segmentsNotStartingOnAKeyframe(folder))")
        }
        for name in common { #expect(starts[0][name] == starts[1][name] && starts[1][name] == starts[2][name], "\(name): \(starts.map { $0[name] ?? -1 })") }
        let master = try PlaylistChecker.master(String(contentsOf: node.hls("master.m3u8"), encoding: .utf8))
        #expect(master.map(\.uri) == ["stream1_1/index.m3u8", "stream1_2/index.m3u8", "stream1_3/index.m3u8"])
        #expect(master.allSatisfy { Int($0.attributes["BANDWIDTH"] ?? "") ?? 0 > 0 })

        // Stats: every level moving, drops counted, added latency measured. A rung whose encoder
        // falls behind drops pictures for itself alone, by design; on a machine the suite shares
        // with its two other shards that happens for seconds (rung 2 dropped 72 of 1,112, 6.5 %,
        // in a fresh clone's run), so drops are allowed here: whether the node keeps up with real
        // time is the live benchmark's question, not a timed test's. More than a quarter means
        // the rung is not flowing.
        let status = try #require(node.node.job("live/stream1")).status
        #expect(status.state == .running)
        #expect(status.sourceWidth == 1280 && status.sourceHeight == 720)
        for variant in status.variants {
            #expect(variant.framesOut > 100 && variant.droppedFrames * 4 <= variant.framesIn, "L\(variant.abrLevel): \(variant)")
            #expect(variant.averageBitRate > 0 && variant.peakBitRate >= variant.averageBitRate)
            // Measured and bounded, not fast: the pipelines' bounded queues drop rather than wait,
            // so even a starved rung stays within seconds; under 2 s failed once (TCP publish) while
            // both shards and the fuzzers shared the machine. How fast is the live benchmark's question.
            let p99 = try #require(variant.latencyP99, "L\(variant.abrLevel) has no latency figure")
            #expect(p99 >= 0 && p99 < 5000 && (variant.latencyP50 ?? .infinity) <= p99,
                    "L\(variant.abrLevel): added latency p50 \(variant.latencyP50 ?? -1) ms, p99 \(p99) ms")
        }
        publisher.stop()
    }

    /// The telephony-interrupt seed: the publisher disappears and comes back within grace; the same
    /// player sessions receive both parts with increasing timestamps; after grace everything ends.
    @Test func anInterruptedPublisherResumesWithinGraceAndTheJobEndsAfterIt() throws {
        let node = try LiveTestNode(grace: 6)
        let first = try FFmpegPublisher(url: node.publishURL("live/stream1_1"), transport: "tcp", seconds: 30)
        try #require(node.waitUntilPlayable(["live/stream1_2"]), "\(first.errorText)")
        nonisolated(unsafe) var received: [MediaProbe.VideoPacket] = []
        let player = Thread { received = (try? probePackets(node.url("live/stream1_2"), seconds: 60)) ?? [] }
        player.start()
        Thread.sleep(forTimeInterval: 4)
        first.stop()  // the publisher is gone
        #expect(waitUntil(timeout: 10) { node.node.job("live/stream1")?.state == .interrupted })
        // Back within grace, with another size: the top passes it through after a discontinuity.
        let second = try FFmpegPublisher(url: node.publishURL("live/stream1_1"), transport: "tcp", seconds: 5, input: fixture("720p30-h264-aac.mp4"))
        #expect(waitUntil(timeout: 10) { node.node.job("live/stream1")?.state == .running })
        #expect(waitForExit(second.process, timeout: 30), "the second publisher did not finish")
        let job = try #require(node.node.job("live/stream1"))
        #expect(job.waitUntilEnded(timeout: 20), "the job did not end after grace")
        // The player's session is closed when the job ends, so it returns by itself.
        let deadline = Date().addingTimeInterval(15)
        while player.isExecuting, Date() < deadline { Thread.sleep(forTimeInterval: 0.1) }
        #expect(!player.isExecuting, "the player was not closed after the job ended")

        let times = received.map(\.pts)
        #expect(zip(times, times.dropFirst()).allSatisfy { $0 < $1 }, "timestamps went backwards")
        let largestGap = zip(times, times.dropFirst()).map { $1 - $0 }.max() ?? 0
        let rung = job.status.variants.first { $0.abrLevel == 2 }
        #expect(largestGap < 0.5, "the timeline jumps by \(largestGap) s (rung 2 dropped \(rung?.droppedFrames ?? -1) pictures, shed \(rung?.shedFrames ?? -1), the ingest dropped \(job.status.droppedAtIngest))")
        #expect((times.last ?? 0) - (times.first ?? 0) > 6, "the player did not get both parts: \(times.first ?? -1)…\(times.last ?? -1)")
        let kinds = job.events.map(\.kind)
        for kind in ["publisherConnected", "interrupted", "resumed", "ended"] { #expect(kinds.contains(kind), "no \(kind) event in \(kinds)") }
        let playlist = try String(contentsOf: node.hls("stream1_2/index.m3u8"), encoding: .utf8)
        #expect(playlist.hasSuffix("#EXT-X-ENDLIST\n"))
    }

    /// rtspclientsink sends AAC as RFC 6416 MP4A-LATM (its StreamMuxConfig in the SDP), not as
    /// mpeg4-generic: the node takes both, so a GStreamer publisher's sound reaches every rung.
    @Test func gstreamerPublishesVideoAndLATMAudioToAJobAndPlaysAVariant() throws {
        let node = try LiveTestNode()
        let publisher = Process()
        publisher.executableURL = URL(fileURLWithPath: "/usr/bin/gst-launch-1.0")
        publisher.arguments = ["-q", "rtspclientsink", "name=sink", "location=\(node.url("live/stream1_1"))", "user-id=user", "user-pw=pass",
                               "videotestsrc", "is-live=true", "num-buffers=1800", "!", "video/x-raw,width=1280,height=720,framerate=30/1",
                               // veryfast, as OBS encodes: x264enc's default (medium) takes most of a core at 720p, and on a
                               // host at a third of its speed the publisher's video fell seconds behind its own audio, so a
                               // 4-s recording of the rung held that audio past its end, and no audio packet at all.
                               "!", "x264enc", "tune=zerolatency", "speed-preset=veryfast", "key-int-max=60", "bitrate=2000", "!", "video/x-h264,profile=high",
                               "!", "h264parse", "!", "sink.",
                               "audiotestsrc", "is-live=true", "wave=sine", "!", "audio/x-raw,rate=48000,channels=1",
                               "!", "avenc_aac", "!", "aacparse", "!", "sink."]
        publisher.standardOutput = FileHandle.nullDevice
        publisher.standardError = FileHandle.nullDevice
        try publisher.runDeliveringSignals()
        defer { stopProcess(publisher, signal: SIGINT) }
        try #require(node.waitUntilPlayable(["live/stream1_3"]), "rtspclientsink's stream never made a ladder")
        let playback = try playWithRTSPSource(node.url("live/stream1_3"), protocols: "tcp", pictures: 45,
                                              decode: ["h264parse", "!", "avdec_h264", "!", "videoconvert", "!", "video/x-raw,width=640,height=360"])
        #expect(playback.played(45), "rtspsrc: \(playback.summary)")

        // The lowest rung, as ffmpeg records it: mono 48 kHz AAC that decodes without an error.
        let scratch = try ScratchFolder("latm")
        let file = scratch.url.appendingPathComponent("rung.mkv").path
        let recorded = try runProcess("ffmpeg", ["-hide_banner", "-v", "error", "-rtsp_transport", "tcp", "-i", node.url("live/stream1_3"),
                                                 "-t", "4", "-c", "copy", "-y", file], timeout: 30)
        try #require(recorded.status == 0, "\(recorded.stderr)")
        let audio = try runProcess("ffprobe", ["-v", "error", "-select_streams", "a", "-count_packets",
                                               "-show_entries", "stream=codec_name,sample_rate,channels,nb_read_packets", "-of", "csv=p=0", file])
        let fields = audio.stdout.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: ",")
        #expect(fields.prefix(3) == ["aac", "48000", "1"], "audio of the rung: \(audio.stdout)")
        // 4 s of 48 kHz AAC is about 190 frames; the recording's clock starts with the first packet
        // of either track, so on a busy machine audio may cover a little less of it.
        #expect((fields.last.flatMap { Int($0) } ?? 0) > 100, "4 s of 48 kHz AAC is about 190 frames: \(audio.stdout)")
        let decoded = try runProcess("ffmpeg", ["-hide_banner", "-v", "error", "-i", file, "-map", "0:a", "-f", "null", "-"])
        #expect(decoded.status == 0 && decoded.stderr.isEmpty, "\(decoded.stderr.prefix(300))")
    }

    @Test func publisherNotificationsBecomeJobEvents() throws {
        let node = try LiveTestNode()
        let client = try RawRTSPClient(port: node.port)
        let (session, statuses) = client.startPublishing(node.url("live/stream1_1"), authorization: RawRTSPClient.basic("user", "pass"))
        #expect(statuses == [200, 200, 200])
        for name in ["publisherBackground", "publisherForeground", "publisherInterrupt"] {
            client.send("SET_PARAMETER \(node.url("live/stream1_1")) RTSP/1.0\r\nCSeq: 4\r\nSession: \(session)\r\nContent-Type: text/parameters\r\nContent-Length: \(name.utf8.count + 2)\r\n\r\n\(name)\r\n")
            #expect(client.status() == 200)
        }
        let events = try #require(node.node.job("live/stream1")).events
        #expect(events.map(\.kind).suffix(3) == ["publisherBackground", "publisherForeground", "publisherInterrupt"])
        #expect(events.allSatisfy { $0.time > 1_700_000_000 })
    }

    /// Every variant is pushed to an origin (another RTSP server: our own, relaying), and pushing
    /// resumes after the origin restarts.
    @Test func variantsArePushedToAnOriginThatMayGoAway() throws {
        var origin: TestNode? = try TestNode()
        let originPort = origin!.port
        let node = try LiveTestNode(origin: "rtsp://127.0.0.1:\(originPort)")
        let publisher = try FFmpegPublisher(url: node.publishURL("live/stream1_1"), transport: "tcp", seconds: 40)
        let paths = (1...3).map { "live/stream1_\($0)" }
        try #require(paths.allSatisfy { origin!.waitUntilPlayable($0, timeout: 20) }, "variants never reached the origin: \(publisher.errorText)")
        let played = try play(origin!.url("live/stream1_3"), transport: "tcp", seconds: 2)
        #expect(played.stream.width == 640 && played.stream.height == 360)

        origin = nil  // the origin goes away...
        #expect(waitUntil(timeout: 10) { node.node.originStatistics["live/stream1_2"]?.connected == false })
        var configuration = RTSPService.Configuration()
        configuration.port = originPort
        let registry = StreamRegistry()
        let restarted = RTSPService(configuration: configuration, registry: registry, policy: RelayEverything(registry: registry))
        defer { restarted.shutdown() }
        try restarted.start()  // ...and comes back on the same port
        let deadline = Date().addingTimeInterval(40)
        while Date() < deadline, !paths.allSatisfy({ (registry.existingStream($0)?.framesWritten ?? 0) > 0 }) { Thread.sleep(forTimeInterval: 0.2) }
        #expect(paths.allSatisfy { (registry.existingStream($0)?.framesWritten ?? 0) > 0 }, "pushing did not resume")
        let statistics = try #require(node.node.originStatistics["live/stream1_2"])
        #expect(statistics.connectionAttempts >= 2 && statistics.failures >= 1 && statistics.connected)
        publisher.stop()
    }

    /// A publisher with B-frames and no audio (x264's defaults): RTP gives presentation times only,
    /// so the node derives decoding times; the passed-through top must decode cleanly and every
    /// variant's segments must still start on the same picture.
    @Test func aBFramePublisherPassesThroughCleanlyAndStaysAligned() throws {
        let (work, node, publisher) = try publishClip(rate: 30, seconds: 8, bitRate: "2000k", grace: 2)
        // WebRTC cannot carry the passed-through top's B-frames in order; the encoded rungs have none.
        #expect(node.registry.existingStream("live/stream1_1")?.webRTCRefusal?.contains("B-frames") == true)
        #expect(node.registry.existingStream("live/stream1_2")?.webRTCRefusal == nil)
        #expect(waitForExit(publisher.process, timeout: 30))
        let job = try #require(node.node.job("live/stream1"))
        #expect(job.waitUntilEnded(timeout: 20))
        #expect(job.status.variants.first?.passthrough == true)

        let starts = try (1...3).map { try segmentStarts(node.hls("stream1_\($0)")) }
        #expect(starts[0].count >= 3, "\(starts)")
        #expect(starts[0] == starts[1] && starts[1] == starts[2], "segment starts differ: \(starts)")
        // The passed-through top, as a player would fetch it, decodes without a single error.
        let folder = node.hls("stream1_1")
        let playlist = try PlaylistChecker.media(String(contentsOf: folder.appendingPathComponent("index.m3u8"), encoding: .utf8))
        var whole = try Data(contentsOf: folder.appendingPathComponent(playlist.map ?? "init.mp4"))
        for segment in playlist.segments { whole += try Data(contentsOf: folder.appendingPathComponent(segment.uri)) }
        let file = work.url.appendingPathComponent("top.mp4")
        try whole.write(to: file)
        let decoded = try runProcess("ffmpeg", ["-hide_banner", "-v", "error", "-i", file.path, "-f", "null", "-"])
        #expect(decoded.status == 0 && decoded.stderr.isEmpty, "the top does not decode cleanly: \(decoded.stderr.prefix(300))")
    }

    /// The same publisher, provisioned with `"playback": {"webrtcSafe": true}`: its top is
    /// encoded instead of passed through, so every rung can go to a browser over WebRTC.
    @Test func aWebRTCSafeProvisionEncodesABFrameTop() throws {
        let (work, node, publisher) = try publishClip(rate: 30, seconds: 6, bitRate: "2000k", grace: 1,
                                                      provision: "sm2-3-level-webrtc-safe.json")
        let job = try #require(node.node.job("live/stream1"))
        #expect(job.status.variants.first?.passthrough == false)
        for level in 1...3 {
            #expect(node.registry.existingStream("live/stream1_\(level)")?.webRTCRefusal == nil, "level \(level)")
        }
        #expect(waitForExit(publisher.process, timeout: 30))
        withExtendedLifetime(work) {}
    }

    /// A variable-rate publisher: the picture before each keyframe is missing, so the gap into
    /// every segment's first picture is two frames long. The segment before it must end at that
    /// picture's real time, not a frame's length after its own last picture, or the encoded rungs'
    /// keyframes land a frame early and no longer line up with the top's.
    @Test func aVariableRatePublisherKeepsEveryVariantsSegmentsOnTheSourcesKeyframes() throws {
        let (work, node, publisher) = try publishClip(rate: 30, seconds: 9, bitRate: "2000k", variableRate: true, grace: 1)
        #expect(waitForExit(publisher.process, timeout: 30))
        let job = try #require(node.node.job("live/stream1"))
        #expect(job.waitUntilEnded(timeout: 20))
        let starts = try (1...3).map { try segmentStarts(node.hls("stream1_\($0)")) }
        #expect(starts[0].count >= 3, "\(starts)")
        #expect(starts[0] == starts[1] && starts[1] == starts[2], "segment starts differ: \(starts)")
        // The source's keyframes are 2 s apart; so are the segments'.
        let times = starts[2].values.sorted()
        for (earlier, later) in zip(times, times.dropFirst()) {
            #expect(abs(later - earlier - 2) < 0.002, "segments start at \(times)")
        }
        withExtendedLifetime(work) {}
    }

    /// A publisher that changes its picture size mid-publish, as an adaptive phone encoder does:
    /// the new parameter sets come in-band with a keyframe. The passed-through top's HLS gets a new
    /// init segment and a discontinuity each time, so every segment decodes with its own map.
    @Test func aPublisherThatChangesSizeMidPublishGetsANewInitSegmentOnTheTop() throws {
        let work = try ScratchFolder("resize")
        for (name, size) in [("wide", "1280x720"), ("narrow", "960x540")] {
            let made = try runProcess("ffmpeg", ["-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=\(size):rate=30:duration=3",
                                                 "-c:v", "libx264", "-preset", "veryfast", "-bf", "0", "-g", "30", "-b:v", "1500k",
                                                 work.url.appendingPathComponent("\(name).ts").path])
            try #require(made.status == 0, "\(made.stderr)")
        }
        let source = work.url.appendingPathComponent("resizing.ts").path
        let parts = ["wide", "narrow", "wide"].map { work.url.appendingPathComponent("\($0).ts").path }.joined(separator: "|")
        let joined = try runProcess("ffmpeg", ["-hide_banner", "-loglevel", "error", "-y", "-i", "concat:\(parts)", "-c", "copy", source])
        try #require(joined.status == 0, "\(joined.stderr)")
        let node = try LiveTestNode(grace: 1)
        let publisher = try FFmpegPublisher(url: node.publishURL("live/stream1_1"), transport: "tcp", seconds: 9, input: source)
        try #require(node.waitUntilPlayable(["live/stream1_1", "live/stream1_3"]), "\(publisher.errorText)")
        #expect(waitForExit(publisher.process, timeout: 30))
        let job = try #require(node.node.job("live/stream1"))
        #expect(job.waitUntilEnded(timeout: 20))
        #expect(job.status.variants.first?.passthrough == true)

        let folder = node.hls("stream1_1")
        let playlist = try PlaylistChecker.media(String(contentsOf: folder.appendingPathComponent("index.m3u8"), encoding: .utf8))
        var sizes: Set<String> = []
        for segment in playlist.segments {
            let map = segment.map ?? "init.mp4"
            let file = work.url.appendingPathComponent("segment.mp4")
            try (Data(contentsOf: folder.appendingPathComponent(map)) + Data(contentsOf: folder.appendingPathComponent(segment.uri))).write(to: file)
            // What the map declares (its sample entry, all a strict MSE player reads) must be what
            // the segment's pictures are.
            let declared = try runProcess("ffprobe", ["-v", "error", "-select_streams", "v", "-show_entries", "stream=width,height", "-of", "csv=p=0",
                                                      folder.appendingPathComponent(map).path])
            let pictures = try runProcess("ffprobe", ["-v", "error", "-select_streams", "v", "-read_intervals", "%+#1", "-show_entries", "frame=width,height",
                                                      "-of", "csv=p=0", file.path])
            func widthAndHeight(_ csv: String) -> String { csv.split(whereSeparator: { $0 == "," || $0.isNewline }).prefix(2).joined(separator: ",") }
            let size = widthAndHeight(pictures.stdout)
            #expect(widthAndHeight(declared.stdout) == size, "\(segment.uri) is \(size), its map \(map) says \(declared.stdout)")
            sizes.insert(size)
            let decoded = try runProcess("ffmpeg", ["-hide_banner", "-v", "error", "-i", file.path, "-f", "null", "-"])
            #expect(decoded.status == 0 && decoded.stderr.isEmpty, "\(segment.uri) with \(map): \(decoded.stderr.prefix(300))")
        }
        #expect(sizes == ["1280,720", "960,540"], "segment sizes: \(sizes)")
        // Init segments the window no longer needs are gone.
        let inits = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasPrefix("init") }
        let referenced = Set(playlist.segments.compactMap(\.map))
        #expect(Set(inits).isSubset(of: referenced), "\(inits) against \(referenced)")
    }

    /// RTSP publishers seldom state their frame rate, so the node judges it from the timestamps.
    /// Encoders opened at a guessed 30 fps spent a 50 fps rung's budget 5/3 too fast, and the
    /// playlists said 30.
    @Test func aPublisherAt50FpsGetsRungsAt50FpsAndAtTheirDeclaredBitRates() throws {
        let (work, node, publisher) = try publishClip(rate: 50, seconds: 10, bitRate: "2500k", grace: 1)
        // ffprobe takes a live stream's average rate from the SDP's a=framerate.
        let described = try runProcess("ffprobe", ["-v", "error", "-rtsp_transport", "tcp", "-select_streams", "v",
                                                   "-show_entries", "stream=avg_frame_rate", "-of", "csv=p=0", node.url("live/stream1_2")], timeout: 30)
        #expect(described.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "50/1", "a rung's SDP: \(described.stdout) \(described.stderr)")
        #expect(waitForExit(publisher.process, timeout: 30))
        let job = try #require(node.node.job("live/stream1"))
        #expect(job.waitUntilEnded(timeout: 20))

        let master = try String(contentsOf: node.hls("master.m3u8"), encoding: .utf8)
        let rates = master.split(separator: "\n").filter { $0.hasPrefix("#EXT-X-STREAM-INF") }.map { line in
            line.split(separator: ",").first { $0.hasPrefix("FRAME-RATE=") }.map(String.init) ?? "none"
        }
        #expect(rates == Array(repeating: "FRAME-RATE=50.000", count: 3), "\(master)")
        let hints = try JSONDecoder().decode(BandwidthHints.self, from: Data(contentsOf: node.hls("abr.json")))
        for rung in hints.variants where !rung.passthrough {
            #expect(rung.frameRate == 50)
            // No audio here: the measured rate is the encoder's alone.
            let ratio = Double(rung.averageBitRate) / Double(rung.declaredBitRate)
            #expect((0.75...1.25).contains(ratio), "level \(rung.abrLevel): \(rung.averageBitRate) b/s for \(rung.declaredBitRate) declared")
        }
        withExtendedLifetime(work) {}
    }

    @Test func anUnprovisionedPublishIsRelayedAsOneVariantWhenAllowed() throws {
        let node = try LiveTestNode(allowUnprovisioned: true)
        let publisher = try FFmpegPublisher(url: node.url("live/guest"), transport: "tcp", seconds: 15)
        try #require(node.waitUntilPlayable(["live/guest"]), "\(publisher.errorText)")
        let played = try play(node.url("live/guest"), transport: "udp", seconds: 2)
        #expect(played.stream.width == 1280 && played.stream.height == 720, "relayed unchanged")
        #expect(node.node.job("live/guest") == nil, "a relay is not a transcoding job")
        // A lower level of a provisioned ladder is still refused.
        let refused = try runProcess("ffmpeg", ["-hide_banner", "-loglevel", "error", "-re", "-i", fixture("720p30-h264-aac.mp4"), "-t", "1",
                                                "-c", "copy", "-f", "rtsp", "-rtsp_transport", "tcp", node.url("live/stream1_3")], timeout: 20)
        #expect(refused.stderr.contains("403"))
        publisher.stop()
    }

    @Test func onlyTheTopOfAProvisionedLadderMayBePublished() throws {
        let node = try LiveTestNode()
        for (path, status) in [("live/stream1_2", "403"), ("live/other_1", "404")] {
            let result = try runProcess("ffmpeg", ["-hide_banner", "-loglevel", "error", "-re", "-i", fixture("720p30-h264-aac.mp4"), "-t", "1",
                                                   "-c", "copy", "-f", "rtsp", "-rtsp_transport", "tcp", node.url(path)], timeout: 20)
            #expect(result.status != 0)
            #expect(result.stderr.contains(status), "\(path): \(result.stderr)")
        }
    }
}

/// First video timestamp of every segment in a variant's live playlist, by segment name.
func segmentStarts(_ folder: URL) throws -> [String: Double] { try SegmentStartsReader().starts(folder) }

/// Each variant's segment starts, read again and again as a live window moves. A segment the
/// playlist lists is finished, so each is probed once: probing every listed segment on every
/// pass made one such wait take 20 s of ffprobe runs.
final class SegmentStartsReader {
    /// Per folder and segment, the first picture's time, or nil where it is not a keyframe.
    private var probed: [String: [String: Double?]] = [:]

    /// Segments listed so far whose first picture is not a keyframe, per folder.
    func segmentsNotStartingOnAKeyframe(_ folder: URL) -> [String] {
        (probed[folder.path] ?? [:]).filter { $0.value == nil }.map(\.key).sorted()
    }

    /// The start of every segment the playlist lists now that begins with a keyframe.
    func starts(_ folder: URL) throws -> [String: Double] {
        guard let text = try? String(contentsOf: folder.appendingPathComponent("index.m3u8"), encoding: .utf8) else { return [:] }
        let playlist = try PlaylistChecker.media(text)
        var known = probed[folder.path] ?? [:]
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("live-segment-\(UUID().uuidString).mp4")
        defer { try? FileManager.default.removeItem(at: scratch) }
        var starts: [String: Double] = [:]
        for segment in playlist.segments {
            if let start = known[segment.uri] {
                if let start { starts[segment.uri] = start }
                continue
            }
            guard let map = playlist.map, let initData = try? Data(contentsOf: folder.appendingPathComponent(map)),
                  let data = try? Data(contentsOf: folder.appendingPathComponent(segment.uri)) else { continue }
            try (initData + data).write(to: scratch)
            if let first = try MediaProbe.videoPackets(scratch.path).first, first.isKeyframe {
                let start = (first.pts * 1000).rounded() / 1000
                known[segment.uri] = start
                starts[segment.uri] = start
            } else {
                known[segment.uri] = .some(nil)
            }
        }
        probed[folder.path] = known
        return starts
    }
}

/// What a publisher who comes back within grace brings with it, beside its pictures.
@Suite(.serialized) struct ResumedPublisherAudioTests {
    /// A publisher who comes back with other audio (44.1 kHz mono after the job opened its
    /// outputs with 48 kHz stereo, as a phone after a desktop encoder): every rung's HLS keeps
    /// the job's format, so the new audio is encoded again into it, and the job says so. Before,
    /// the rest of the job was silent and nothing said why.
    @Test func aPublisherWhoComesBackWithOtherAudioKeepsTheJobsSound() throws {
        let work = try ScratchFolder("other-audio")
        let phone = work.url.appendingPathComponent("phone.mp4").path
        let made = try runProcess("ffmpeg", ["-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=30:duration=4",
                                             "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=44100:duration=4",
                                             "-c:v", "libx264", "-preset", "veryfast", "-bf", "0", "-g", "60", "-b:v", "1500k",
                                             "-c:a", "aac", "-ac", "1", "-ar", "44100", phone])
        try #require(made.status == 0, "\(made.stderr)")
        let node = try LiveTestNode(grace: 2)
        let first = try FFmpegPublisher(url: node.publishURL("live/stream1_1"), transport: "tcp", seconds: 30)
        try #require(node.waitUntilPlayable(["live/stream1_2"]), "\(first.errorText)")
        Thread.sleep(forTimeInterval: 1)
        first.stop()
        #expect(waitUntil(timeout: 10) { node.node.job("live/stream1")?.state == .interrupted })
        let second = try FFmpegPublisher(url: node.publishURL("live/stream1_1"), transport: "tcp", seconds: 7, input: phone)
        #expect(waitForExit(second.process, timeout: 30), "the second publisher did not finish")
        let job = try #require(node.node.job("live/stream1"))
        #expect(job.waitUntilEnded(timeout: 20), "the job did not end after grace")
        #expect(job.events.contains { $0.kind == "audioReencoded" && $0.detail.contains("44100 Hz mono") && $0.detail.contains("48000 Hz stereo") },
                "\(job.events.map { "\($0.kind): \($0.detail)" })")

        let folder = node.hls("stream1_2")
        let playlist = try PlaylistChecker.media(String(contentsOf: folder.appendingPathComponent("index.m3u8"), encoding: .utf8))
        // The second publisher's whole segments (the last may be short): sound in the job's format.
        let resumed = playlist.segments.dropLast().suffix(2)
        #expect(resumed.count == 2, "\(playlist.segments.map(\.uri))")
        for segment in resumed {
            let file = work.url.appendingPathComponent("segment.mp4")
            try (Data(contentsOf: folder.appendingPathComponent(segment.map ?? "init.mp4")) + Data(contentsOf: folder.appendingPathComponent(segment.uri))).write(to: file)
            let audio = try runProcess("ffprobe", ["-v", "error", "-select_streams", "a", "-show_entries", "stream=sample_rate,channels:packet=pts_time",
                                                   "-of", "csv=p=0", file.path])
            let lines = audio.stdout.split(separator: "\n")
            #expect(lines.contains("48000,2"), "\(segment.uri): \(lines.suffix(3))")
            // About 47 AAC frames a second at 48 kHz, for each second of the segment.
            #expect(Double(lines.count - 1) >= segment.duration * 40, "\(segment.uri): \(lines.count - 1) audio packets in \(segment.duration) s")
            let decoded = try runProcess("ffmpeg", ["-hide_banner", "-v", "error", "-i", file.path, "-map", "0:a", "-f", "null", "-"])
            #expect(decoded.status == 0 && decoded.stderr.isEmpty, "\(segment.uri): \(decoded.stderr.prefix(300))")
        }
    }
}
