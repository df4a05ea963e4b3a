/// A publisher's timestamps on one increasing timeline per track, for every ingest protocol: the
/// raw numbers wrap (RTMP's 32-bit milliseconds, MPEG-TS's 33-bit 90 kHz ticks, RTP's 32-bit
/// ticks), and an encoder that restarts starts its clock again.
///
/// Two kinds of clock:
/// - **Shared** (RTMP, MPEG-TS): audio and video are stamped from one clock in one unit. Each time
///   is placed by its distance from the latest seen on either track, taken modulo the wrap (so
///   wrap-around is invisible), and the first time is kept as it is.
/// - **Per track** (RTP): each track has its own rate and a random start, so the raw numbers of two
///   tracks say nothing about each other. Each track is placed by its distance from its own
///   latest, and its first time is where it arrived (`arrival`, seconds since the publish began),
///   so tracks line up as they came in.
///
/// A jump on one track, more than `maximumBackwardStep` seconds back or `maximumForwardStep`
/// forward from its own last time, is a new timeline (not B-frame reordering, not a wrap): every
/// track is re-anchored just after the furthest point any track reached, and the caller tells its
/// sink that a new timeline starts there.
public struct PublisherTimeline: Sendable {
    public enum Clock: Sendable {
        /// One clock for every track, at this many ticks per second.
        case shared(ticksPerSecond: Int64)
        /// A clock of its own for each track, at these ticks per second (by track number).
        case perTrack([Int64])
    }

    public let wrapBits: Int
    public let clock: Clock
    /// Seconds back from a track's last time that is a new timeline, not B-frame reordering.
    public static let maximumBackwardStep = 1.0
    /// Seconds forward from a track's last time that is a new timeline (a clock reset, a long pause).
    public static let maximumForwardStep = 5.0
    /// Seconds between the furthest time reached and a new timeline's start.
    static let restartGap = 0.1

    /// Per track (a shared clock keeps one reference, at index 0): the latest raw time seen and
    /// where it was placed.
    private var references: [Int: (raw: Int64, time: Int64)] = [:]
    private var last: [Int: Int64] = [:]
    /// Where every track starts again after a jump, in seconds (per-track clocks only).
    private var restartSeconds: Double?

    /// A shared clock: RTMP's milliseconds (`ticksPerSecond` 1000), MPEG-TS's 90 kHz.
    public init(wrapBits: Int, ticksPerSecond: Int64 = 1000) {
        self.init(wrapBits: wrapBits, clock: .shared(ticksPerSecond: max(1, ticksPerSecond)))
    }

    public init(wrapBits: Int, clock: Clock) {
        self.wrapBits = min(max(wrapBits, 8), 62)
        switch clock {
        case let .shared(rate): self.clock = .shared(ticksPerSecond: max(1, rate))
        case let .perTrack(rates): self.clock = .perTrack(rates.map { max(1, $0) })
        }
    }

    func ticksPerSecond(_ track: Int) -> Int64 {
        switch clock {
        case let .shared(rate): rate
        case let .perTrack(rates): rates.indices.contains(track) ? rates[track] : 1
        }
    }

    /// The signed distance from `b` to `a` modulo the wrap.
    func distance(_ a: Int64, from b: Int64) -> Int64 {
        let modulus = Int64(1) << wrapBits
        var step = (a &- b) % modulus
        if step >= modulus / 2 { step -= modulus } else if step < -modulus / 2 { step += modulus }
        return step
    }

    /// The seconds furthest along that any track reached.
    private var furthestSeconds: Double {
        last.map { Double($0.value) / Double(ticksPerSecond($0.key)) }.max() ?? 0
    }

    /// Where `raw` on `track` falls on the timeline, in that track's ticks, and whether a new
    /// timeline starts here. `arrival` (seconds since the publish began) places a per-track
    /// clock's first time; a shared clock ignores it.
    public mutating func place(_ raw: Int64, track: Int, arrival: Double = 0) -> (Int64, Bool) {
        let rate = ticksPerSecond(track)
        let key: Int
        switch clock {
        case .shared: key = 0
        case .perTrack: key = track
        }
        guard let reference = references[key] else {
            let time: Int64
            switch clock {
            case .shared: time = raw
            case .perTrack: time = Int64(((restartSeconds ?? arrival) * Double(rate)).rounded())
            }
            references[key] = (raw, time)
            last[track] = time
            return (time, false)
        }
        var time = reference.time &+ distance(raw, from: reference.raw)
        var restarted = false
        if let previous = last[track] {
            let step = Double(time - previous) / Double(rate)
            if step < -Self.maximumBackwardStep || step > Self.maximumForwardStep {
                switch clock {
                case .shared:
                    // The shared clock's furthest point is in this same unit.
                    time = (last.values.max() ?? previous) + max(1, Int64((Self.restartGap * Double(rate)).rounded()))
                case .perTrack:
                    let seconds = max(arrival, furthestSeconds + Self.restartGap)
                    restartSeconds = seconds
                    time = Int64((seconds * Double(rate)).rounded())
                }
                last = [:]
                references = [:]
                references[key] = (raw, time)
                restarted = true
            }
        }
        if !restarted, time > reference.time { references[key] = (raw, time) }
        last[track] = time
        return (time, restarted)
    }
}
