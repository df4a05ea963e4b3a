/// A live video track's frame rate, judged from its first pictures' presentation times.
///
/// RTSP publishers (ffmpeg, GStreamer, OBS, phones) rarely state `a=framerate` in their SDP, and an
/// H.264 encoder opened at a guessed rate spends its bit budget at the wrong pace: a 60 fps publish
/// gets rungs at twice their bit rate, a 25 fps one at five sixths, and playlists state the wrong
/// FRAME-RATE. The timestamps are what the encoders will see, so they are what decides.
///
/// Pictures come in decode order (B-frames arrive before the pictures they follow), with capture
/// jitter, and now and then one is missing; so the estimate sorts the times, counts frame intervals
/// by the median gap, and divides the whole span by them.
public struct FrameRateEstimate: Sendable {
    /// Pictures looked at; later ones are ignored (the estimate is for opening encoders).
    public static let capacity = 12
    /// Rates this close (relative) to a broadcast or camera rate are taken to be that rate: a
    /// phone's capture times jitter by a few milliseconds.
    static let snapTolerance = 0.02
    static let commonRates: [Double] = [10, 12, 12.5, 15, 24_000.0 / 1001, 24, 25, 30_000.0 / 1001, 30, 48, 50,
                                        60_000.0 / 1001, 60, 90, 100, 120_000.0 / 1001, 120]
    static let plausibleRates: ClosedRange<Double> = 1...240

    /// Ticks per second of the presentation times (90 000 for RTP video).
    public let clockRate: Int64
    private var times: [Int64] = []

    public init(clockRate: Int64) {
        self.clockRate = max(1, clockRate)
        times.reserveCapacity(Self.capacity)
    }

    public var isComplete: Bool { times.count >= Self.capacity }

    public mutating func add(presentationTicks: Int64) {
        guard times.count < Self.capacity else { return }
        times.append(presentationTicks)
    }

    /// The rate the pictures so far show, or nil with fewer than `minimumPictures` of them, or when
    /// their gaps give no plausible rate (1–240 fps).
    public func frameRate(minimumPictures: Int = FrameRateEstimate.capacity) -> Double? {
        guard times.count >= max(2, minimumPictures) else { return nil }
        let sorted = times.sorted()
        var gaps: [Int64] = []
        gaps.reserveCapacity(sorted.count - 1)
        for (earlier, later) in zip(sorted, sorted.dropFirst()) {
            // A repeated time (a second slice's packet, a duplicate) is no gap; wrapped or wild
            // timestamps give gaps no plausible rate survives.
            let (gap, overflow) = later.subtractingReportingOverflow(earlier)
            if !overflow, gap > 0 { gaps.append(gap) }
        }
        guard !gaps.isEmpty, let first = sorted.first, let last = sorted.last else { return nil }
        // The median gap says how many frame intervals each gap is (a missing picture leaves a
        // double one); the whole span over their sum is the rate, so the capture jitter of two
        // timestamps is spread over all the intervals rather than weighing on one gap.
        let median = Double(gaps.sorted()[gaps.count / 2])
        let intervals = gaps.reduce(0.0) { $0 + max(1, (Double($1) / median).rounded()) }
        let span = Double(last) - Double(first)
        let rate = Double(clockRate) * intervals / span
        guard Self.plausibleRates.contains(rate) else { return nil }
        // The nearest: 30 and 30000/1001 are within the tolerance of each other.
        if let common = Self.commonRates.min(by: { abs(rate - $0) < abs(rate - $1) }),
           abs(rate - common) / common <= Self.snapTolerance { return common }
        return (rate * 1000).rounded() / 1000
    }
}
