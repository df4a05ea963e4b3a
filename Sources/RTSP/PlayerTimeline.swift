/// One player's media timeline, in 90 kHz ticks.
///
/// A joining player gets the cached GOP first, so its first picture is decodable at once, and
/// gets it faster than real time ("catch-up"), so it reaches the live edge within a fraction of a
/// GOP. Timestamps must then match how the packets arrive: a player that derives timing from
/// arrival (GStreamer's rtpjitterbuffer in its default mode) gives pictures that arrive ahead of
/// their timestamps no usable time. So while catching up, output time advances at 1/`speed` of
/// the source's, as fast as the pictures are sent; once caught up it advances with the source,
/// shifted by what the catch-up saved. Audio, which joins only then, takes the same shift.
public struct PlayerTimeline: Sendable, Equatable {
    public let speed: Int64
    private var anchor: (source: Int64, output: Int64)?
    public private(set) var isCatchingUp = true
    /// Source minus output ticks once caught up.
    public private(set) var shift: Int64 = 0

    public init(speed: Int64 = 8) {
        self.speed = max(1, speed)
    }

    public static func == (lhs: PlayerTimeline, rhs: PlayerTimeline) -> Bool {
        lhs.speed == rhs.speed && lhs.anchor?.source == rhs.anchor?.source && lhs.anchor?.output == rhs.anchor?.output
            && lhs.isCatchingUp == rhs.isCatchingUp && lhs.shift == rhs.shift
    }

    /// Output ticks for a picture at `source` ticks; the first picture keeps its own time.
    public mutating func video(_ source: Int64) -> Int64 {
        guard let anchor else {
            anchor = (source, source)
            return source
        }
        guard isCatchingUp else { return source &- shift }
        return anchor.output &+ (source &- anchor.source) / speed
    }

    /// Where output time would put `source` without changing anything: for scheduling.
    public func peekVideo(_ source: Int64) -> Int64 {
        var copy = self
        return copy.video(source)
    }

    /// The last picture held back for catch-up has been sent; from now on time runs at the source's pace.
    /// - Parameter lastSource: that picture's source ticks.
    public mutating func finishCatchUp(lastSource: Int64?) {
        guard isCatchingUp else { return }
        if let lastSource, anchor != nil { shift = lastSource &- peekVideo(lastSource) }
        isCatchingUp = false
    }

    /// Output ticks for audio at `ticks` in `rate` units (only sent once caught up).
    public func audio(_ ticks: Int64, rate: Int) -> Int64 {
        guard rate > 0 else { return ticks }
        return ticks &- shift.multipliedReportingOverflow(by: Int64(rate)).partialValue / 90000
    }
}
