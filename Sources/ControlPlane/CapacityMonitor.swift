import Foundation
import MediaCore
import Synchronization
import Transcoder

/// How much of the node's real-time encode capacity is used, and whether one more job fits:
/// what a stream manager needs to place work, and what refuses a publish that would make every
/// stream on the node fall behind.
///
/// Load is measured, not declared: the seconds each variant's queue spent scaling and encoding
/// per wall-clock second (cores busy), summed over running jobs. A job not measured yet is
/// estimated from its ladder's encoded pixel rate.
public final class CapacityMonitor: Sendable {
    public struct Configuration: Sendable {
        /// Cores the node may use for encoding (default: all it has).
        public var cores: Double
        /// Fraction of `cores` the node fills before refusing work; the rest absorbs decoding,
        /// packaging, networking and bursts.
        public var maximumLoad: Double = 0.85
        /// Cores per encoded pixel per second: x264 veryfast plus scaling, as measured on the
        /// project's 2-core machine kind (480p + 360p at 30 fps ≈ 0.3 core, see README).
        public var coresPerPixelRate = 1.6e-8
        public var assumedFrameRate = 30.0

        public init(cores: Double = Double(ProcessInfo.processInfo.activeProcessorCount)) {
            self.cores = cores
        }
    }

    public struct Snapshot: Sendable, Codable, Equatable {
        public var cores: Int
        public var capacityCores: Double
        public var maximumLoad: Double
        public var provisionedJobs: Int
        public var runningJobs: Int
        /// Cores busy encoding, measured.
        public var encodeCores: Double
        /// `encodeCores / capacityCores`: fraction of real-time capacity in use.
        public var encodeLoad: Double
        /// Estimated cost in cores of the next job: the largest waiting ladder, or a 720p
        /// three-level reference ladder when none waits.
        public var nextJobCores: Double
        public var acceptsJob: Bool
        public var reason: String?
    }

    /// A 720p top passed through plus 480p and 360p: the reference job when none waits.
    static let referenceLadder = Ladder(streamGuid: "reference/job", variants: [
        Variant(streamGuid: "reference/job_1", level: 1, width: 1280, height: 720, bitRate: 2_500_000),
        Variant(streamGuid: "reference/job_2", level: 2, width: 854, height: 480, bitRate: 1_000_000),
        Variant(streamGuid: "reference/job_3", level: 3, width: 640, height: 360, bitRate: 600_000),
    ])

    public let configuration: Configuration
    private let statuses: @Sendable () -> [LiveLadderJob.Status]
    private let samples = Mutex<(time: Double, busy: [String: Double], rates: [String: Double])?>(nil)

    public init(configuration: Configuration, statuses: @escaping @Sendable () -> [LiveLadderJob.Status]) {
        self.configuration = configuration
        self.statuses = statuses
    }

    /// Cores a ladder is expected to need before it is measured: its encoded rungs' pixel rate.
    /// The top counts unless it is known to pass through (a publisher announced the top's size):
    /// before a publish, whether it will is unknown.
    public func estimatedCores(_ ladder: Ladder, frameRate: Double? = nil, topPassesThrough: Bool = false) -> Double {
        let rate = frameRate ?? configuration.assumedFrameRate
        let encoded = ladder.variants.filter { !(topPassesThrough && $0.level == ladder.top.level) }
        return encoded.reduce(0) { $0 + Double($1.pixelCount) * rate } * configuration.coresPerPixelRate
    }

    /// Cores each running job keeps busy, measured over the last seconds.
    func measuredCores(_ statuses: [LiveLadderJob.Status], now: Double = ProcessInfo.processInfo.systemUptime) -> [String: Double] {
        let current = statuses.filter { $0.state == .running }
        let busy = Dictionary(current.map { ($0.streamGuid, $0.variants.reduce(0) { $0 + $1.busySeconds }) }, uniquingKeysWith: +)
        return samples.withLock { sample in
            guard let previous = sample else {
                sample = (now, busy, [:])
                return [:]
            }
            let elapsed = now - previous.time
            // Rates need a second of history; newer samples only refresh them every two seconds.
            guard elapsed >= 1 else { return previous.rates.filter { busy[$0.key] != nil } }
            var rates: [String: Double] = [:]
            for (guid, total) in busy {
                if let before = previous.busy[guid] { rates[guid] = max(0, total - before) / elapsed }
            }
            if elapsed >= 2 || previous.rates.isEmpty { sample = (now, busy, rates) }
            return rates
        }
    }

    public func snapshot(waiting: [Ladder] = []) -> Snapshot {
        let statuses = statuses()
        let running = statuses.filter { $0.state == .running }
        let measured = measuredCores(statuses)
        // A running job not measured yet (first seconds) counts at its estimate.
        let used = running.reduce(0.0) { total, status in
            total + (measured[status.streamGuid] ?? estimate(status))
        }
        let next = waiting.map { estimatedCores($0) }.max() ?? estimatedCores(Self.referenceLadder)
        let refusal = refusalReason(usedCores: used, neededCores: next, what: "another job")
        return Snapshot(cores: ProcessInfo.processInfo.activeProcessorCount, capacityCores: configuration.cores,
                        maximumLoad: configuration.maximumLoad, provisionedJobs: statuses.count, runningJobs: running.count,
                        encodeCores: rounded(used), encodeLoad: rounded(configuration.cores > 0 ? used / configuration.cores : 1),
                        nextJobCores: rounded(next), acceptsJob: refusal == nil, reason: refusal)
    }

    /// Why a publish to `ladder` would overload the node, or nil when it fits.
    public func admissionRefusal(_ ladder: Ladder, topPassesThrough: Bool = false) -> String? {
        let statuses = statuses()
        let others = statuses.filter { $0.state == .running && $0.streamGuid != ladder.streamGuid }
        let measured = measuredCores(statuses)
        let used = others.reduce(0.0) { $0 + (measured[$1.streamGuid] ?? estimate($1)) }
        return refusalReason(usedCores: used, neededCores: estimatedCores(ladder, topPassesThrough: topPassesThrough), what: ladder.streamGuid)
    }

    private func estimate(_ status: LiveLadderJob.Status) -> Double {
        let pixelRate = status.variants.filter { !$0.passthrough }
            .reduce(0.0) { $0 + Double($1.width * $1.height) * (status.sourceFrameRate ?? configuration.assumedFrameRate) }
        return pixelRate * configuration.coresPerPixelRate
    }

    private func refusalReason(usedCores: Double, neededCores: Double, what: String) -> String? {
        let limit = configuration.cores * configuration.maximumLoad
        guard usedCores + neededCores > limit else { return nil }
        return "node over capacity: \(what) needs about " + String(format: "%.2f cores, %.2f of %.2f usable cores (%.0f %% of %.2f) are busy encoding",
                      neededCores, usedCores, limit, configuration.maximumLoad * 100, configuration.cores)
    }

    private func rounded(_ value: Double) -> Double { (value * 1000).rounded() / 1000 }
}
