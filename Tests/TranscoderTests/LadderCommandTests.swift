import Foundation
import LadderQuality
import MediaCore
import TestSupport
import Testing
import Transcoder

/// `abr-worker ladder` end to end on a small clip it has not seen: real encodes, real measurements,
/// files an operator can post and open.
@Suite(.serialized) struct LadderCommandTests {
    /// Ladders are named by the short side, and the source's own size is always tried: a portrait
    /// phone video gets 360x640 and 288x512, not 202x360; a 4:3 source is tried at its own 320x240.
    /// Rungs have square pixels, so an anamorphic source's sizes take the shape it is shown in.
    @Test func defaultSizesFollowTheShortSideAndKeepTheSourcesOwnSize() throws {
        let work = temporaryDirectory("ladder-sizes")
        defer { try? FileManager.default.removeItem(at: work) }
        func sizes(_ width: Int, _ height: Int, pixelShape: String = "1") throws -> [String] {
            let source = work.appendingPathComponent("\(width)x\(height)-\(pixelShape.replacingOccurrences(of: "/", with: "_")).mp4").path
            try makeSource(source, ["-f", "lavfi", "-i", "testsrc2=size=\(width)x\(height):rate=25:duration=1,setsar=\(pixelShape)",
                                    "-c:v", "libx264", "-preset", "ultrafast"])
            let explorer = LadderExplorer(input: source, options: .init(windows: 1, windowSeconds: 0.5))
            try explorer.loadWindows()
            return explorer.defaultSizes().map { "\($0.width)x\($0.height)" }
        }
        #expect(try sizes(360, 640) == ["360x640", "288x512", "234x416", "180x320", "144x256"])
        #expect(try sizes(320, 240) == ["320x240", "312x234", "240x180", "192x144"])
        #expect(try sizes(640, 360) == ["640x360", "512x288", "416x234", "320x180", "256x144"])
        // Smaller than any usual size: the source's own is still there to encode.
        #expect(try sizes(128, 96) == ["128x96"])
        // 384x216 stored with 4:3 pixels is a 512x216 picture: its own size is 512x216, and its
        // 180-line rung 426x180 (384x216's shape would show everyone a squeezed picture).
        #expect(try sizes(384, 216, pixelShape: "4/3") == ["512x216", "426x180", "342x144"])
        // Tall pixels: 480x360 with 3:4 pixels is shown 360x360.
        #expect(try sizes(480, 360, pixelShape: "3/4") == ["360x360", "288x288", "234x234", "180x180", "144x144"])
    }

    @Test func ladderWritesAStudyAProvisionAndAPageFromRealEncodes() throws {
        let work = temporaryDirectory("ladder")
        defer { try? FileManager.default.removeItem(at: work) }
        let source = work.appendingPathComponent("source.mp4").path
        try makeSource(source, [
            "-f", "lavfi", "-i", "testsrc2=size=384x216:rate=25:duration=4,noise=alls=6:allf=t",
            "-c:v", "libx264", "-preset", "ultrafast", "-qp", "10"])
        let provision = work.appendingPathComponent("provision.json")
        try Data(#"""
        [{"streamGuid": "live/title", "streams": [
          {"streamGuid": "live/title_1", "abrLevel": 1, "videoParams": {"videoBitRate": 500000, "videoWidth": 384, "videoHeight": 216}},
          {"streamGuid": "live/title_2", "abrLevel": 2, "videoParams": {"videoBitRate": 250000, "videoWidth": 256, "videoHeight": 144}},
          {"streamGuid": "live/title_3", "abrLevel": 3, "videoParams": {"videoBitRate": 120000, "videoWidth": 160, "videoHeight": 90}}]}]
        """#.utf8).write(to: provision)
        let output = work.appendingPathComponent("study")
        let result = try runProcess(workerExecutable, [
            "ladder", "--input", source, "--provision", provision.path, "--output", output.path,
            "--heights", "216,144,90", "--rates-per-size", "3", "--windows", "2", "--window-seconds", "1", "--quality-every", "2",
            "--metric", "ssim-db"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("BD-rate, suggested against provisioned"))

        let study = try JSONDecoder().decode(LadderStudy.self, from: Data(contentsOf: output.appendingPathComponent("ladder.json")))
        #expect(study.windows == 2 && abs(study.windowSeconds - 2) < 0.1)
        #expect(study.sourceWidth == 384 && study.sourceHeight == 216)
        // The hull and the suggestion follow the chosen metric; every figure is still kept.
        #expect(study.metric == "SSIM (dB)")
        #expect((study.grid + study.provisioned + study.suggested).allSatisfy { $0.quality == $0.ssimDecibels && $0.psnrY > 15 })
        #expect(Set(study.grid.map(\.height)) == [216, 144, 90])
        #expect(study.provisioned.map(\.size) == ["384x216", "256x144", "160x90"])
        #expect(study.suggested.count == 3)
        #expect(!study.hull.isEmpty && study.hull.allSatisfy { study.grid.contains($0) })
        // Real measurements: within a size, more bits buy more quality, and every encode lands
        // near the rate it was asked for.
        for (size, curve) in Dictionary(grouping: study.grid, by: \.size) {
            let sorted = curve.sorted { $0.targetBitRate < $1.targetBitRate }
            #expect(sorted.last!.quality > sorted.first!.quality, "\(size): \(sorted.map(\.quality))")
            #expect(curve.allSatisfy { $0.psnrY > 15 && $0.psnrY < 99 && $0.ssimAll > 0.3 && $0.ssimAll < 1 })
        }
        #expect((study.grid + study.suggested).allSatisfy { abs(Double($0.bitRate) / Double($0.targetBitRate) - 1) < 0.5 },
                "\((study.grid + study.suggested).map { ($0.targetBitRate, $0.bitRate) })")
        #expect(study.bdRate?.metric != nil, "the two ladders share a quality range")

        let suggested = try ProvisionParser.parse(Data(contentsOf: output.appendingPathComponent("provision.json")))
        #expect(suggested.streamGuid == "live/title")
        #expect(suggested.variants.count == 3)
        #expect(suggested.variants.map(\.bitRate) == suggested.variants.map(\.bitRate).sorted(by: >))
        #expect(suggested.top.bitRate == 500_000 && suggested.variants.last?.bitRate == 120_000)

        let page = try String(contentsOf: output.appendingPathComponent("report.html"), encoding: .utf8)
        #expect(page.contains("<svg ") && page.contains("Ladder study") && !page.contains("<script"))
    }

    @Test func ladderRefusesWhatItCannotStudy() throws {
        let output = temporaryDirectory("ladder-bad")
        defer { try? FileManager.default.removeItem(at: output) }
        let notMedia = try runProcess(workerExecutable, ["ladder", "--input", fixture("not-media.mp4"), "--output", output.path, "--quiet"])
        #expect(notMedia.status == 3)
        #expect(notMedia.stderr.contains("cannot open input") && notMedia.stderr.contains("not-media.mp4"), "\(notMedia.stderr)")
        let range = try runProcess(workerExecutable, ["ladder", "--input", fixture("720p30-h264-aac.mp4"), "--output", output.path,
                                                      "--min-bitrate", "900000", "--max-bitrate", "600000"])
        #expect(range.status == 2)
        #expect(range.stderr.contains("--min-bitrate (900000) must be below --max-bitrate (600000)"), "\(range.stderr)")
        let heights = try runProcess(workerExecutable, ["ladder", "--input", fixture("720p30-h264-aac.mp4"), "--output", output.path,
                                                        "--heights", "720,abc"])
        #expect(heights.status == 2 && heights.stderr.contains("--heights"))
        let metric = try runProcess(workerExecutable, ["ladder", "--input", fixture("720p30-h264-aac.mp4"), "--output", output.path,
                                                       "--metric", "vmaf"])
        #expect(metric.status == 2 && metric.stderr.contains("--metric must be one of psnr-y, psnr-yuv, ssim-db (got vmaf)"), "\(metric.stderr)")
    }
}
