import Foundation
import MediaCore
import TestSupport
import Testing
import Transcoder

/// `--quality` against FFmpeg's own `psnr` and `ssim` filters, on the same encoded rungs and the
/// same Lanczos reference: the figures an engineer would get from the ffmpeg command line.
@Suite(.serialized) struct RungQualityTests {
    static let provision = #"""
    [{"streamGuid": "live/quality", "streams": [
      {"streamGuid": "live/quality_1", "abrLevel": 1, "videoParams": {"videoBitRate": 600000, "videoWidth": 480, "videoHeight": 272}},
      {"streamGuid": "live/quality_2", "abrLevel": 2, "videoParams": {"videoBitRate": 250000, "videoWidth": 320, "videoHeight": 180}},
      {"streamGuid": "live/quality_3", "abrLevel": 3, "videoParams": {"videoBitRate": 90000, "videoWidth": 208, "videoHeight": 118}}]}]
    """#

    struct FFmpegFigures {
        var psnrY = 0.0, psnrAverage = 0.0, psnrMin = 0.0, ssimAll = 0.0
        /// `psnr_y` of every picture, in order (the filter's stats file).
        var psnrYPerPicture: [Double] = []
    }

    /// Runs FFmpeg's filters on `rung` against `source` scaled to the rung's size with Lanczos.
    static func ffmpegFigures(rung: String, source: String, width: Int, height: Int) throws -> FFmpegFigures {
        var figures = FFmpegFigures()
        let statsFile = rung + ".psnr.log"
        for filter in ["psnr", "ssim"] {
            let options = filter == "psnr" ? "=stats_file=\(statsFile)" : ""
            let graph = "[0:v]setpts=PTS-STARTPTS[d];[1:v]scale=\(width):\(height):flags=lanczos,setpts=PTS-STARTPTS[r];[d][r]\(filter)\(options)"
            let run = try runProcess("ffmpeg", ["-hide_banner", "-nostdin", "-i", rung, "-i", source, "-lavfi", graph, "-f", "null", "-"])
            try #require(run.status == 0, "ffmpeg \(filter): \(run.stderr)")
            // The summary is the filter's last line (it may warn about time bases first).
            let line = String(try #require(run.stderr.split(separator: "\n").last { $0.contains("Parsed_\(filter)") }, "no \(filter) summary"))
            // "PSNR y:42.74 u:39.39 v:39.07 average:41.23 min:38.99 max:43.31", "SSIM Y:0.98 (18.5) ... All:0.98 (17.6)"
            let fields = line.split(separator: " ").map(String.init)
            func value(_ key: String) -> Double {
                guard let field = fields.first(where: { $0.hasPrefix(key) }) else { return .nan }
                return Double(field.dropFirst(key.count)) ?? .nan
            }
            if filter == "psnr" {
                figures.psnrY = value("y:")
                figures.psnrAverage = value("average:")
                figures.psnrMin = value("min:")
                // "n:1 mse_avg:3.79 mse_y:3.92 mse_u:3.60 mse_v:3.45 psnr_avg:42.34 psnr_y:42.20 ..."
                figures.psnrYPerPicture = try String(contentsOfFile: statsFile, encoding: .utf8).split(separator: "\n").map { line in
                    let field = line.split(separator: " ").first { $0.hasPrefix("psnr_y:") } ?? "psnr_y:nan"
                    return Double(field.dropFirst("psnr_y:".count)) ?? .nan
                }
            } else {
                figures.ssimAll = value("All:")
            }
        }
        return figures
    }

    @Test func everyEncodedRungMatchesFFmpegsPSNRAndSSIM() throws {
        let work = temporaryDirectory("quality")
        defer { try? FileManager.default.removeItem(at: work) }
        // Moving, textured content with grain at a size the encoder must work for; an odd-sized
        // lowest rung (208x118) checks the chroma planes' rounding.
        let source = work.appendingPathComponent("source.mkv").path
        try makeSource(source, [
            "-f", "lavfi", "-i", "testsrc2=size=480x272:rate=25:duration=2,noise=alls=4:allf=t",
            "-c:v", "libx264", "-preset", "ultrafast", "-qp", "8"])
        let ladder = try ProvisionParser.parse(Array(Self.provision.utf8))
        let output = work.appendingPathComponent("out")
        let report = try LadderJob(ladder: ladder, input: source, outputDirectory: output,
                                   options: TranscodeOptions(topMode: .encode, qualitySampleInterval: 1)).run()
        #expect(report.quality?.sampleInterval == 1)
        #expect(report.cpuSeconds > 0)
        var ffmpegByLevel: [Int: FFmpegFigures] = [:]
        for variant in report.variants {
            let quality = try #require(variant.quality, "level \(variant.abrLevel) was not measured")
            #expect(quality.pictures == variant.frames)
            #expect(variant.cpuSeconds > 0 && (variant.qualityCPUSeconds ?? 0) > 0)
            #expect(variant.cpuSeconds > variant.qualityCPUSeconds ?? 0)
            let expectedDeviation = Double(variant.videoBitRate - variant.declaredBitRate) / Double(variant.declaredBitRate)
            #expect(abs(variant.bitRateDeviation - expectedDeviation) < 0.001)
            let rung = output.appendingPathComponent("quality_\(variant.abrLevel).mp4").path
            let ffmpeg = try Self.ffmpegFigures(rung: rung, source: source, width: variant.width, height: variant.height)
            ffmpegByLevel[variant.abrLevel] = ffmpeg
            #expect(abs(quality.psnrY - ffmpeg.psnrY) < 0.01, "level \(variant.abrLevel): PSNR Y \(quality.psnrY), ffmpeg \(ffmpeg.psnrY)")
            #expect(abs(quality.psnrYUV - ffmpeg.psnrAverage) < 0.01, "level \(variant.abrLevel): PSNR YUV \(quality.psnrYUV), ffmpeg \(ffmpeg.psnrAverage)")
            #expect(abs(quality.psnrWorst - ffmpeg.psnrMin) < 0.01, "level \(variant.abrLevel): worst \(quality.psnrWorst), ffmpeg \(ffmpeg.psnrMin)")
            #expect(abs(quality.ssimAll - ffmpeg.ssimAll) < 0.0002, "level \(variant.abrLevel): SSIM \(quality.ssimAll), ffmpeg \(ffmpeg.ssimAll)")
        }
        let written = try JSONDecoder().decode(TranscodeReport.self, from: Data(contentsOf: output.appendingPathComponent("report.json")))
        #expect(written.variants.map(\.quality) == report.variants.map(\.quality))

        // quality.csv: every measured picture, and each picture's PSNR Y is FFmpeg's for that picture.
        let rows = try String(contentsOf: output.appendingPathComponent("quality.csv"), encoding: .utf8).split(separator: "\n")
        #expect(rows.first == "level,width,height,seconds,psnr_y,psnr_yuv,ssim_y,ssim_all")
        let fields = rows.dropFirst().map { $0.split(separator: ",").map(String.init) }
        for variant in report.variants {
            let pictures = fields.filter { $0[0] == "\(variant.abrLevel)" }
            #expect(pictures.count == variant.quality?.pictures)
            let seconds = pictures.compactMap { Double($0[3]) }
            #expect(zip(seconds, seconds.dropFirst()).allSatisfy { $0 < $1 }, "level \(variant.abrLevel): pictures in time order")
            let meanSSIM = pictures.compactMap { Double($0[7]) }.reduce(0, +) / Double(max(1, pictures.count))
            #expect(abs(meanSSIM - (variant.quality?.ssimAll ?? 0)) < 0.00001, "level \(variant.abrLevel): mean of the pictures' SSIM")
            let ffmpeg = try #require(ffmpegByLevel[variant.abrLevel])
            #expect(ffmpeg.psnrYPerPicture.count == pictures.count)
            let differences = zip(pictures.compactMap { Double($0[4]) }, ffmpeg.psnrYPerPicture).map { abs($0 - $1) }
            #expect((differences.max() ?? 1) < 0.01, "level \(variant.abrLevel): largest per-picture PSNR Y difference \(differences.max() ?? -1)")
        }
        let page = try String(contentsOf: output.appendingPathComponent("quality.html"), encoding: .utf8)
        #expect(page.contains("<svg") && !page.contains("<script"))
        #expect(page.components(separatedBy: "<path d=").count - 1 == 2 * 2 * report.variants.count, "two charts, two lines per rung")
    }

    @Test func samplingMeasuresOnePictureInNAndAPassedThroughTopIsNotMeasured() throws {
        let output = temporaryDirectory("quality-sampled")
        defer { try? FileManager.default.removeItem(at: output) }
        let ladder = try ladder("sm2-3-level.json")
        let report = try LadderJob(ladder: ladder, input: fixture("720p30-h264-aac.mp4"), outputDirectory: output,
                                   options: TranscodeOptions(qualitySampleInterval: 4)).run()
        #expect(report.variants[0].passthrough)
        #expect(report.variants[0].quality == nil && report.variants[0].qualityCPUSeconds == nil)
        for variant in report.variants.dropFirst() {
            let quality = try #require(variant.quality)
            // Two 2 s GOPs of 60 pictures: every other GOP is decoded, one picture in two of it
            // measured, so 30 of 120, one in four.
            #expect(quality.pictures == 30)
            #expect(quality.psnrY > 30 && quality.ssimAll > 0.9, "level \(variant.abrLevel): \(quality)")
        }
    }

    @Test func aRungsPresetAndProfileFromTheProvisionReachItsEncoder() throws {
        let work = temporaryDirectory("rung-settings")
        defer { try? FileManager.default.removeItem(at: work) }
        let source = work.appendingPathComponent("source.mkv").path
        try makeSource(source, [
            "-f", "lavfi", "-i", "testsrc2=size=480x272:rate=25:duration=1", "-c:v", "libx264", "-preset", "ultrafast"])
        let ladder = try ProvisionParser.parse(Array(#"""
        [{"streamGuid": "live/settings", "streams": [
          {"streamGuid": "live/settings_1", "abrLevel": 1, "videoParams": {"videoBitRate": 600000, "videoWidth": 480, "videoHeight": 272, "profile": "main"}},
          {"streamGuid": "live/settings_2", "abrLevel": 2, "videoParams": {"videoBitRate": 250000, "videoWidth": 320, "videoHeight": 180, "preset": "faster", "profile": "baseline"}},
          {"streamGuid": "live/settings_3", "abrLevel": 3, "videoParams": {"videoBitRate": 90000, "videoWidth": 208, "videoHeight": 118}}]}]
        """#.utf8))
        let output = work.appendingPathComponent("out")
        let report = try LadderJob(ladder: ladder, input: source, outputDirectory: output,
                                   options: TranscodeOptions(topMode: .encode)).run()
        // RFC 6381: profile_idc 0x4d main, 0x42 baseline, 0x64 high (the node's default).
        #expect(report.variants.map { String($0.codecs.prefix(7)) } == ["avc1.4d", "avc1.42", "avc1.64"])
        let hints = try String(contentsOf: output.appendingPathComponent("abr.json"), encoding: .utf8)
        #expect(hints.contains(report.variants[1].codecs))
    }
}
