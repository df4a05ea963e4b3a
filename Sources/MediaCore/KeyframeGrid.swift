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
    private var origin: Double?
    private var nextGridTime = 0.0
    private var segmentStart = -Double.infinity

    public init(mode: Mode) {
        self.mode = mode
    }

    /// - Parameters:
    ///   - time: the frame's presentation time in seconds (any origin; must not decrease).
    ///   - isSourceKeyframe: whether the publisher coded this frame as a keyframe.
    public mutating func decide(time: Double, isSourceKeyframe: Bool) -> Decision {
        let first = origin == nil
        if first { origin = time }
        switch mode {
        case let .followSource(minimumSegment):
            // The very first frame is kept as a keyframe even if the source starts mid-GOP:
            // encoded variants need an IDR to start, and the passthrough top waits for one anyway.
            let isKeyframe = isSourceKeyframe || first
            let starts = isKeyframe && (first || time - segmentStart >= minimumSegment - Self.tolerance)
            if starts { segmentStart = time }
            return Decision(isKeyframe: isKeyframe, startsSegment: starts)
        case let .interval(interval):
            let relative = time - origin!
            guard first || relative >= nextGridTime - Self.tolerance else {
                return Decision(isKeyframe: false, startsSegment: false)
            }
            nextGridTime = ((relative + Self.tolerance) / interval).rounded(.down) * interval + interval
            segmentStart = time
            return Decision(isKeyframe: true, startsSegment: true)
        }
    }

    /// Makes the next frame a keyframe that starts a segment, e.g. after a publisher resumes.
    public mutating func forceNextKeyframe() {
        origin = nil
        nextGridTime = 0
        segmentStart = -Double.infinity
    }
}
