import MediaCore

/// `report.json`: what a run did, for operators and for tests.
public struct TranscodeReport: Sendable, Codable {
    public struct VariantReport: Sendable, Codable {
        public var streamGuid: String
        public var abrLevel: Int
        public var width: Int
        public var height: Int
        public var frames: Int
        public var keyframes: Int
        public var droppedFrames: Int
        public var passthrough: Bool
        /// Measured like HLS AVERAGE-BANDWIDTH: segments with container and audio.
        public var averageBitRate: Int
        /// Measured like HLS BANDWIDTH.
        public var peakBitRate: Int
        /// The video stream alone, comparable with `declaredBitRate`.
        public var videoBitRate: Int
        public var declaredBitRate: Int
        public var encodeFps: Double
        public var segments: Int
        public var codecs: String
        /// (video − declared) ÷ declared: how closely the encoder hit the rung's rate.
        public var bitRateDeviation: Double
        /// CPU seconds of the rung's own queue work (see `VariantPipeline.Statistics.cpuSeconds`).
        public var cpuSeconds: Double
        /// Against the source scaled to the rung's size by the reference scaler; nil when not
        /// measured, and for a passed-through top (it is the source).
        public var quality: QualitySummary?
        /// The share of `cpuSeconds` the quality measurement took.
        public var qualityCPUSeconds: Double?
    }

    /// How quality was measured, when it was.
    public struct QualityMethod: Sendable, Codable {
        /// Every how many pictures one was measured.
        public var sampleInterval: Int
        /// The scaler that made the reference pictures.
        public var reference: String
        /// The measurement's CPU ÷ the rest of the run's CPU.
        public var costShare: Double
    }

    public var input: String
    public var streamGuid: String
    public var sourceFrames: Int
    /// Seconds of source media transcoded.
    public var duration: Double
    public var wallSeconds: Double
    /// Source seconds per wall second.
    public var speed: Double
    public var decodeErrors: Int
    public var keyframeInterval: Double
    public var decoderThreads: Int
    /// CPU seconds of the whole run, every thread.
    public var cpuSeconds: Double
    public var quality: QualityMethod?
    public var variants: [VariantReport]
}

/// A snapshot for a progress line.
public struct JobProgress: Sendable {
    public struct VariantProgress: Sendable {
        public var level: Int
        public var frames: Int
        public var dropped: Int
        /// Bits per second over what this variant has written so far.
        public var bitRate: Int
    }

    public var sourceFrames: Int
    public var mediaSeconds: Double
    public var wallSeconds: Double
    public var variants: [VariantProgress]

    public var fps: Double { wallSeconds > 0 ? Double(sourceFrames) / wallSeconds : 0 }
    public var speed: Double { wallSeconds > 0 ? mediaSeconds / wallSeconds : 0 }
}
