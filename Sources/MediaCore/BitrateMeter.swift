import DequeModule
/// Measures a variant's bit rate from its media segments, as RFC 8216 §4.3.4.2 defines
/// `BANDWIDTH` (peak) and `AVERAGE-BANDWIDTH` (average). Sizes include container overhead.
public struct BitrateMeter: Sendable {
    public struct Segment: Sendable, Hashable {
        public var duration: Double
        public var bytes: Int
        public init(duration: Double, bytes: Int) {
            self.duration = duration
            self.bytes = bytes
        }
    }

    public private(set) var segments = Deque<Segment>()
    public private(set) var totalBytes = 0
    public private(set) var totalDuration = 0.0
    /// Live meters keep only this many recent segments for the peak; the average covers everything.
    public let retainedSegments: Int

    public init(retainedSegments: Int = .max) {
        self.retainedSegments = retainedSegments
    }

    public mutating func add(_ segment: Segment) {
        guard segment.duration > 0 else { return }
        segments.append(segment)
        totalBytes += segment.bytes
        totalDuration += segment.duration
        if segments.count > retainedSegments {
            segments.removeFirst(segments.count - retainedSegments)
        }
    }

    public mutating func add(duration: Double, bytes: Int) {
        add(Segment(duration: duration, bytes: bytes))
    }

    /// Total bits over total duration, in bit/s; 0 before any segment.
    public var averageBitRate: Int {
        totalDuration > 0 ? Int((Double(totalBytes) * 8 / totalDuration).rounded()) : 0
    }

    /// The largest bit rate of any run of contiguous segments whose total duration lies
    /// between 0.5 and 1.5 times the target duration. When no run qualifies (a stream
    /// shorter than half a target duration) the average over what there is stands in.
    public func peakBitRate(targetDuration: Double) -> Int {
        let lower = 0.5 * targetDuration - 1e-9
        let upper = 1.5 * targetDuration + 1e-9
        var peak = 0.0
        for start in segments.indices {
            var bytes = 0
            var duration = 0.0
            for segment in segments[start...] {
                bytes += segment.bytes
                duration += segment.duration
                if duration > upper { break }
                if duration >= lower {
                    peak = max(peak, Double(bytes) * 8 / duration)
                }
            }
        }
        if peak == 0 { return averageBitRate }
        return Int(peak.rounded())
    }

    /// The HLS target duration for these segments: the longest, rounded up to whole seconds.
    public var targetDuration: Int {
        HLSMediaPlaylist.targetDuration(for: segments.map(\.duration))
    }
}
