import DequeModule

/// When each audio packet should leave, so that a publisher's bursts reach the browser as a
/// steady stream. ffmpeg's RTSP muxer writes audio in bursts of about 100 ms (and MPEG-TS muxers
/// group audio into PES packets of several frames); sent on as they came, Chromium's audio
/// jitter buffer took the bursts for network jitter and held 240–480 ms of audio on a link with
/// room to spare, and lip sync held the video as far back, in jumps that Chromium counts as
/// freezes.
///
/// A packet's lateness is its arrival less its media time (its RTP timestamp at the clock rate);
/// the least over the last `window` seconds is how early audio can arrive. A burst is the
/// packets that arrive together (within `together`), and its spread the media time it covers
/// less one packet's. Each packet is due at its media time plus the least lateness plus the
/// widest spread of the bursts before it in the window: the first packet of a burst leaves at
/// once, the last the spread later, and a steady publisher's audio is not held at all. A burst
/// that covers more than `maximumSpread` is a new viewer's cached audio, not the publisher's
/// cadence: it sets no spread, and (with none before it) leaves at once.
///
/// Pure: the caller says what time it is.
public struct AudioSmoother: Sendable {
    public static let window = 2.0
    public static let maximumSpread = 0.2
    static let together = 0.002

    private let clockRate: Double
    private var latenesses = Deque<(time: Double, lateness: Double)>()
    private var spreads = Deque<(time: Double, spread: Double)>()
    /// The burst arriving now: when it began, and the least and most media time in it.
    private var burst: (time: Double, first: Double, last: Double)?
    private var lastTimestamp: UInt32?
    private var unwrapped: Int64 = 0

    public init(clockRate: Int = 48_000) {
        self.clockRate = Double(clockRate)
    }

    /// When the packet stamped `timestamp` (RTP, at the clock rate), arriving at `now`, is due.
    public mutating func due(timestamp: UInt32, at now: Double) -> Double {
        if let last = lastTimestamp {
            // Forward or back by the signed difference: wraps, and a reordered packet, both read right.
            unwrapped += Int64(Int32(bitPattern: timestamp &- last))
        }
        lastTimestamp = timestamp
        let media = Double(unwrapped) / clockRate
        let lateness = now - media
        // A jump in the timeline (a new source) makes the old figures meaningless.
        if let newest = latenesses.last, abs(lateness - newest.lateness) > 5 {
            latenesses.removeAll()
            spreads.removeAll()
            burst = nil
        }
        if let current = burst, now - current.time <= Self.together {
            burst = (current.time, min(current.first, media), max(current.last, media))
        } else {
            if let ended = burst, ended.last - ended.first <= Self.maximumSpread { spreads.append((ended.time, ended.last - ended.first)) }
            burst = (now, media, media)
        }
        latenesses.append((now, lateness))
        while let first = latenesses.first, now - first.time > Self.window { latenesses.removeFirst() }
        while let first = spreads.first, now - first.time > Self.window { spreads.removeFirst() }
        let least = latenesses.reduce(Double.infinity) { min($0, $1.lateness) }
        let spread = spreads.reduce(0) { max($0, $1.spread) }
        return media + least + spread
    }
}
