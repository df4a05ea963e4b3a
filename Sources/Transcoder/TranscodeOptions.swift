import FFmpegBridge
import Foundation
import MediaCore
import Synchronization

/// Whether the top variant is the publisher's own stream or re-encoded.
public enum TopVariantMode: String, Sendable, CaseIterable {
    /// Pass through when the source is H.264 at the top's size and at most 1.2× its bit rate.
    case auto
    case passthrough
    case encode

    /// Whether a source of this codec and size would be passed through as `top` (under `auto`,
    /// an H.264 source at the top's size; files also weigh the source's bit rate, see `LadderJob`).
    public func passesThrough(isH264: Bool, width: Int, height: Int, top: Variant) -> Bool {
        switch self {
        case .encode: false
        case .passthrough: isH264
        case .auto: isH264 && width == top.width && height == top.height
        }
    }
}

/// What an inbox does when its variant falls behind.
public enum BackpressurePolicy: Sendable {
    /// Offline: the ingest waits, so every variant gets every frame.
    case block
    /// Live: the lagging variant drops frames (counted) until the next grid IDR; ingest never waits.
    case dropUntilKeyframe
}

public struct TranscodeOptions: Sendable {
    /// What the job's rates, latencies, silences and progress are measured on.
    public var clock = NodeClock.system
    public var preset: String
    public var topMode: TopVariantMode
    /// Seconds between IDRs on the time grid, and the minimum segment when following source keyframes.
    public var keyframeInterval: Double
    /// Overrides the decoder's and every encoder's thread count.
    public var threads: Int?
    public var backpressure: BackpressurePolicy
    /// Frames a variant may hold queued before backpressure applies.
    public var inboxCapacity: Int
    /// Measure every encoded rung's PSNR and SSIM against the source on every `n`th picture;
    /// nil measures nothing.
    public var qualitySampleInterval: Int?
    /// The filter every encoded rung is scaled with.
    public var scaler: ScalingAlgorithm
    /// How the rungs' encoder threads are scheduled (a live node lowers them behind its ingest
    /// and network threads).
    public var encoderPriority: EncoderPriority

    public init(preset: String = "veryfast", topMode: TopVariantMode = .auto, keyframeInterval: Double = 2,
                threads: Int? = nil, backpressure: BackpressurePolicy = .block, inboxCapacity: Int = 8,
                qualitySampleInterval: Int? = nil, scaler: ScalingAlgorithm = .bicubic, encoderPriority: EncoderPriority = .normal) {
        self.scaler = scaler
        self.encoderPriority = encoderPriority
        self.qualitySampleInterval = qualitySampleInterval.map { max(1, $0) }
        self.preset = preset
        self.topMode = topMode
        self.keyframeInterval = keyframeInterval
        self.threads = threads
        self.backpressure = backpressure
        self.inboxCapacity = inboxCapacity
    }

    /// Every how many pictures `--quality` measures one by default: see the README's figures for
    /// what each interval costs against the encode.
    public static let defaultQualitySampleInterval = 4

    /// x264 presets libx264 accepts.
    public static let presets = EncoderChoices.presets
}

/// How many threads the decoder and each encoder get, so that together they fill the machine
/// without each library assuming it has every core to itself.
public struct ThreadPlan: Sendable, Hashable {
    public var decoderThreads: Int
    /// Per encoded variant level.
    public var encoderThreads: [Int: Int]

    /// - Decoder: `min(cores, 2)`: H.264 decoding is a small share of a ladder's work, and more
    ///   frame threads only add latency and memory.
    /// - Each x264: `max(1, round(cores × its share of encoded pixels))`: the variants already
    ///   run in parallel on their own queues, so x264's own threads are only worth it for a
    ///   rung that dominates the work (or a single encoded rung).
    public static func make(cores: Int, encoded: [Variant], override: Int?) -> ThreadPlan {
        if let override {
            return ThreadPlan(decoderThreads: override, encoderThreads: Dictionary(uniqueKeysWithValues: encoded.map { ($0.level, override) }))
        }
        let totalPixels = encoded.reduce(0) { $0 + $1.pixelCount }
        var plan: [Int: Int] = [:]
        for variant in encoded {
            let share = totalPixels > 0 ? Double(variant.pixelCount) / Double(totalPixels) : 1
            plan[variant.level] = max(1, Int((Double(cores) * share).rounded()))
        }
        return ThreadPlan(decoderThreads: max(1, min(cores, 2)), encoderThreads: plan)
    }
}

/// The node's cores, shared by the jobs it runs. Each job sizes its thread plan for its share when
/// it starts encoding, instead of every job planning as if it had the machine to itself: N jobs
/// each giving x264 and the decoder "all cores" put N × cores busy threads on the run queue, and
/// the switching between them is paid in CPU and in latency.
public final class CoreBudget: Sendable {
    public let cores: Int
    private let jobs = Mutex(0)

    /// One budget per process: every job on the node shares it.
    public static let node = CoreBudget(cores: ProcessInfo.processInfo.activeProcessorCount)

    public init(cores: Int) {
        self.cores = max(1, cores)
    }

    /// Jobs holding a share now.
    public var jobCount: Int { jobs.withLock { $0 } }

    /// A job takes part; pair with `leave()`.
    public func join() {
        jobs.withLock { $0 += 1 }
    }

    public func leave() {
        jobs.withLock { $0 = max(0, $0 - 1) }
    }

    /// Cores one job may plan for while `jobCount` jobs share the node (at least one).
    public var share: Int {
        max(1, cores / max(1, jobCount))
    }
}
