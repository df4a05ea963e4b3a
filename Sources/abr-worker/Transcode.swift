import ArgumentParser
import FFmpegBridge
import Foundation
import MediaCore
import NodeApp
import Transcoder

struct Transcode: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Transcode a top variant into its whole ABR ladder: MP4 per variant, HLS, abr.json, report.json.")

    @Option(help: "Provision JSON file (Stream Manager 2.0, or a 1.0 meta document).")
    var provision: String

    @Option(help: "Top stream guid for a Stream Manager 1.0 meta document (default live/<name>).")
    var streamGuid: String?

    @Option(help: "Source: a media file (mp4, ts, flv, mkv, ...) or an rtsp:// URL (pulled over TCP; Ctrl-C ends it and finishes the outputs).")
    var input: String

    @Option(help: "Output directory.")
    var output: String

    @OptionGroup var encoding: EncodingOptions

    @Option(help: "Threads for the decoder and each encoder (default: derived from cores and variants).")
    var threads: Int?

    @Flag(help: "No progress line and no summary table.")
    var quiet = false

    @Flag(help: "Measure every encoded rung's PSNR and SSIM against the source scaled to its size (Lanczos).")
    var quality = false

    @Option(help: "With --quality: measure one picture in N (from 4 on, every other GOP is decoded and one picture in N/2 of it measured).")
    var qualityEvery: Int = TranscodeOptions.defaultQualitySampleInterval

    func validate() throws {
        if let threads, !(1...64).contains(threads) {
            throw ValidationError("--threads must be 1 to 64 (got \(threads))")
        }
        guard (1...1000).contains(qualityEvery) else {
            throw ValidationError("--quality-every must be 1 to 1000 (got \(qualityEvery))")
        }
    }

    func run() throws {
        let ladder = try ProvisionFile.load(path: provision, streamGuid: streamGuid)
        FFmpegLibrary.setLogLevel(quiet ? .quiet : .error)
        var options = encoding.transcodeOptions(threads: threads)
        if quality { options.qualitySampleInterval = qualityEvery }
        let job = LadderJob(ladder: ladder, input: input, outputDirectory: URL(fileURLWithPath: output), options: options)
        let showProgress = !quiet && isatty(STDERR_FILENO) == 1
        // Ctrl-C or SIGTERM: a live pull has no end of its own, so it ends there and its outputs are
        // finished; a file run is cancelled and leaves no partial output behind.
        let live = job.isLiveInput
        nonisolated(unsafe) let running = job
        let signalSources = onTerminationSignal { if live { running.stop() } else { running.cancel() } }
        defer { signalSources.forEach { $0.cancel() } }
        let report = try job.run(progress: showProgress ? { printProgress($0) } : nil)
        if showProgress { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
        if !quiet { printSummary(report) }
    }

    private func printProgress(_ progress: JobProgress) {
        let variants = progress.variants.map { "L\($0.level) \($0.frames)f \(formatBitRate($0.bitRate))\($0.dropped > 0 ? " \($0.dropped) dropped" : "")" }
        let line = String(format: "\r\u{1B}[K%d frames  %.0f fps  %.2fx  ", progress.sourceFrames, progress.fps, progress.speed)
            + variants.joined(separator: " | ")
        FileHandle.standardError.write(Data(line.utf8))
    }

    private func printSummary(_ report: TranscodeReport) {
        print(String(format: "%@ → %@: %d frames, %.2f s of media in %.2f s (%.2fx real time)",
                     report.input, output, report.sourceFrames, report.duration, report.wallSeconds, report.speed))
        print(Table(
            header: ["level", "stream guid", "size", "mode", "frames", "IDRs", "declared", "video", "average", "peak", "encode fps"],
            rows: report.variants.map {
                ["\($0.abrLevel)", $0.streamGuid, "\($0.width)x\($0.height)", $0.passthrough ? "passthrough" : "x264",
                 "\($0.frames)", "\($0.keyframes)", formatBitRate($0.declaredBitRate), formatBitRate($0.videoBitRate),
                 formatBitRate($0.averageBitRate),
                 formatBitRate($0.peakBitRate), $0.passthrough ? "-" : String(format: "%.0f", $0.encodeFps)]
            }).render())
        print("video: the video stream alone; average and peak: HLS segments with audio and container (RFC 8216)")
        if let method = report.quality {
            print(Table(
                header: ["level", "size", "declared", "video", "off by", "PSNR Y", "PSNR YUV", "worst", "SSIM", "SSIM dB", "CPU s", "measured"],
                rows: report.variants.map { variant in
                    let measured = variant.quality
                    return ["\(variant.abrLevel)", "\(variant.width)x\(variant.height)", formatBitRate(variant.declaredBitRate),
                            formatBitRate(variant.videoBitRate), String(format: "%+.1f %%", variant.bitRateDeviation * 100),
                            measured.map { String(format: "%.2f", $0.psnrY) } ?? "source",
                            measured.map { String(format: "%.2f", $0.psnrYUV) } ?? "-",
                            measured.map { String(format: "%.2f", $0.psnrWorst) } ?? "-",
                            measured.map { String(format: "%.4f", $0.ssimAll) } ?? "-",
                            measured.map { String(format: "%.2f", $0.ssimAllDecibels) } ?? "-",
                            String(format: "%.2f", variant.cpuSeconds),
                            measured.map { "\($0.pictures)" } ?? "-"]
                }).render())
            print(String(format: "quality: against the source scaled by %@, every %d picture(s); the measurement cost %.0f %% of the rest of the run's CPU (%.2f s in all)",
                         method.reference, method.sampleInterval, method.costShare * 100, report.cpuSeconds))
            print("quality over time: \(output)/quality.html   every measured picture: \(output)/quality.csv")
        }
        print("HLS: \(output)/hls/\(HLSLayout.masterPlaylist)   hints: \(output)/\(HLSLayout.hintsFile)   report: \(output)/report.json")
    }
}
