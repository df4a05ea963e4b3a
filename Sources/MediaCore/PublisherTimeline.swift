/// A publisher's timestamps on one increasing timeline, for protocols that carry them as raw
/// numbers that wrap (RTMP's 32-bit milliseconds, MPEG-TS's 33-bit 90 kHz ticks).
///
/// Audio and video share the sender's clock: each time is placed by its distance from the latest
/// seen on either track, taken modulo the wrap (so wrap-around is invisible). A jump on one track,
/// more than `maximumBackwardStep` back or `maximumForwardStep` forward from its own last time (an
/// encoder restarted its clock), is re-anchored just after the furthest point reached: a new
/// timeline starts there, and the caller says so to its sink.
public struct PublisherTimeline: Sendable {
    public let wrapBits: Int
    /// In the raw ticks' unit: 1 s back and 5 s forward at `ticksPerSecond`.
    public let maximumBackwardStep: Int64
    public let maximumForwardStep: Int64
    let gap: Int64

    private var reference: (raw: Int64, time: Int64)?
    private var last: [Int: Int64] = [:]

    public init(wrapBits: Int, ticksPerSecond: Int64 = 1000) {
        self.wrapBits = min(max(wrapBits, 8), 62)
        maximumBackwardStep = ticksPerSecond
        maximumForwardStep = 5 * ticksPerSecond
        gap = max(1, ticksPerSecond / 10)
    }

    /// The signed distance from `b` to `a` modulo the wrap.
    func distance(_ a: Int64, from b: Int64) -> Int64 {
        let modulus = Int64(1) << wrapBits
        var step = (a &- b) % modulus
        if step >= modulus / 2 { step -= modulus } else if step < -modulus / 2 { step += modulus }
        return step
    }

    /// Where `raw` on `track` falls on the timeline, and whether a new timeline starts here.
    public mutating func place(_ raw: Int64, track: Int) -> (Int64, Bool) {
        guard let reference else {
            self.reference = (raw, raw)
            last[track] = raw
            return (raw, false)
        }
        var time = reference.time &+ distance(raw, from: reference.raw)
        var restarted = false
        if let previous = last[track], time - previous < -maximumBackwardStep || time - previous > maximumForwardStep {
            time = (last.values.max() ?? previous) + gap
            last = [:]
            self.reference = (raw, time)
            restarted = true
        } else if time > reference.time {
            self.reference = (raw, time)
        }
        last[track] = time
        return (time, restarted)
    }
}
