import Foundation
import TestSupport
import MediaCore
import Testing
import Transcoder

/// Starts GStreamer's RTSP server (Tests/Peers/gst-rtsp-server.py) on a free loopback port.
final class GStreamerRTSPServer {
    let process = Process()
    let port: Int

    init(lifetime: Int = 60) throws {
        let script = fixturesDirectory.deletingLastPathComponent().appendingPathComponent("Tests/Peers/gst-rtsp-server.py")
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = [script.path, "--lifetime", String(lifetime)]
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        try process.runDeliveringSignals()
        // The first line is the bound port; EOF (an empty read) means the server could not start.
        var line = Data()
        while !line.contains(UInt8(ascii: "\n")) {
            let chunk = out.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            line.append(chunk)
        }
        guard let port = Int(String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)) else {
            stopProcess(process)
            throw CocoaError(.fileReadUnknown, userInfo: [NSLocalizedDescriptionKey: "gst-rtsp-server did not start"])
        }
        self.port = port
    }

    deinit {
        stopProcess(process)
    }
}

@Suite(.serialized) struct RTSPPullTests {
    /// Pulls a live stream from a third-party RTSP server (multi-slice H.264 + AAC over TCP),
    /// stops it as Ctrl-C would, and gets a finished, aligned ladder.
    @Test func pullsALiveStreamFromGStreamerAndFinishesItsOutputsOnStop() throws {
        let server = try GStreamerRTSPServer()
        let output = temporaryDirectory("rtsp-pull")
        defer { try? FileManager.default.removeItem(at: output) }
        let ladder = try ladder("sm2-3-level.json")
        let job = LadderJob(ladder: ladder, input: "rtsp://127.0.0.1:\(server.port)/live/stream1_1", outputDirectory: output)
        #expect(job.isLiveInput)
        nonisolated(unsafe) let stoppable = job
        DispatchQueue.global().asyncAfter(deadline: .now() + 7) { stoppable.stop() }
        let report = try job.run()

        #expect(report.variants[0].passthrough, "an H.264 720p source of unknown rate matches the top")
        #expect(report.sourceFrames >= 90, "only \(report.sourceFrames) frames in 7 s of a 30 fps stream")
        var keyframeTimes: [[Double]] = []
        for variant in ladder.variants {
            let mp4 = output.appendingPathComponent("stream1_\(variant.level).mp4").path
            let stream = try MediaProbe.videoStream(mp4)
            #expect(stream.width == variant.width && stream.height == variant.height)
            // Slices arrive as separate packets; each picture must still be one sample.
            let decoded = try MediaProbe.decodedFrameCount(mp4)
            #expect(decoded == report.sourceFrames, "level \(variant.level): \(decoded) frames decode of \(report.sourceFrames); report: \(report.variants.map(\.frames))")
            #expect(try MediaProbe.hasAudio(mp4))
            keyframeTimes.append(try MediaProbe.keyframeTimes(mp4))
        }
        #expect(Set(keyframeTimes).count == 1, "IDR times differ: \(keyframeTimes)")
        #expect(keyframeTimes[0].starts(with: [0, 2]))
        let master = try PlaylistChecker.master(String(contentsOf: output.appendingPathComponent("hls/master.m3u8"), encoding: .utf8))
        #expect(master.count == 3)
    }

    @Test func aServerThatIsNotThereIsBadInput() throws {
        let output = temporaryDirectory("rtsp-none")
        defer { try? FileManager.default.removeItem(at: output) }
        // Port 9 (discard) on loopback: nothing listens there in a test sandbox.
        let job = LadderJob(ladder: try ladder("sm2-3-level.json"), input: "rtsp://127.0.0.1:9/live/stream1_1", outputDirectory: output)
        let error = try #require(throws: TranscodeError.self) { try job.run() }
        guard case let .badInput(message) = error else {
            Issue.record("expected bad input, got \(error)")
            return
        }
        #expect(message.contains("rtsp://127.0.0.1:9/live/stream1_1"))
    }
}
