import DequeModule

/// What one player's transport saw of its link at one moment. Every field is something a TCP
/// sender reads from `TCP_INFO` and its own queue, and something an RTP sender reads from its
/// receiver's feedback (RTCP receiver reports, or transport-wide congestion control for WebRTC),
/// so one estimator and one policy serve every kind of player.
public struct LinkObservation: Sendable, Equatable {
    /// Seconds on the caller's monotonic clock.
    public var time: Double
    /// Bytes the player has received since it started (TCP: `bytes_acked`; RTP: what its
    /// feedback says arrived). Only differences between observations are used.
    public var deliveredBytes: UInt64
    /// Data was waiting for the link when this was taken (queued by the node, or not yet sent by
    /// the kernel): the sender was not what limited delivery.
    public var senderWaiting: Bool
    /// How long the oldest media the player has not received has been on its way, seconds (0
    /// when everything sent has arrived): the lag the link adds, in media time, from the first
    /// packet on.
    public var backlogSeconds: Double
    /// The transport's own rate sample, bit/s (TCP's `delivery_rate`; a congestion controller's
    /// estimate), and whether the transport marked it limited by the sender.
    public var rateSample: Double?
    public var rateSampleAppLimited: Bool
    /// Packets lost since the last observation, as a fraction (0 where the transport hides loss, as TCP does).
    public var lossFraction: Double

    public init(time: Double, deliveredBytes: UInt64, senderWaiting: Bool, backlogSeconds: Double, rateSample: Double? = nil,
                rateSampleAppLimited: Bool = true, lossFraction: Double = 0) {
        self.time = time
        self.deliveredBytes = deliveredBytes
        self.senderWaiting = senderWaiting
        self.backlogSeconds = backlogSeconds
        self.rateSample = rateSample
        self.rateSampleAppLimited = rateSampleAppLimited
        self.lossFraction = lossFraction
    }
}

/// Turns a player's `LinkObservation`s into the samples `SwitchingPolicy` decides on. It holds
/// the last few seconds of observations and combines three measures, each with a known bias:
///
/// - **Delivered bytes over a window.** Exact about what arrived, but it says what the *link*
///   carries only while the sender had more to send; otherwise it is what the rung sent
///   (app-limited, "at least this much"). Over a short window a shaper's burst (a token bucket
///   that lets 16–64 KB through at once after a quiet spell) inflates it by the burst over the
///   window: 16 KB in 0.5 s reads 260 kbit/s too high. So what can move a player *up*
///   (`Sample.received`) is taken only over `evidenceSeconds` and `evidenceBytes`, enough for
///   several bursts of any such link, where a burst is a few percent.
/// - **The transport's rate sample** (TCP `delivery_rate`). Per acknowledgement, so a burst or
///   ACK compression makes it read several times the link (the 6.7 Mbit/s "measured" on a
///   1.3 Mbit/s link); app-limited samples read low. It never raises an estimate: it can only
///   hold one back (the up evidence is the smaller of the two), it fills in before any window
///   exists, and, being the freshest figure, it tells the moment an outage ends (which only
///   ever holds back a skip).
/// - **The backlog in media time.** Exact about lag, and the one sign that the rung does not
///   fit however the rates read, but blind to how much more the link would carry: an empty
///   backlog says only "this rung fits". Every move up also needs it empty (the policy's clean time).
///
/// So no one measure moves a player up: it takes received evidence over several bursts, a rate
/// sample that does not contradict it, and an empty backlog throughout.
public struct LinkEstimator: Sendable {
    /// The span (seconds) and bytes a rate must cover before it can move a player up.
    public var evidenceSeconds = 2.5
    public var evidenceBytes: UInt64 = 256 * 1024
    /// A run of observations with the sender waiting, at least this long, measures the link
    /// (for moves down, where a burst's overstatement only makes the move a little later).
    public var saturatedSeconds = 0.45
    public var saturatedWindow = 1.5
    /// How far back observations are kept (the longest window the evidence may stretch to).
    public var horizon = 6.0

    /// The most a sender should have outstanding to one player (written, not yet acknowledged),
    /// bytes: half a second of what the player received lately (before anything is known, of
    /// what is being sent), which covers a mobile link's round trip with room to spare, and never
    /// under 16 KB. While probing, a fifth of a second of the probe's rate: enough for it to get
    /// through, not so much that a link which cannot carry it holds the media behind it for long.
    /// Above the limit the sender keeps media in its own queue, where a flush or a skip can still
    /// drop it; what it already wrote waits in the kernel and in the path's queues (1000 packets
    /// are 1.5 MB: 9 s of a 1.4 Mbit/s link) and nothing takes it back.
    public static func outstandingLimit(receivedBitRate: Double?, sendingBitRate: Double, probing: Bool) -> Int {
        let bytesPerSecond = probing ? max(receivedBitRate ?? 0, sendingBitRate) / 8 * 0.4 : (receivedBitRate ?? sendingBitRate) / 8
        guard bytesPerSecond.isFinite, bytesPerSecond > 0 else { return 16 * 1024 }
        return max(16 * 1024, min(32 << 20, Int(bytesPerSecond / 2)))
    }

    private struct Point {
        var time: Double
        var delivered: UInt64
        var waiting: Bool
    }

    private var history = Deque<Point>()

    public init() {}

    /// The last few seconds' delivery rate, bit/s, over at least `seconds` (nil before there is such a span).
    public func receivedRate(over seconds: Double) -> Double? {
        guard let last = history.last, let first = history.last(where: { last.time - $0.time >= seconds }) else { return nil }
        return rate(from: first, to: last)
    }

    private func rate(from first: Point, to last: Point) -> Double? {
        let span = last.time - first.time
        guard span > 0, last.delivered >= first.delivered else { return nil }
        return Double(last.delivered - first.delivered) * 8 / span
    }

    public mutating func observe(_ observation: LinkObservation) -> SwitchingPolicy.Sample {
        let now = observation.time
        // A counter that went back (a new connection behind the same player) starts the history over.
        if let last = history.last, now <= last.time || observation.deliveredBytes < last.delivered { history.removeAll() }
        history.append(Point(time: now, delivered: observation.deliveredBytes, waiting: observation.senderWaiting))
        while let first = history.first, now - first.time > horizon { history.removeFirst() }

        // The link's rate: over the latest run in which the sender always had more to send, at
        // most its last `saturatedWindow` seconds, so an outage that ended does not weigh on a
        // link that is back.
        var runStart = history.count - 1
        while runStart > 0, history[runStart - 1].waiting, history[runStart].waiting, now - history[runStart - 1].time <= saturatedWindow {
            runStart -= 1
        }
        var estimate: Double?
        var appLimited = true
        if history[runStart].waiting, now - history[runStart].time >= saturatedSeconds {
            // A shaper's burst comes at the start of a run (its bucket fills only while the link
            // idles): once the run is long enough without its first interval, that is left out.
            let from = runStart + 1 < history.count - 1 && now - history[runStart + 1].time >= saturatedSeconds ? runStart + 1 : runStart
            estimate = rate(from: history[from], to: history[history.count - 1])
            appLimited = false
        } else {
            // Nothing saturated the link lately: what arrived says it carries at least that much.
            estimate = receivedRate(over: 1) ?? receivedRate(over: 0.2)
            if estimate == nil, let sample = observation.rateSample, sample.isFinite, sample > 0 {
                estimate = sample
                appLimited = observation.rateSampleAppLimited
            }
        }

        // What may move a player up: what arrived over several bursts of the link, held back by a
        // rate sample of the link that says less.
        var received: Double?
        if let last = history.last,
           let first = history.last(where: { last.time - $0.time >= evidenceSeconds && last.delivered &- $0.delivered >= evidenceBytes }) {
            received = rate(from: first, to: last)
        }
        if let evidence = received, let sample = observation.rateSample, sample.isFinite, sample > 0, !observation.rateSampleAppLimited {
            received = min(evidence, sample)
        }
        let latest = observation.rateSampleAppLimited ? nil : observation.rateSample
        return SwitchingPolicy.Sample(time: now, estimate: estimate, appLimited: appLimited, lossFraction: observation.lossFraction,
                                      backlogSeconds: observation.backlogSeconds, received: received, latestRate: latest)
    }
}
