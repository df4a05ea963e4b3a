/// One player's media timeline, in 90 kHz ticks.
///
/// A joining player gets the cached GOP first, so its first picture is decodable at once, and
/// gets it faster than real time ("catch-up"), so it reaches the live edge within a fraction of a
/// GOP. Timestamps must then match how the packets arrive: a player that derives timing from
/// arrival (GStreamer's rtpjitterbuffer in its default mode) gives pictures that arrive ahead of
/// their timestamps no usable time. So while catching up, output time advances at 1/`speed` of
/// the source's, as fast as the pictures are sent; once caught up it advances with the source,
/// shifted by what the catch-up saved. Audio, which joins only then, takes the same shift. A
/// catch-up that its transport paces instead (a WebRTC viewer's pacer, at its link's pace) is
/// timed as each picture is handed over (`video(_:handedOverAfter:)`).
public struct PlayerTimeline: Sendable, Equatable {
    public let speed: Int64
    private var anchor: (source: Int64, output: Int64)?
    public private(set) var isCatchingUp = true
    /// Source minus output ticks once caught up.
    public private(set) var shift: Int64 = 0
    /// The output ticks of the last picture timed.
    private var lastOutput: Int64?

    public init(speed: Int64 = 8) {
        self.speed = max(1, speed)
    }

    public static func == (lhs: PlayerTimeline, rhs: PlayerTimeline) -> Bool {
        lhs.speed == rhs.speed && lhs.anchor?.source == rhs.anchor?.source && lhs.anchor?.output == rhs.anchor?.output
            && lhs.isCatchingUp == rhs.isCatchingUp && lhs.shift == rhs.shift && lhs.lastOutput == rhs.lastOutput
    }

    /// Output ticks for a picture at `source` ticks; the first picture keeps its own time.
    public mutating func video(_ source: Int64) -> Int64 {
        guard let anchor else {
            anchor = (source, source)
            lastOutput = source
            return source
        }
        guard isCatchingUp else { return source &- shift }
        let output = anchor.output &+ (source &- anchor.source) / speed
        lastOutput = output
        return output
    }

    /// Output ticks for a picture of a catch-up that a transport paces (a WebRTC viewer's pacer
    /// sends it at its link's pace, not at `speed`): time advances as the pictures are handed
    /// over, `elapsed` ticks after the catch-up began, and at least a tick a picture. A browser
    /// fits its clock to when pictures arrive: a catch-up whose timestamps ran at an eighth of real
    /// time while its link took a second to deliver it taught Chromium that RTP time runs slow,
    /// and it then held the live pictures after it for seconds (run BK).
    public mutating func video(_ source: Int64, handedOverAfter elapsed: Int64) -> Int64 {
        guard let anchor, isCatchingUp else { return video(source) }
        let output = max(anchor.output &+ elapsed, (lastOutput ?? anchor.output) &+ 1)
        lastOutput = output
        return output
    }

    /// The last picture held back for catch-up has been sent; from now on time runs at the source's pace.
    /// - Parameter lastSource: that picture's source ticks.
    public mutating func finishCatchUp(lastSource: Int64?) {
        guard isCatchingUp else { return }
        if let lastSource, let lastOutput { shift = lastSource &- lastOutput }
        isCatchingUp = false
    }

    /// The catch-up ends early, at `source` (the IDR of a rung the player moves to), `elapsed`
    /// ticks after the last picture was handed over: time goes on from there as the wall clock
    /// did, not as far as the source skipped, so the picture is not dated ahead of its arrival.
    public mutating func finishCatchUp(continuingAt source: Int64, after elapsed: Int64) {
        guard isCatchingUp else { return }
        if let lastOutput { shift = source &- (lastOutput &+ max(1, elapsed)) }
        isCatchingUp = false
    }

    /// Output ticks for audio at `ticks` in `rate` units (only sent once caught up).
    public func audio(_ ticks: Int64, rate: Int) -> Int64 {
        guard rate > 0 else { return ticks }
        return ticks &- shift.multipliedReportingOverflow(by: Int64(rate)).partialValue / 90000
    }
}
