import FFmpegBridge
import MediaCore

/// What every ladder job decides once, before its first frame, whether it reads a file or a
/// publisher: whether the top passes through, the keyframe grid, the frame rate encoders are
/// opened with, the thread plan, and one pipeline per variant. `LadderJob` and `LiveLadderJob`
/// differ only in where packets come from and where outputs go.
struct LadderPlan {
    let passthroughTop: Bool
    /// The frame rate encoders are opened with: the source's when plausible, else 30.
    let frameRate: Double
    let threads: ThreadPlan
    let grid: KeyframeGrid
    let options: TranscodeOptions

    /// - Parameters:
    ///   - passthroughTop: the caller's decision (files also weigh the source's bit rate).
    ///   - cores: the cores this job may plan for (the whole machine offline, its share live).
    init(ladder: Ladder, video: StreamInfo, passthroughTop: Bool, options: TranscodeOptions, cores: Int) {
        self.passthroughTop = passthroughTop
        self.options = options
        frameRate = LadderJob.plausibleFrameRate(video.frameRate)
        let encoded = ladder.variants.filter { !(passthroughTop && $0.level == 1) }
        threads = ThreadPlan.make(cores: cores, encoded: encoded, override: options.threads)
        grid = KeyframeGrid(mode: passthroughTop ? .followSource(minimumSegment: options.keyframeInterval) : .interval(options.keyframeInterval))
    }

    static func topMatches(_ mode: TopVariantMode, video: StreamInfo, top: Variant) -> Bool {
        mode.passesThrough(isH264: video.parameters.isH264, width: video.width, height: video.height, top: top)
    }

    /// Whether the source's pictures may come out of order (B-frames), which WebRTC cannot carry:
    /// libavformat held pictures back while probing, or the SPS allows reordering, or it does not
    /// say and its profile permits B-frames (only Baseline forbids them).
    static func mayReorder(_ video: StreamInfo) -> Bool {
        if video.parameters.videoDelay > 0 { return true }
        guard let nal = H264.parameterSets(fromExtradata: video.parameters.extradata).sps.first, let sps = H264SPS(nal) else { return true }
        return sps.reorderDepth > 0
    }

    /// One pipeline per variant, in ladder order: the top passed through or encoded, the rest encoded.
    func makePipelines(ladder: Ladder, video: StreamInfo, output: (Variant) -> VariantOutput) throws -> [VariantPipeline] {
        let rate = video.frameRate.isValid && video.frameRate.doubleValue == frameRate
            ? video.frameRate : Rational(framesPerSecond: frameRate)
        return try ladder.variants.map { variant in
            let work: VariantPipeline.Work
            if passthroughTop, variant.level == ladder.top.level {
                work = .passthrough(try video.parameters.copy(), timeBase: video.timeBase)
            } else {
                work = .encode(H264EncoderSettings(
                    width: variant.width, height: variant.height, bitRate: variant.bitRate, timeBase: video.timeBase,
                    frameRate: rate, preset: variant.preset ?? options.preset, profile: variant.profile ?? "high",
                    threads: threads.encoderThreads[variant.level] ?? 1))
            }
            return VariantPipeline(variant: variant, work: work, output: output(variant), policy: options.backpressure,
                                   inboxCapacity: options.inboxCapacity, qualitySampleInterval: options.qualitySampleInterval,
                                   scaling: options.scaler, priority: options.encoderPriority, clock: options.clock)
        }
    }
}
