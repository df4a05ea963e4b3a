import Foundation
import Testing
import TestSupport

/// Publishers that do not speak RTSP: RTMP from ffmpeg and GStreamer (and, by the same command
/// sequence, OBS) into the same ladder, with the provision's credentials, interrupts with grace,
/// and refusals that say why. The ladder is the small one (360p, 240p, 144p): these tests are
/// about the protocols, and it costs a quarter of the 720p ladder's decoding and scaling.
@Suite(.serialized) struct IngestTests {
    static func scratch() -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("abr-ingest-\(UUID().uuidString.prefix(8))")
    }

    /// ffmpeg pushing the bundled clip over RTMP (looped for `seconds`), in the background.
    static func ffmpegRTMP(_ url: String, seconds: Int, errors: URL) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/ffmpeg")
        process.arguments = ["-hide_banner", "-loglevel", "error", "-re", "-stream_loop", "-1", "-i", fixture("360p30-h264-aac.mp4"),
                             "-t", "\(seconds)", "-c", "copy", "-f", "flv", url]
        FileManager.default.createFile(atPath: errors.path, contents: nil)
        process.standardError = try FileHandle(forWritingTo: errors)
        process.standardInput = FileHandle.nullDevice
        try process.runDeliveringSignals()
        return process
    }

    /// GStreamer's own RTMP client: x264 and AAC in FLV through `rtmp2sink`, for `seconds` of live test pictures.
    static func gstreamerRTMP(_ url: String, seconds: Int, errors: URL) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/gst-launch-1.0")
        process.arguments = ["-q", "flvmux", "name=mux", "streamable=true", "!", "rtmp2sink", "location=\(url)",
                             "videotestsrc", "is-live=true", "num-buffers=\(seconds * 30)", "!", "video/x-raw,format=I420,width=640,height=360,framerate=30/1",
                             "!", "x264enc", "tune=zerolatency", "speed-preset=ultrafast", "key-int-max=60", "bitrate=600", "!", "h264parse",
                             "!", "queue", "!", "mux.",
                             "audiotestsrc", "is-live=true", "num-buffers=\(seconds * 47)", "!", "audio/x-raw,rate=48000,channels=2", "!", "audioconvert", "!", "avenc_aac", "!", "aacparse",
                             "!", "queue", "!", "mux."]
        FileManager.default.createFile(atPath: errors.path, contents: nil)
        process.standardError = try FileHandle(forWritingTo: errors)
        process.standardOutput = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.runDeliveringSignals()
        return process
    }

    static func publisher(_ node: ServeProcess) -> [String: Any]? {
        ((try? node.http("GET", "/v1/jobs/live/stream1"))?.json as? [String: Any])?["publisher"] as? [String: Any]
    }

    /// ffmpeg publishes over RTMP, players get every rung over RTSP and HLS; it leaves, GStreamer
    /// resumes the job over RTMP within grace; refused publishers hear why; garbage is cut off
    /// while the ladder goes on.
    @Test func rtmpPublishersFeedTheLadderResumeWithinGraceAndAreRefusedWithReasons() throws {
        let scratch = Self.scratch()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let node = try ServeProcess(dataDirectory: scratch.appendingPathComponent("data"),
                                    arguments: ["--grace", "30", "--provision", fixture("provisions/sm2-3-level-360p.json")])
        defer { node.stop() }
        let rtmp = try #require(node.rtmpBase, "serve printed no RTMP line: \(node.output)")
        #expect(node.output.contains("publish to \(node.rtspBase)/live/stream1_1 or \(rtmp)/live/stream1_1"))

        // ffmpeg, credentials on the stream key as Red5 and Wowza clients send them.
        let ffmpegErrors = scratch.appendingPathComponent("ffmpeg.err")
        let ffmpeg = try Self.ffmpegRTMP("\(rtmp)/live/stream1_1?user=user&password=pass", seconds: 40, errors: ffmpegErrors)
        defer { stopProcess(ffmpeg, signal: SIGINT) }
        let running = node.waitFor(timeout: 15) {
            guard node.jobState("live/stream1") == "running",
                  let variants = ((try? node.http("GET", "/v1/jobs/live/stream1"))?.json as? [String: Any])?["variants"] as? [[String: Any]] else { return false }
            return variants.count == 3 && variants.allSatisfy { ($0["framesOut"] as? Int ?? 0) > 15 }
        }
        try #require(running, "the ladder never ran from RTMP: \((try? String(contentsOf: ffmpegErrors, encoding: .utf8)) ?? "") \(node.log.suffix(1500))")
        #expect(Self.publisher(node)?["protocol"] as? String == "rtmp")
        // The status page offers every way to publish.
        let page = (try? node.http("GET", "/"))?.body ?? ""
        #expect(page.contains("\(rtmp)/live/stream1_1") && page.contains("srt://") && page.contains("\(node.rtspBase)/live/stream1_1"), "\(page.prefix(600))")
        let metrics = (try? node.http("GET", "/metrics"))?.body ?? ""
        #expect(metrics.contains("abr_worker_publishers_by_protocol{protocol=\"rtmp\"} 1"), "\(metrics.split(separator: "\n").filter { $0.contains("publishers") })")
        let played = try runProcess("ffmpeg", ["-hide_banner", "-loglevel", "error", "-rtsp_transport", "tcp", "-i", "\(node.rtspBase)/live/stream1_3",
                                               "-t", "3", "-c", "copy", "-y", scratch.appendingPathComponent("rung3.mp4").path], timeout: 30)
        #expect(played.status == 0, "\(played.stderr)")
        let rung3 = try MediaProbe.videoStream(scratch.appendingPathComponent("rung3.mp4").path)
        #expect(rung3.width == 256 && rung3.height == 144 && rung3.frames >= 60, "\(rung3)")
        #expect(node.waitFor(timeout: 10) {
            ((try? node.http("GET", "/hls/live/stream1/master.m3u8"))?.body.components(separatedBy: "#EXT-X-STREAM-INF").count ?? 0) == 4
        })

        // While it publishes: a second publisher of the same stream, wrong or missing credentials,
        // and a stream that is not provisioned, each refused with a status that says why.
        for (url, expected) in [("\(rtmp)/live/stream1_1?user=user&password=pass", "already has a publisher"),
                                ("\(rtmp)/live/stream1_1?user=user&password=wrong", "credentials"),
                                ("\(rtmp)/live/stream1_1", "credentials"),
                                ("\(rtmp)/live/nothing_1", "not provisioned")] {
            let refused = try runProcess("ffmpeg", ["-hide_banner", "-loglevel", "error", "-re", "-i", fixture("360p30-h264-aac.mp4"), "-t", "2",
                                                    "-c", "copy", "-f", "flv", url], timeout: 30)
            #expect(refused.status != 0 && refused.stderr.contains(expected), "\(url): \(refused.stderr)")
        }
        // Garbage after a real handshake, and garbage instead of one: each connection is closed, the ladder goes on.
        for garbage in [[UInt8]([3]) + [UInt8](repeating: 0, count: 3072) + (0..<4000).map { UInt8(truncatingIfNeeded: $0 &* 7919) },
                        Array("GET / HTTP/1.1\r\nHost: x\r\n\r\n".utf8)] {
            let port = try #require(Int(rtmp.split(separator: ":").last ?? ""))
            let connection = try RawConnection(port: port)
            connection.send(garbage)
            #expect(connection.waitUntilClosed(timeout: 15), "the node kept a garbage connection open")
        }
        #expect(node.jobState("live/stream1") == "running")

        // ffmpeg stops (its FCUnpublish ends the publish); GStreamer takes over within grace, on the same job.
        stopProcess(ffmpeg, signal: SIGINT)
        #expect(node.waitFor(timeout: 15) { node.jobState("live/stream1") == "interrupted" })
        let gstreamerErrors = scratch.appendingPathComponent("gstreamer.err")
        let gstreamer = try Self.gstreamerRTMP("\(rtmp)/live/stream1_1?user=user&password=pass", seconds: 12, errors: gstreamerErrors)
        defer { stopProcess(gstreamer, signal: SIGINT) }
        let resumed = node.waitFor(timeout: 15) { node.jobState("live/stream1") == "running" }
        #expect(resumed, "GStreamer did not resume the job: \((try? String(contentsOf: gstreamerErrors, encoding: .utf8)) ?? "") \(node.log.suffix(1500))")
        let second = try runProcess("ffmpeg", ["-hide_banner", "-loglevel", "error", "-rtsp_transport", "tcp", "-i", "\(node.rtspBase)/live/stream1_2",
                                               "-t", "2", "-c", "copy", "-y", scratch.appendingPathComponent("rung2.mp4").path], timeout: 30)
        #expect(second.status == 0, "\(second.stderr)")
        let rung2 = try MediaProbe.videoStream(scratch.appendingPathComponent("rung2.mp4").path)
        #expect(rung2.width == 426 && rung2.height == 240 && rung2.frames >= 30, "\(rung2)")
        let history = ((try node.http("GET", "/v1/jobs/live/stream1")).json as? [String: Any])?["history"] as? [[String: Any]] ?? []
        #expect(history.contains { $0["kind"] as? String == "resumed" }, "\(history.map { $0["kind"] ?? "" })")
    }
}

extension IngestTests {
    /// ffmpeg pushing MPEG-TS over SRT, the stream ID in the URL as Debian's ffmpeg 5.1 passes it on (not URL-decoded).
    static func ffmpegSRT(_ base: String, streamID: String, seconds: Int, errors: URL, input: [String]? = nil, format: String = "mpegts") throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/ffmpeg")
        process.arguments = ["-hide_banner", "-loglevel", "error"]
            + (input ?? ["-re", "-stream_loop", "-1", "-i", fixture("360p30-h264-aac.mp4"), "-c", "copy"])
            + ["-t", "\(seconds)", "-f", format, "\(base)\(base.contains("?") ? "&" : "?")streamid=\(streamID)&latency=120000"]
        FileManager.default.createFile(atPath: errors.path, contents: nil)
        process.standardError = try FileHandle(forWritingTo: errors)
        process.standardInput = FileHandle.nullDevice
        try process.runDeliveringSignals()
        return process
    }

    static func text(_ file: URL) -> String { (try? String(contentsOf: file, encoding: .utf8)) ?? "" }

    /// One ladder fed in turn over RTSP, RTMP and SRT, within grace, while one RTSP player plays a
    /// rung throughout: it decodes every part without an error, the job resumes twice, and the
    /// job view names each protocol while it publishes.
    @Test func aPublishOverEachProtocolFeedsOneLadder() throws {
        let scratch = Self.scratch()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let node = try ServeProcess(dataDirectory: scratch.appendingPathComponent("data"),
                                    arguments: ["--grace", "30", "--provision", fixture("provisions/sm2-3-level-360p.json")])
        defer { node.stop() }
        let (rtmp, srt) = (try #require(node.rtmpBase), try #require(node.srtBase, "serve printed no SRT line: \(node.output)"))
        var seen: [String] = []
        func publishing(_ transport: String) -> Bool {
            node.waitFor(timeout: 15) { node.jobState("live/stream1") == "running" && Self.publisher(node)?["protocol"] as? String == transport }
        }

        let rtsp = try runProcess("ffmpeg", ["-hide_banner", "-loglevel", "error", "-re", "-i", fixture("360p30-h264-aac.mp4"), "-c", "copy",
                                             "-f", "rtsp", "-rtsp_transport", "tcp", "rtsp://user:pass@\(node.rtspBase.dropFirst(7))/live/stream1_1"],
                                 timeout: 30)
        #expect(rtsp.status == 0, "\(rtsp.stderr)")
        // The player joins the interrupted job and stays through the next two publishers: 10 s of
        // media is the RTMP publisher's 6 and the first 4 of the SRT one's (media time does not
        // count the gaps between publishers).
        let recording = scratch.appendingPathComponent("player.ts")
        let player = Process()
        player.executableURL = URL(fileURLWithPath: "/usr/bin/ffmpeg")
        player.arguments = ["-hide_banner", "-loglevel", "error", "-rtsp_transport", "tcp", "-i", "\(node.rtspBase)/live/stream1_2",
                            "-t", "10", "-c", "copy", "-f", "mpegts", "-y", recording.path]
        let playerErrors = scratch.appendingPathComponent("player.err")
        FileManager.default.createFile(atPath: playerErrors.path, contents: nil)
        player.standardError = try FileHandle(forWritingTo: playerErrors)
        player.standardInput = FileHandle.nullDevice
        try player.runDeliveringSignals()
        defer { stopProcess(player, signal: SIGINT) }

        let rtmpErrors = scratch.appendingPathComponent("rtmp.err")
        let overRTMP = try Self.ffmpegRTMP("\(rtmp)/live/stream1_1?user=user&password=pass", seconds: 6, errors: rtmpErrors)
        defer { stopProcess(overRTMP, signal: SIGINT) }
        if publishing("rtmp") { seen.append("rtmp") }
        #expect(waitForExit(overRTMP, timeout: 20), "\(Self.text(rtmpErrors))")
        #expect(node.waitFor(timeout: 15) { node.jobState("live/stream1") == "interrupted" })

        let srtErrors = scratch.appendingPathComponent("srt.err")
        // 18 s: the player's last 4 s of media with slack for SRT's start (libavformat's analysis)
        // and the job's resume on a busy machine; with 12 s, a fresh-clone CI once ended the
        // publisher before the player had its 10 s, and the player waited for media that never came.
        let overSRT = try Self.ffmpegSRT(srt, streamID: "#!::r=live/stream1_1,m=publish,u=user,p=pass", seconds: 18, errors: srtErrors)
        defer { stopProcess(overSRT, signal: SIGINT) }
        if publishing("srt") { seen.append("srt") }
        #expect(seen == ["rtmp", "srt"], "publishers seen: \(seen); SRT: \(Self.text(srtErrors)) \(node.log.suffix(1500))")
        #expect(waitForExit(overSRT, timeout: 26), "\(Self.text(srtErrors))")
        #expect(waitForExit(player, timeout: 30), "player: \(Self.text(playerErrors)) node: \(node.log.suffix(3000))")

        let history = ((try node.http("GET", "/v1/jobs/live/stream1")).json as? [String: Any])?["history"] as? [[String: Any]] ?? []
        #expect(history.filter { $0["kind"] as? String == "resumed" }.count >= 2, "\(history.map { $0["kind"] ?? "" })")
        let decoded = try runProcess("ffprobe", ["-v", "error", "-select_streams", "v", "-count_frames", "-show_entries", "stream=nb_read_frames,width,height",
                                                 "-of", "csv=p=0", recording.path])
        #expect(decoded.status == 0 && decoded.stderr.isEmpty, "decoder errors: \(decoded.stderr.prefix(800))")
        let fields = decoded.stdout.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: ",")
        #expect(fields.first == "426" && (fields.last.flatMap { Int($0) } ?? 0) >= 200, "\(decoded.stdout)")
        // The sound goes on through each publisher: an SRT publisher's AAC comes after its first
        // pictures, and a job that took the pictures without it had no audio for the whole publish
        // (the player then waited for audio to reach its 10 s until the job ended).
        let audio = try runProcess("ffprobe", ["-v", "error", "-select_streams", "a", "-count_packets", "-show_entries", "stream=nb_read_packets",
                                               "-of", "csv=p=0", recording.path])
        let audioFrames = audio.stdout.split(whereSeparator: \.isNewline).first.flatMap { Int($0) } ?? 0
        #expect(audioFrames >= 8 * 48000 / 1024, "\(audioFrames) AAC frames: less than 8 s of sound in 10 s of media")
        let variant = try node.http("GET", "/hls/live/stream1/stream1_2/index.m3u8").body
        #expect(variant.contains("#EXT-X-DISCONTINUITY") || variant.contains("#EXTINF"), "\(variant)")
    }

    /// SRT refusals (wrong credentials, a player's mode, a stream that is not there), a publisher
    /// of something other than MPEG-TS, and GStreamer's `srtsink` publishing in its turn.
    @Test func srtRefusesWhatItCannotTakeAndGStreamerPublishes() throws {
        let scratch = Self.scratch()
        defer { try? FileManager.default.removeItem(at: scratch) }
        // This node makes SRT publishers encrypt: every publish below gives the passphrase but one.
        let passphrase = "correct-horse-battery"
        let node = try ServeProcess(dataDirectory: scratch.appendingPathComponent("data"),
                                    arguments: ["--grace", "30", "--provision", fixture("provisions/sm2-3-level-360p.json")],
                                    environment: ["ABR_WORKER_SRT_PASSPHRASE": passphrase])
        defer { node.stop() }
        let srt = try #require(node.srtBase) + "?passphrase=\(passphrase)&pbkeylen=16"
        let withoutPassphrase = scratch.appendingPathComponent("plain.err")
        let plain = try Self.ffmpegSRT(try #require(node.srtBase), streamID: "publish:live/stream1_1:user:pass", seconds: 2, errors: withoutPassphrase)
        #expect(waitForExit(plain, timeout: 20) && plain.terminationStatus != 0, "an unencrypted publisher was taken: \(Self.text(withoutPassphrase))")
        for (streamID, why) in [("#!::r=live/stream1_1,m=publish,u=user,p=wrong", "needs the provision's credentials"),
                                ("#!::r=live/stream1_1,m=request", "play over RTSP or HLS"),
                                ("publish:live/nothing_1", "not provisioned")] {
            let errors = scratch.appendingPathComponent("refused.err")
            let refused = try Self.ffmpegSRT(srt, streamID: streamID, seconds: 2, errors: errors)
            #expect(waitForExit(refused, timeout: 20) && refused.terminationStatus != 0, "\(streamID) was taken: \(Self.text(errors))")
            #expect(node.waitFor(timeout: 5) { node.log.contains(why) }, "\(streamID): the log does not say why")
        }
        // Raw pictures instead of MPEG-TS: admitted by its credentials, then cut off by the demuxer.
        let garbageErrors = scratch.appendingPathComponent("garbage.err")
        let garbage = try Self.ffmpegSRT(srt, streamID: "publish:live/stream1_1:user:pass", seconds: 20, errors: garbageErrors,
                                         input: ["-re", "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25"], format: "rawvideo")
        defer { stopProcess(garbage, signal: SIGKILL) }
        #expect(node.waitFor(timeout: 10) { node.log.contains("not MPEG-TS the node can read") }, "\(node.log.suffix(1500))")
        // The node closed it: the sender fails, and the stream is free again at once.
        #expect(waitForExit(garbage, timeout: 15), "the garbage sender was not cut off")

        let gstreamerErrors = scratch.appendingPathComponent("gstreamer.err")
        let gstreamer = Process()
        gstreamer.executableURL = URL(fileURLWithPath: "/usr/bin/gst-launch-1.0")
        // As SRT senders are set up: 7 TS packets to a buffer (one SRT message each), parameter sets at every IDR.
        gstreamer.arguments = ["-q", "mpegtsmux", "name=mux", "alignment=7", "!", "srtsink", "uri=\(try #require(node.srtBase))", "streamid=#!::r=live/stream1_1,m=publish,u=user,p=pass",
                               "latency=120", "passphrase=\(passphrase)", "wait-for-connection=false",
                               "videotestsrc", "is-live=true", "num-buffers=360", "!", "video/x-raw,format=I420,width=640,height=360,framerate=30/1",
                               "!", "x264enc", "tune=zerolatency", "speed-preset=ultrafast", "key-int-max=60", "bitrate=600", "!", "h264parse",
                               "config-interval=-1", "!", "queue", "!", "mux.",
                               "audiotestsrc", "is-live=true", "num-buffers=564", "!", "audio/x-raw,rate=48000,channels=2", "!", "audioconvert", "!", "avenc_aac", "!", "aacparse",
                               "!", "queue", "!", "mux."]
        FileManager.default.createFile(atPath: gstreamerErrors.path, contents: nil)
        gstreamer.standardError = try FileHandle(forWritingTo: gstreamerErrors)
        gstreamer.standardOutput = FileHandle.nullDevice
        try gstreamer.runDeliveringSignals()
        defer { stopProcess(gstreamer, signal: SIGINT) }
        let running = node.waitFor(timeout: 20) {
            node.jobState("live/stream1") == "running" && Self.publisher(node)?["protocol"] as? String == "srt"
        }
        #expect(running, "GStreamer over SRT: \(Self.text(gstreamerErrors)) \(node.log.suffix(1500))")
        let played = try runProcess("ffmpeg", ["-hide_banner", "-loglevel", "error", "-rtsp_transport", "tcp", "-i", "\(node.rtspBase)/live/stream1_3",
                                               "-t", "2", "-c", "copy", "-y", scratch.appendingPathComponent("rung3.mp4").path], timeout: 30)
        #expect(played.status == 0, "\(played.stderr)")
    }
}

/// A TCP client that sends what it is given and notices when the other side closes.
final class RawConnection {
    let descriptor: Int32

    init(port: Int) throws {
        descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { throw POSIXError(.ECONNREFUSED) }
    }

    deinit { close(descriptor) }

    func send(_ bytes: [UInt8]) {
        _ = bytes.withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    /// True once a read returns end of file or an error (the peer closed) within `timeout` seconds.
    func waitUntilClosed(timeout: TimeInterval) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        var buffer = [UInt8](repeating: 0, count: 65536)
        while Date() < deadline {
            var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 200) > 0 else { continue }
            if recv(descriptor, &buffer, buffer.count, 0) <= 0 { return true }
        }
        return false
    }
}

#if canImport(Glibc)
import Glibc
#endif
