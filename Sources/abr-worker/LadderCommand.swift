import ArgumentParser
import FFmpegBridge
import Foundation
import LadderQuality
import MediaCore
import NodeApp
import Transcoder

/// `abr-worker ladder`: a per-title ladder for one source, from its rate–quality convex hull.
struct LadderCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ladder",
        abstract: "Find a per-title ladder for a source: encode windows of it at a grid of sizes and rates, draw the rate-quality convex hull, suggest a ladder, and compare it with a provisioned one (BD-rate).",
        discussion: "Writes ladder.json, provision.json (the suggested ladder, ready to post) and report.html (self-contained, with plots) to --output.")

    @Option(help: "Source: a media file.")
    var input: String

    @Option(help: "Output directory.")
    var output: String

    @Option(help: "A provisioned ladder to compare with: its rung count and bit-rate range are the defaults.")
    var provision: String?

    @Option(help: "Stream guid of the suggested provision (default: the provision's, else live/<input name>).")
    var streamGuid: String?

    @Option(help: "Rungs in the suggested ladder (default: the provision's count, else 4).")
    var rungs: Int?

    @Option(help: "Lowest rung's bit rate, bit/s (default: the provision's lowest, else 300000).")
    var minBitrate: Int?

    @Option(help: "Top rung's bit rate, bit/s (default: the provision's top, else 3000000).")
    var maxBitrate: Int?

    @Option(help: "Picture heights to try, comma-separated (default: the usual ladder sizes up to the source's, by the short side, and the source's own size).")
    var heights: String?

    @Option(help: "Rates tried per size, spaced evenly in log rate over the range (widened by a third each way).")
    var ratesPerSize: Int = 7

    @Option(help: "Windows of the source to encode, spread evenly over it.")
    var windows: Int = 3

    @Option(help: "Seconds per window.")
    var windowSeconds: Double = 2

    @Option(help: "x264 preset.")
    var preset: String = "veryfast"

    @Option(help: "Measure every Nth picture of each encode.")
    var qualityEvery: Int = 2

    @Option(help: "The figure the hull and the suggestion follow: psnr-y, psnr-yuv or ssim-db.")
    var metric: String = "psnr-y"

    /// The figures `--metric` may name, with how the report labels them.
    static let metrics: [String: (label: String, figure: @Sendable (RateQualityPoint) -> Double)] = [
        "psnr-y": ("PSNR Y (dB)", { $0.psnrY }),
        "psnr-yuv": ("PSNR YUV (dB)", { $0.psnrYUV }),
        "ssim-db": ("SSIM (dB)", { $0.ssimDecibels }),
    ]

    @Flag(help: "No progress line and no summary.")
    var quiet = false

    func validate() throws {
        guard TranscodeOptions.presets.contains(preset) else {
            throw ValidationError("--preset must be an x264 preset: \(TranscodeOptions.presets.joined(separator: ", ")) (got \(preset))")
        }
        if let rungs, !(2...12).contains(rungs) { throw ValidationError("--rungs must be 2 to 12 (got \(rungs))") }
        for (name, rate) in [("--min-bitrate", minBitrate), ("--max-bitrate", maxBitrate)] {
            if let rate, !(50_000...100_000_000).contains(rate) { throw ValidationError("\(name) must be 50000 to 100000000 bit/s (got \(rate))") }
        }
        if let minBitrate, let maxBitrate, minBitrate >= maxBitrate {
            throw ValidationError("--min-bitrate (\(minBitrate)) must be below --max-bitrate (\(maxBitrate))")
        }
        guard (2...20).contains(ratesPerSize) else { throw ValidationError("--rates-per-size must be 2 to 20 (got \(ratesPerSize))") }
        guard (1...20).contains(windows) else { throw ValidationError("--windows must be 1 to 20 (got \(windows))") }
        guard windowSeconds >= 0.5, windowSeconds <= 30 else { throw ValidationError("--window-seconds must be 0.5 to 30 (got \(windowSeconds))") }
        guard (1...100).contains(qualityEvery) else { throw ValidationError("--quality-every must be 1 to 100 (got \(qualityEvery))") }
        guard Self.metrics[metric] != nil else {
            throw ValidationError("--metric must be one of \(Self.metrics.keys.sorted().joined(separator: ", ")) (got \(metric))")
        }
        _ = try parsedHeights()
    }

    private func parsedHeights() throws -> [Int]? {
        guard let heights else { return nil }
        let values = heights.split(separator: ",").map { Int($0.trimmingCharacters(in: .whitespaces)) }
        guard !values.isEmpty, values.allSatisfy({ $0 != nil && (72...4320).contains($0!) && $0! % 2 == 0 }) else {
            throw ValidationError("--heights must be even heights of 72 to 4320 pixels, comma-separated (got \(heights))")
        }
        return values.compactMap { $0 }
    }

    func run() throws {
        FFmpegLibrary.setLogLevel(.error)
        let ladder = try provision.map { try ProvisionFile.load(path: $0, streamGuid: nil) }
        let count = rungs ?? ladder?.variants.count ?? 4
        let minimum = minBitrate ?? ladder?.variants.map(\.bitRate).min() ?? 300_000
        let maximum = maxBitrate ?? ladder?.variants.map(\.bitRate).max() ?? 3_000_000
        guard minimum < maximum else {
            throw ValidationError("the bit-rate range is empty: lowest \(minimum), top \(maximum) bit/s")
        }
        let guid = streamGuid ?? ladder?.streamGuid ?? "live/" + URL(fileURLWithPath: input).deletingPathExtension().lastPathComponent
        let explorer = LadderExplorer(input: input, options: .init(preset: preset, windows: windows, windowSeconds: windowSeconds,
                                                                   qualitySampleInterval: qualityEvery))
        let cpuStarted = CPUClock.process()
        try explorer.loadWindows()
        let sizes = try parsedHeights().map { heights in heights.map { LadderExplorer.Size(width: explorer.width(forHeight: $0), height: $0) } }
            ?? explorer.defaultSizes()
        // The grid reaches a third past the range each way, so the hull is known at its ends.
        let grid = explorer.grid(sizes: sizes, minimumBitRate: minimum * 3 / 4, maximumBitRate: maximum * 4 / 3, ratesPerSize: ratesPerSize)
        let (label, figure) = Self.metrics[metric]!
        // Every point's `quality` is the chosen figure: the hull, the suggestion and the BD-rate follow it.
        func byMetric(_ points: [RateQualityPoint]) -> [RateQualityPoint] { points.map { var p = $0; p.quality = figure($0); return p } }
        let measured = byMetric(try explorer.measure(grid, progress: progressLine("grid")))
        let suggestion = RateQuality.suggestLadder(points: measured, count: count, minimum: minimum, maximum: maximum)
        let suggestedPoints = suggestion.map { LadderExplorer.Point(width: $0.width, height: $0.height, bitRate: $0.bitRate) }
        let provisionedPoints = (ladder?.variants ?? []).map { LadderExplorer.Point(width: $0.width, height: $0.height, bitRate: $0.bitRate) }
        let rungsMeasured = byMetric(try explorer.measure(suggestedPoints + provisionedPoints, progress: progressLine("rungs")))
        if !quiet, isatty(STDERR_FILENO) == 1 { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
        let study = LadderStudy(
            input: input, sourceWidth: explorer.sourceWidth, sourceHeight: explorer.sourceHeight,
            sourcePixelShape: explorer.isAnamorphic ? "\(explorer.sourceSampleAspect.numerator):\(explorer.sourceSampleAspect.denominator)" : nil,
            sourceDisplayWidth: explorer.isAnamorphic ? explorer.sourceDisplayWidth : nil,
            windowSeconds: explorer.secondsPerPoint, windows: explorer.windowCount, preset: preset, metric: label,
            measurement: "each encode decoded, scaled back to the source's size with Lanczos and compared with the source (PSNR and SSIM as FFmpeg defines them), every \(qualityEvery) picture(s)",
            grid: measured, provisioned: Array(rungsMeasured.dropFirst(suggestedPoints.count)),
            suggested: Array(rungsMeasured.prefix(suggestedPoints.count)), cpuSeconds: CPUClock.process() - cpuStarted)
        try write(study, guid: guid)
        if !quiet { printSummary(study) }
    }

    private func write(_ study: LadderStudy, guid: String) throws {
        let directory = URL(fileURLWithPath: output)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let provisionText = study.suggestedProvision(streamGuid: guid)
        // The suggested provision must be one the node accepts as it is.
        do {
            _ = try ProvisionParser.parse(Array(provisionText.utf8))
        } catch {
            throw ValidationError("the suggested ladder is not a valid provision for \(guid): \(error); give --stream-guid")
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        try (encoder.encode(study) + Data("\n".utf8)).write(to: directory.appendingPathComponent("ladder.json"))
        try Data(provisionText.utf8).write(to: directory.appendingPathComponent("provision.json"))
        try Data(LadderReportPage.render(study).utf8).write(to: directory.appendingPathComponent("report.html"))
    }

    private func progressLine(_ phase: String) -> (@Sendable (Int, Int) -> Void)? {
        guard !quiet, isatty(STDERR_FILENO) == 1 else { return nil }
        return { done, total in
            FileHandle.standardError.write(Data("\r\u{1B}[K\(phase): \(done)/\(total) encodes".utf8))
        }
    }

    private func printSummary(_ study: LadderStudy) {
        func rows(_ points: [RateQualityPoint]) -> [[String]] {
            points.map { [$0.size, formatBitRate($0.targetBitRate), formatBitRate($0.bitRate), String(format: "%.2f", $0.psnrY),
                          String(format: "%.2f", $0.psnrYUV), String(format: "%.4f", $0.ssimAll)] }
        }
        let header = ["size", "target", "produced", "PSNR Y", "PSNR YUV", "SSIM"]
        print("\(study.grid.count) grid encodes, \(study.hull.count) on the convex hull; \(String(format: "%.1f", study.windowSeconds)) s of \(study.input) per encode; \(String(format: "%.0f", study.cpuSeconds)) CPU seconds")
        print("suggested ladder:")
        print(Table(header: header, rows: rows(study.suggested)).render())
        if !study.provisioned.isEmpty {
            print("provisioned ladder:")
            print(Table(header: header, rows: rows(study.provisioned)).render())
        }
        if let bd = study.bdRate {
            func percent(_ value: Double?) -> String { value.map { String(format: "%+.1f %%", $0 * 100) } ?? "n/a" }
            print("BD-rate, suggested against provisioned: \(percent(bd.metric)) (\(study.metric), the ladder's metric), \(percent(bd.psnrYUV)) (PSNR YUV), \(percent(bd.ssimDecibels)) (SSIM dB)")
        }
        print("written: \(output)/ladder.json, \(output)/provision.json, \(output)/report.html")
    }
}
