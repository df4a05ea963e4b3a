/// Decides, once per job, which source frames become IDRs and which start a media segment.
/// Every variant obeys the same decisions, so IDR times and segment boundaries are identical
/// across the ladder and an edge or player can switch at any segment.
public struct KeyframeGrid: Sendable {
    public enum Mode: Sendable, Hashable {
        /// The top variant is the publisher's own stream: IDRs at the source's keyframes, and
        /// a segment starts at the first source keyframe at least `minimumSegment` after the last.
        case followSource(minimumSegment: Double)
        /// IDRs every `interval` seconds of source time, measured from the first frame; each starts a segment.
        case interval(Double)
    }

    public struct Decision: Sendable, Hashable {
        public var isKeyframe: Bool
        public var startsSegment: Bool
        public init(isKeyframe: Bool, startsSegment: Bool) {
            self.isKeyframe = isKeyframe
            self.startsSegment = startsSegment
        }
        /// An ordinary frame: neither an IDR nor a segment start.
        public static let none = Decision(isKeyframe: false, startsSegment: false)
    }

    /// Timestamps are rounded by containers (FLV to the millisecond), so a frame up to this much
    /// before a grid point still counts as on it.
    public static let tolerance = 0.0015

    public let mode: Mode
    /// The first frame's time; the grid counts in its time base from then on.
    private var origin: MediaTime?
    private var nextGridTicks: Int64 = 0
    /// Follow-source mode: where the open segment started, in the origin's time base.
    private var segmentStartTicks: Int64 = 0
    private var intervalTicks: Int64 = 1
    private var minimumSegmentTicks: Int64 = 0
    private var toleranceTicks: Int64 = 0

    public init(mode: Mode) {
        self.mode = mode
    }

    /// - Parameters:
    ///   - time: the frame's presentation time (any origin; must not decrease).
    ///   - isSourceKeyframe: whether the publisher coded this frame as a keyframe.
    public mutating func decide(time: MediaTime, isSourceKeyframe: Bool) -> Decision {
        guard let origin else {
            start(at: time)
            return Decision(isKeyframe: true, startsSegment: true)
        }
        // In the first frame's time base, so grid points are whole ticks and never drift.
        let ticks = time.ticks(in: origin.timeBase)
        switch mode {
        case .followSource:
            // The very first frame is kept as a keyframe even if the source starts mid-GOP:
            // encoded variants need an IDR to start, and the passthrough top waits for one anyway.
            let starts = isSourceKeyframe && ticks &- segmentStartTicks >= minimumSegmentTicks &- toleranceTicks
            if starts { segmentStartTicks = ticks }
            return Decision(isKeyframe: isSourceKeyframe, startsSegment: starts)
        case .interval:
            let relative = ticks &- origin.ticks
            guard relative >= nextGridTicks &- toleranceTicks else { return .none }
            nextGridTicks = ((relative &+ toleranceTicks) / intervalTicks &+ 1) &* intervalTicks
            return Decision(isKeyframe: true, startsSegment: true)
        }
    }

    private mutating func start(at time: MediaTime) {
        origin = time
        segmentStartTicks = time.ticks
        let base = time.timeBase
        toleranceTicks = MediaTime(seconds: Self.tolerance, timeBase: base).ticks
        switch mode {
        case let .followSource(minimumSegment):
            minimumSegmentTicks = MediaTime(seconds: minimumSegment, timeBase: base).ticks
        case let .interval(interval):
            intervalTicks = max(1, MediaTime(seconds: interval, timeBase: base).ticks)
            nextGridTicks = intervalTicks
        }
    }

    /// Makes the next frame a keyframe that starts a segment, e.g. after a publisher resumes.
    public mutating func forceNextKeyframe() {
        origin = nil
    }
}
