import Dispatch
import Foundation
import FFmpegBridge
import LadderQuality
import Logging
import MediaCore
import Synchronization

/// Turns one top variant into a whole ABR ladder: decode once, one pipeline per variant on its
/// own queue, one keyframe grid for all, MP4 + HLS + bandwidth hints out.
///
/// `run` does the ingest on the calling thread and returns when every output is written.
public final class LadderJob {
    public let ladder: Ladder
    public let input: String
    public let outputDirectory: URL
    public let options: TranscodeOptions
    private let logger: Logger
    private let cancellation = Cancellation()

    public init(ladder: Ladder, input: String, outputDirectory: URL, options: TranscodeOptions = TranscodeOptions(),
                logger: Logger = Logger(label: "abr.transcoder")) {
        self.ladder = ladder
        self.input = input
        self.outputDirectory = outputDirectory
        self.options = options
        self.logger = logger
    }

    /// Stops a running job at its next packet; `run` then throws `.cancelled` and removes its partial output.
    /// Safe to call from any thread, e.g. a signal handler's queue.
    public func cancel() {
        cancellation.cancel()
    }

    /// Ends the input at its next packet as if it had reached its end, and finishes every output:
    /// how a live pull, which has no end of its own, is stopped. Safe to call from any thread.
    public func stop() {
        cancellation.stop()
    }

    /// True for inputs that are streams rather than files: they end when stopped or when the peer goes away.
    public var isLiveInput: Bool { Self.isLive(input) }

    static func isLive(_ url: String) -> Bool {
        ["rtsp://", "rtsps://", "rtmp://", "srt://", "udp://", "rtp://"].contains { url.lowercased().hasPrefix($0) }
    }

    /// Source bit rates up to this multiple of the top's declared rate still count as matching it.
    public static let passthroughBitRateTolerance = 1.2

    public func run(progress: ((JobProgress) -> Void)? = nil) throws(TranscodeError) -> TranscodeReport {
        let clock = options.clock
        let started = clock.nanoseconds
        let cpuStarted = CPUClock.process()
        let source: MediaInput
        do {
            source = try MediaInput(url: input)
        } catch {
            throw .badInput("cannot open input \(input): \(error.message)")
        }
        guard let video = source.bestVideoStream else {
            throw .badInput("input \(input) has no video stream (found: \(source.streams.map(\.codecName).joined(separator: ", ")))")
        }
        guard video.width > 0, video.height > 0 else {
            throw .badInput("input \(input): video stream \(video.index) (\(video.codecName)) has no picture size; it cannot be decoded")
        }
        let audio: AudioTrack?
        do {
            audio = try source.streams.first { $0.kind == .audio }.flatMap { try AudioTrack(stream: $0) }
        } catch {
            throw .failed("cannot prepare audio: \(error)")
        }
        if audio == nil, let other = source.streams.first(where: { $0.kind == .audio }) {
            logger.warning("audio codec \(other.codecName) cannot be carried in MP4; variants will have no audio")
        }

        let plan = LadderPlan(ladder: ladder, video: video, passthroughTop: try decideTopPassthrough(video: video, source: source, audio: audio),
                              options: options, cores: ProcessInfo.processInfo.activeProcessorCount)
        let passthroughTop = plan.passthroughTop
        let frameRate = plan.frameRate
        let threads = plan.threads

        let decoder: VideoDecoder
        do {
            decoder = try VideoDecoder(stream: video, threads: threads.decoderThreads)
        } catch {
            throw .badInput("input \(input): cannot decode \(video.codecName) video: \(error.message)")
        }

        let directory: OutputDirectory
        do {
            directory = try OutputDirectory(outputDirectory)
        } catch {
            throw .failed("cannot create output directory \(outputDirectory.path): \(error.localizedDescription)")
        }
        let pipelines: [VariantPipeline]
        do {
            pipelines = try plan.makePipelines(ladder: ladder, video: video) { [ladder, options] variant in
                VariantOutput(
                    paths: .init(mp4: directory.staging.appendingPathComponent("\(ladder.name)_\(variant.level).mp4"),
                                 hlsDirectory: directory.staging.appendingPathComponent("hls").appendingPathComponent(HLSLayout(ladderGuid: ladder.streamGuid).variantFolder(level: variant.level)),
                                 maximumSegmentDuration: 3 * options.keyframeInterval),
                    audio: audio, frameRate: frameRate, clock: options.clock)
            }
        } catch {
            directory.abandon()
            throw .failed("cannot set up the variants: \(error)")
        }

        var ingest = DecodeLoop(
            source: source, video: video, audio: audio.map(SessionAudio.init(track:)), decoder: decoder, pipelines: pipelines,
            grid: plan.grid, clock: clock, started: started, progress: progress, cancellation: cancellation, isLive: isLiveInput, logger: logger)
        do {
            try ingest.run()
        } catch {
            let group = DispatchGroup()
            pipelines.forEach { $0.finish(group: group) }
            group.wait()
            directory.abandon()
            throw error
        }

        // Everything below reads pipeline state after `group.wait()`, which orders it after their queues' work.
        let group = DispatchGroup()
        pipelines.forEach { $0.finish(group: group) }
        group.wait()
        if let failure = pipelines.compactMap({ $0.statistics.failure }).first {
            directory.abandon()
            throw .failed(failure)
        }
        if ingest.decodedFrames == 0 {
            directory.abandon()
            throw .badInput("input \(input): no video frame could be decoded (\(ingest.decodeErrors) decode errors)")
        }
        if video.frameCount > 0, ingest.videoPackets + ingest.skippedLeadingPackets < video.frameCount {
            directory.abandon()
            throw .badInput("input \(input) is truncated: its index lists \(video.frameCount) video frames but only \(ingest.videoPackets + ingest.skippedLeadingPackets) could be read")
        }

        let wall = clock.seconds(since: started)
        let cpu = CPUClock.process() - cpuStarted
        let keyframeInterval = passthroughTop ? Self.longestGap(ingest.sourceKeyframeTimes, fallback: options.keyframeInterval) : options.keyframeInterval
        do {
            let report = try writeSummary(directory: directory, pipelines: pipelines, ingest: ingest, frameRate: frameRate,
                                          keyframeInterval: keyframeInterval, decoderThreads: threads.decoderThreads, wall: wall, cpu: cpu)
            try directory.commit(lastItem: "report.json")
            return report
        } catch {
            directory.abandon()
            throw .failed("cannot write outputs to \(outputDirectory.path): \(error)")
        }
    }

    private func decideTopPassthrough(video: StreamInfo, source: MediaInput, audio: AudioTrack?) throws(TranscodeError) -> Bool {
        let top = ladder.top
        switch options.topMode {
        case .encode:
            return false
        case .passthrough:
            guard video.parameters.isH264 else {
                throw .failed("--top passthrough needs an H.264 source (got \(video.codecName))")
            }
            return true
        case .auto:
            guard LadderPlan.topMatches(.auto, video: video, top: top) else { return false }
            var bitRate = video.bitRate
            if bitRate == 0, source.bitRate > 0 {
                bitRate = source.bitRate - (audio?.stream.bitRate ?? 0)
            }
            // An unknown rate (a live pull) counts as matching: the publisher was told the top's rate.
            return bitRate == 0 || Double(bitRate) <= Double(top.bitRate) * Self.passthroughBitRateTolerance
        }
    }

    static func plausibleFrameRate(_ rate: Rational) -> Double {
        let value = rate.doubleValue
        return value > 0 && value <= 240 ? value : 30
    }

    static func roundedSeconds(_ seconds: Double) -> Double { (seconds * 1000).rounded() / 1000 }

    static func longestGap(_ times: [MediaTime], fallback: Double) -> Double {
        let gaps = zip(times, times.dropFirst()).map { ($1 - $0).seconds }
        guard let longest = gaps.max() else { return fallback }
        return (longest * 1000).rounded() / 1000
    }

    private func writeSummary(directory: OutputDirectory, pipelines: [VariantPipeline], ingest: DecodeLoop, frameRate: Double,
                              keyframeInterval: Double, decoderThreads: Int, wall: Double, cpu: Double) throws -> TranscodeReport {
        let targetDuration = Double(HLSMediaPlaylist.targetDuration(for: pipelines.flatMap { $0.output.segments.map(\.duration) }))
        var variantReports: [TranscodeReport.VariantReport] = []
        var measurements: [Int: LadderHints.Measurement] = [:]
        for pipeline in pipelines {
            let variant = pipeline.variant
            let output = pipeline.output
            let statistics = pipeline.statistics
            // The peak over the ladder's common target duration: what HLS's BANDWIDTH means.
            let measurement = LadderHints.Measurement(codecs: output.codecs, averageBitRate: output.meter.averageBitRate,
                                                      peakBitRate: output.meter.peakBitRate(targetDuration: targetDuration))
            measurements[variant.level] = measurement
            variantReports.append(TranscodeReport.VariantReport(
                streamGuid: variant.streamGuid, abrLevel: variant.level, width: variant.width, height: variant.height,
                frames: output.frames, keyframes: output.keyframes, droppedFrames: statistics.dropped,
                passthrough: pipeline.isPassthrough, averageBitRate: measurement.averageBitRate,
                peakBitRate: measurement.peakBitRate, videoBitRate: output.videoBitRate,
                declaredBitRate: variant.bitRate,
                encodeFps: statistics.busySeconds > 0 ? (Double(output.frames) / statistics.busySeconds * 10).rounded() / 10 : 0,
                segments: output.segments.count, codecs: output.codecs,
                bitRateDeviation: variant.bitRate > 0 ? (Double(output.videoBitRate - variant.bitRate) / Double(variant.bitRate) * 1000).rounded() / 1000 : 0,
                cpuSeconds: Self.roundedSeconds(statistics.cpuSeconds), quality: statistics.quality,
                qualityCPUSeconds: options.qualitySampleInterval != nil && !pipeline.isPassthrough ? Self.roundedSeconds(statistics.qualityCPUSeconds) : nil))
        }
        let bandwidthHints = LadderHints.make(ladder: ladder, frameRate: frameRate, keyframeInterval: keyframeInterval,
                                              passthroughLevel: pipelines.first { $0.isPassthrough }?.variant.level,
                                              measurements: measurements)
        try LadderHints.write(bandwidthHints, ladder: ladder, master: directory.staging.appendingPathComponent("hls").appendingPathComponent(HLSLayout.masterPlaylist),
                              hintsFile: directory.staging.appendingPathComponent(HLSLayout.hintsFile), durable: true)

        let duration = ingest.mediaSeconds
        let report = TranscodeReport(
            input: input, streamGuid: ladder.streamGuid, sourceFrames: ingest.decodedFrames,
            duration: (duration * 1000).rounded() / 1000, wallSeconds: (wall * 1000).rounded() / 1000,
            speed: wall > 0 ? (duration / wall * 100).rounded() / 100 : 0, decodeErrors: ingest.decodeErrors,
            keyframeInterval: keyframeInterval, decoderThreads: decoderThreads, cpuSeconds: Self.roundedSeconds(cpu),
            quality: options.qualitySampleInterval.map { interval in
                let measuring = pipelines.reduce(0) { $0 + $1.statistics.qualityCPUSeconds }
                return TranscodeReport.QualityMethod(sampleInterval: interval, reference: "swscale lanczos",
                                                     costShare: cpu > measuring ? ((measuring / (cpu - measuring)) * 1000).rounded() / 1000 : 0)
            },
            variants: variantReports)
        try JSONOutput.write(report, to: directory.staging.appendingPathComponent("report.json"), durable: true)
        if let interval = options.qualitySampleInterval {
            let timelines = pipelines.filter { !$0.isPassthrough }.map { pipeline in
                QualityTimeline(level: pipeline.variant.level, width: pipeline.variant.width, height: pipeline.variant.height,
                                bitRate: pipeline.variant.bitRate, samples: pipeline.statistics.qualitySamples)
            }
            try ReplacingFile.write(QualityTimeline.csv(timelines), to: directory.staging.appendingPathComponent("quality.csv"), durable: true)
            try ReplacingFile.write(QualityTimelinePage.render(input: input, sampleInterval: interval, timelines),
                                    to: directory.staging.appendingPathComponent("quality.html"), durable: true)
        }
        return report
    }
}

enum JSONOutput {
    static func write(_ value: some Encodable, to url: URL, durable: Bool) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        try ReplacingFile.write(encoder.encode(value) + Data("\n".utf8), to: url, durable: durable)
    }
}

/// Flags the ingest loop polls; set from any thread.
final class Cancellation: Sendable {
    private let cancelled = Atomic(false)
    private let stopped = Atomic(false)
    func cancel() { cancelled.store(true, ordering: .relaxed) }
    func stop() { stopped.store(true, ordering: .relaxed) }
    var isCancelled: Bool { cancelled.load(ordering: .relaxed) }
    var isStopped: Bool { stopped.load(ordering: .relaxed) }
}
