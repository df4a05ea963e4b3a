import Foundation
import TestSupport
import MediaCore
import Testing
import Transcoder

func temporaryDirectory(_ name: String) -> URL {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("abr-tests-\(name)-\(UUID().uuidString.prefix(8))")
    try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    return url
}

/// Makes a test source at `path` with ffmpeg from `arguments` (its inputs and encoding options).
func makeSource(_ path: String, _ arguments: [String]) throws {
    let made = try runProcess("ffmpeg", ["-hide_banner", "-loglevel", "error", "-y"] + arguments + [path])
    try #require(made.status == 0, "ffmpeg could not make the source: \(made.stderr)")
}

func ladder(_ provision: String) throws -> Ladder {
    try ProvisionParser.parse(Data(contentsOf: fixturesDirectory.appendingPathComponent("provisions/\(provision)")))
}

/// End-to-end runs of the engine on real clips. Serialized: each job already uses both cores.
@Suite(.serialized) struct LadderJobTests {
    @Test func threeLevelLadderPassesTheTopThroughAndAlignsEverything() throws {
        let output = temporaryDirectory("three")
        defer { try? FileManager.default.removeItem(at: output) }
        let ladder = try ladder("sm2-3-level.json")
        let source = fixture("720p30-h264-aac.mp4")
        let report = try LadderJob(ladder: ladder, input: source, outputDirectory: output).run()
        #expect(report.variants[0].passthrough)
        #expect(report.keyframeInterval == 2)
        try LadderVerifier(directory: output, ladder: ladder, source: source).verifyAll(passthroughTop: true)
    }

    @Test func everyEncodedVariantKeepsWithinTwentyPercentOfItsDeclaredBitRate() throws {
        let output = temporaryDirectory("encode")
        defer { try? FileManager.default.removeItem(at: output) }
        let ladder = try ladder("sm2-3-level.json")
        let source = fixture("720p30-h264-aac.mp4")
        let report = try LadderJob(ladder: ladder, input: source, outputDirectory: output,
                                   options: TranscodeOptions(topMode: .encode)).run()
        #expect(report.variants.allSatisfy { !$0.passthrough })
        let verifier = LadderVerifier(directory: output, ladder: ladder, source: source)
        try verifier.verifyAll(passthroughTop: false)
        try verifier.verifyBitRates()
    }

    @Test func resolutionChangeMidStreamKeepsProvisionedSizes() throws {
        let output = temporaryDirectory("resize")
        defer { try? FileManager.default.removeItem(at: output) }
        let ladder = try ladder("sm2-3-level.json")
        let source = fixture("resolution-change.ts")
        let report = try LadderJob(ladder: ladder, input: source, outputDirectory: output).run()
        #expect(report.variants.allSatisfy { !$0.passthrough }, "a 640x360 source cannot pass through as 1280x720")
        try LadderVerifier(directory: output, ladder: ladder, source: source).verifyAll(passthroughTop: false)
    }

    /// A source unlike the fixtures: 960x540 at 25 fps, 1 s GOPs with scene cuts and B-frames,
    /// mono 44.1 kHz AAC, in Matroska; a four-level ladder whose top it matches, so the top
    /// passes through and every other variant follows its keyframes.
    @Test func unseenSourceWithBFramesAndFourLevels() throws {
        let work = temporaryDirectory("unseen")
        defer { try? FileManager.default.removeItem(at: work) }
        let source = work.appendingPathComponent("source.mkv").path
        try makeSource(source, [
            "-f", "lavfi", "-i", "testsrc2=size=960x540:rate=25:duration=5,noise=alls=8:allf=t",
            "-f", "lavfi", "-i", "sine=frequency=300:sample_rate=44100:duration=5",
            "-c:v", "libx264", "-preset", "veryfast", "-g", "25", "-bf", "2", "-b:v", "1100k",
            "-c:a", "aac", "-ac", "1", "-b:a", "64k"])
        let provision = #"""
        [{"streamGuid": "live/unseen", "streams": [
          {"streamGuid": "live/unseen_1", "abrLevel": 1, "videoParams": {"videoBitRate": 1200000, "videoWidth": 960, "videoHeight": 540}},
          {"streamGuid": "live/unseen_2", "abrLevel": 2, "videoParams": {"videoBitRate": 800000, "videoWidth": 768, "videoHeight": 432}},
          {"streamGuid": "live/unseen_3", "abrLevel": 3, "videoParams": {"videoBitRate": 450000, "videoWidth": 512, "videoHeight": 288}},
          {"streamGuid": "live/unseen_4", "abrLevel": 4, "videoParams": {"videoBitRate": 200000, "videoWidth": 320, "videoHeight": 180}}]}]
        """#
        let ladder = try ProvisionParser.parse(Array(provision.utf8))
        let output = work.appendingPathComponent("out")
        let report = try LadderJob(ladder: ladder, input: source, outputDirectory: output).run()
        #expect(report.variants[0].passthrough)
        // x264 made the source with scene cuts, so its GOPs are irregular (about 1 s, some shorter):
        // every variant's IDRs must sit exactly on the source's keyframes.
        let sourceKeys = try MediaProbe.keyframeTimes(source)
        let shifted = sourceKeys.map { (($0 - sourceKeys[0]) * 1000).rounded() / 1000 }
        #expect(sourceKeys.count >= 5)
        #expect(try MediaProbe.keyframeTimes(output.appendingPathComponent("unseen_3.mp4").path) == shifted)
        let longestGOP = zip(shifted, shifted.dropFirst()).map { $1 - $0 }.max() ?? 0
        #expect(abs(report.keyframeInterval - longestGOP) < 0.002)
        #expect(report.variants.allSatisfy { $0.keyframes == sourceKeys.count })
        let verifier = LadderVerifier(directory: output, ladder: ladder, source: source)
        try verifier.verifyAll(passthroughTop: true)
        try verifier.verifyBitRates()
    }

    /// A source with one keyframe in 14 s, passed through: segments are cut at 3× the target
    /// duration anyway, and the playlist no longer claims independent segments.
    @Test func aLongGOPTopIsCutAtThreeTargetDurations() throws {
        let work = temporaryDirectory("longgop")
        defer { try? FileManager.default.removeItem(at: work) }
        let source = work.appendingPathComponent("source.mp4").path
        try makeSource(source, [
            "-f", "lavfi", "-i", "testsrc2=size=640x360:rate=30:duration=14",
            "-c:v", "libx264", "-preset", "ultrafast", "-g", "1000", "-keyint_min", "1000", "-sc_threshold", "0", "-bf", "0", "-b:v", "600k"])
        let provision = #"""
        [{"streamGuid": "live/longgop", "streams": [
          {"streamGuid": "live/longgop_1", "abrLevel": 1, "videoParams": {"videoBitRate": 700000, "videoWidth": 640, "videoHeight": 360}},
          {"streamGuid": "live/longgop_2", "abrLevel": 2, "videoParams": {"videoBitRate": 300000, "videoWidth": 320, "videoHeight": 180}}]}]
        """#
        let ladder = try ProvisionParser.parse(Array(provision.utf8))
        let output = work.appendingPathComponent("out")
        let report = try LadderJob(ladder: ladder, input: source, outputDirectory: output).run()
        #expect(report.variants[0].passthrough)
        for level in 1...2 {
            let text = try String(contentsOf: output.appendingPathComponent("hls/longgop_\(level)/index.m3u8"), encoding: .utf8)
            let durations = text.split(separator: "\n").filter { $0.hasPrefix("#EXTINF:") }
                .compactMap { Double($0.dropFirst("#EXTINF:".count).prefix { $0 != "," }) }
            #expect(durations.count >= 3, "level \(level): \(durations)")
            #expect(durations.allSatisfy { $0 <= 3 * 2 + 0.05 }, "level \(level): \(durations)")
            #expect(abs(durations.reduce(0, +) - 14) < 0.2)
            #expect(!text.contains("#EXT-X-INDEPENDENT-SEGMENTS"), "level \(level) has segments that start between keyframes")
        }
    }

    @Test func intervalGridOverridesSourceGOPWhenEncodingEverything() throws {
        let output = temporaryDirectory("grid")
        defer { try? FileManager.default.removeItem(at: output) }
        let ladder = try ladder("sm2-4-level.json")
        let source = fixture("720p30-h264-aac.mp4")
        let report = try LadderJob(ladder: ladder, input: source, outputDirectory: output,
                                   options: TranscodeOptions(topMode: .encode, keyframeInterval: 1)).run()
        #expect(report.keyframeInterval == 1)
        #expect(report.variants.allSatisfy { $0.keyframes == 4 && $0.segments == 4 })
        try LadderVerifier(directory: output, ladder: ladder, source: source).verifyAll(passthroughTop: false)
    }

    @Test(arguments: ["truncated.mp4", "not-media.mp4", "no-such-file.mp4"])
    func unreadableInputFailsAsBadInputAndLeavesNothing(_ name: String) throws {
        let output = temporaryDirectory("bad")
        defer { try? FileManager.default.removeItem(at: output) }
        let job = LadderJob(ladder: try ladder("sm2-3-level.json"), input: fixture(name), outputDirectory: output)
        let error = try #require(throws: TranscodeError.self) { try job.run() }
        guard case let .badInput(message) = error else {
            Issue.record("expected bad input, got \(error)")
            return
        }
        #expect(message.contains(name))
        #expect(try FileManager.default.contentsOfDirectory(atPath: output.path).isEmpty)
    }

    @Test func threadPlanFillsTheMachineByPixelShare() {
        let ladder = try! ladder("sm2-3-level.json")
        let two = ThreadPlan.make(cores: 2, encoded: ladder.variants, override: nil)
        #expect(two.decoderThreads == 2)
        #expect(two.encoderThreads == [1: 1, 2: 1, 3: 1])
        let sixteen = ThreadPlan.make(cores: 16, encoded: ladder.variants, override: nil)
        #expect(sixteen.encoderThreads[1]! > sixteen.encoderThreads[2]!)
        #expect(sixteen.encoderThreads[2]! > sixteen.encoderThreads[3]!)
        let single = ThreadPlan.make(cores: 2, encoded: [ladder.variants[1]], override: nil)
        #expect(single.encoderThreads == [2: 2])
        #expect(ThreadPlan.make(cores: 8, encoded: ladder.variants, override: 3).encoderThreads.values.allSatisfy { $0 == 3 })
    }
}
