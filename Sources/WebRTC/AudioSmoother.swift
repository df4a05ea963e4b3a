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
/// packets that arrive together: within `together` of the one before, or faster than half real
/// time after it (the node encodes a burst's packets one by one, so a 0.3 s burst of MPEG-TS
/// audio reaches the pacer over several milliseconds); its spread is the media time it covers
/// less one packet's. Each packet is due at its media time plus the least lateness plus the
/// widest spread of the bursts in the window, the one arriving included: the first packet of a
/// burst leaves at once, the last the spread later, and a steady publisher's audio is not held
/// at all. A burst that covers more than `maximumSpread` is a stall's backlog, not the
/// publisher's cadence: it sets no spread, and what it brings past that leaves at once.
///
/// Pure: the caller says what time it is.
public struct AudioSmoother: Sendable {
    public static let window = 2.0
    /// libavformat's MPEG-TS muxer (ffmpeg and OBS over SRT) gathers audio into a PES packet
    /// until it holds 2,930 bytes or 0.35 s: 0.3 s bursts of 64 kbit/s AAC. Under 0.2 s here,
    /// those left unspread, and Chromium held 200-240 ms of audio (and lip sync the video with it).
    public static let maximumSpread = 0.4
    static let together = 0.002

    private let clockRate: Double
    private var latenesses = Deque<(time: Double, lateness: Double)>()
    private var spreads = Deque<(time: Double, spread: Double)>()
    /// The burst arriving now: when it began, when its latest packet came, and the least and
    /// most media time in it.
    private var burst: (time: Double, arrived: Double, first: Double, last: Double)?
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
        if let current = burst, now - current.arrived <= Self.together || now - current.arrived < (media - current.last) / 2 {
            burst = (current.time, now, min(current.first, media), max(current.last, media))
        } else {
            if let ended = burst, ended.last - ended.first <= Self.maximumSpread { spreads.append((ended.time, ended.last - ended.first)) }
            burst = (now, now, media, media)
        }
        latenesses.append((now, lateness))
        while let first = latenesses.first, now - first.time > Self.window { latenesses.removeFirst() }
        while let first = spreads.first, now - first.time > Self.window { spreads.removeFirst() }
        let least = latenesses.reduce(Double.infinity) { min($0, $1.lateness) }
        // The burst arriving counts too, so the first is spread as it comes (left unspread, it
        // taught Chromium's audio jitter buffer a delay it took ten seconds to unlearn). One
        // past `maximumSpread` is a stall's backlog: what it brings leaves at once.
        let arriving = burst.map { $0.last - $0.first } ?? 0
        guard arriving <= Self.maximumSpread else { return now }
        let spread = spreads.reduce(arriving) { max($0, $1.spread) }
        return media + least + spread
    }
}
