import Foundation
import TestSupport
import MediaCore
import Testing
import Transcoder

/// Checks a finished job's output directory against the ladder, judging media with ffprobe.
struct LadderVerifier {
    let directory: URL
    let ladder: Ladder
    let source: String

    func path(_ relative: String) -> String { directory.appendingPathComponent(relative).path }

    func report() throws -> TranscodeReport {
        try JSONDecoder().decode(TranscodeReport.self, from: Data(contentsOf: directory.appendingPathComponent("report.json")))
    }

    func hints() throws -> BandwidthHints {
        try JSONDecoder().decode(BandwidthHints.self, from: Data(contentsOf: directory.appendingPathComponent("abr.json")))
    }

    /// Everything the ladder issue promises of every output; returns the report for further checks.
    @discardableResult
    func verifyAll(passthroughTop: Bool, sourceHasAudio: Bool = true) throws -> TranscodeReport {
        let sourceFrames = try MediaProbe.decodedFrameCount(source)
        let report = try report()
        #expect(report.sourceFrames == sourceFrames)
        #expect(report.variants.map(\.abrLevel) == ladder.variants.map(\.level))

        // MP4 per variant: provisioned size, every source frame, the same IDR times.
        var keyframeTimes: [[Double]] = []
        for variant in ladder.variants {
            let mp4 = path("\(ladder.name)_\(variant.level).mp4")
            let stream = try MediaProbe.videoStream(mp4)
            #expect(stream.width == variant.width && stream.height == variant.height, "\(mp4): \(stream.width)x\(stream.height)")
            #expect(stream.frames == sourceFrames, "\(mp4): \(stream.frames) frames, source has \(sourceFrames)")
            // Every sample must also be presented: an edit list may not cut the last one off.
            #expect(try MediaProbe.decodedFrameCount(mp4) == sourceFrames, "\(mp4) does not present every frame")
            #expect(try MediaProbe.hasAudio(mp4) == sourceHasAudio)
            keyframeTimes.append(try MediaProbe.keyframeTimes(mp4))
            let entry = try #require(report.variants.first { $0.abrLevel == variant.level })
            #expect(entry.frames == sourceFrames)
            #expect(entry.passthrough == (passthroughTop && variant.level == 1))
            #expect(entry.keyframes == keyframeTimes.last?.count)
        }
        #expect(Set(keyframeTimes.map { $0 }).count == 1, "IDR times differ across variants: \(keyframeTimes)")
        #expect(keyframeTimes.first?.first == 0)

        // HLS: strict master, identical segment boundaries, each segment starting on an IDR.
        let hints = try hints()
        let master = try PlaylistChecker.master(String(contentsOfFile: path("hls/master.m3u8"), encoding: .utf8))
        #expect(master.map(\.uri) == ladder.variants.map { "\(ladder.name)_\($0.level)/index.m3u8" })
        var boundaries: [[Double]] = []
        for (variant, stream) in zip(ladder.variants, master) {
            let hint = try #require(hints.variants.first { $0.abrLevel == variant.level })
            #expect(stream.attributes["RESOLUTION"] == "\(variant.width)x\(variant.height)")
            #expect(stream.attributes["BANDWIDTH"] == String(hint.peakBitRate))
            #expect(stream.attributes["AVERAGE-BANDWIDTH"] == String(hint.averageBitRate))
            #expect(stream.attributes["CODECS"] == "\"\(hint.codecs)\"")
            #expect(hint.codecs.hasPrefix("avc1.") && hint.codecs.count >= 11)
            #expect(hint.codecs.hasSuffix(",mp4a.40.2") == sourceHasAudio)
            #expect(Double(stream.attributes["FRAME-RATE"] ?? "") != nil)

            let playlistPath = path("hls/\(ladder.name)_\(variant.level)/index.m3u8")
            let media = try PlaylistChecker.media(String(contentsOfFile: playlistPath, encoding: .utf8))
            #expect(media.ended)
            #expect(media.map == "init.mp4")
            let starts = try segmentStartTimes(level: variant.level, segments: media.segments.map(\.uri))
            boundaries.append(starts)
            let total = media.segments.reduce(0) { $0 + $1.duration }
            #expect(abs(total - report.duration) < 0.1, "segments cover \(total) s of \(report.duration) s")
        }
        #expect(Set(boundaries).count == 1, "segment boundaries differ across variants: \(boundaries)")

        // Hints: ordered, hysteresis, thresholds falling with the level number, matching the report.
        #expect(hints.streamGuid == ladder.streamGuid)
        #expect(hints.variants.map(\.abrLevel) == ladder.variants.map(\.level))
        for hint in hints.variants { #expect(hint.downswitchBelowBitRate < hint.upswitchAboveBitRate) }
        for (higher, lower) in zip(hints.variants, hints.variants.dropFirst()) {
            #expect(higher.upswitchAboveBitRate > lower.upswitchAboveBitRate)
            #expect(higher.downswitchBelowBitRate > lower.downswitchBelowBitRate)
        }
        for (hint, entry) in zip(hints.variants, report.variants) {
            #expect(hint.averageBitRate == entry.averageBitRate && hint.peakBitRate == entry.peakBitRate)
            #expect(hint.peakBitRate >= hint.averageBitRate)
        }
        #expect(!FileManager.default.fileExists(atPath: path(".abr-worker-partial-\(ProcessInfo.processInfo.processIdentifier)")))
        return report
    }

    /// The first video timestamp of each segment, read by ffprobe from init + segment, and a check
    /// that each segment opens with an IDR (so a player can switch to it).
    func segmentStartTimes(level: Int, segments: [String]) throws -> [Double] {
        let folder = directory.appendingPathComponent("hls/\(ladder.name)_\(level)")
        let initSegment = try Data(contentsOf: folder.appendingPathComponent("init.mp4"))
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("segment-\(UUID().uuidString).mp4")
        defer { try? FileManager.default.removeItem(at: scratch) }
        var starts: [Double] = []
        for segment in segments {
            try (initSegment + Data(contentsOf: folder.appendingPathComponent(segment))).write(to: scratch)
            let first = try #require(try MediaProbe.videoPackets(scratch.path).first, "no video in \(segment)")
            #expect(first.isKeyframe, "\(folder.lastPathComponent)/\(segment) does not start with an IDR")
            starts.append((first.pts * 1000).rounded() / 1000)
        }
        return starts
    }

    /// Video-only bit rate of each encoded variant within ±tolerance of its declared rate.
    func verifyBitRates(tolerance: Double = 0.2) throws {
        let report = try report()
        for variant in ladder.variants where report.variants.first(where: { $0.abrLevel == variant.level })?.passthrough == false {
            let stream = try MediaProbe.videoStream(path("\(ladder.name)_\(variant.level).mp4"))
            let ratio = Double(stream.bitRate) / Double(variant.bitRate)
            #expect(abs(ratio - 1) <= tolerance, "level \(variant.level): \(stream.bitRate) bit/s for \(variant.bitRate) declared")
            // Our own figure agrees with ffprobe's within a few percent.
            let reported = try #require(report.variants.first { $0.abrLevel == variant.level }).videoBitRate
            #expect(abs(Double(reported) / Double(stream.bitRate) - 1) < 0.05, "report says \(reported), ffprobe \(stream.bitRate)")
        }
    }
}
