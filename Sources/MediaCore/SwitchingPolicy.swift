/// Which rung of a ladder one player gets as its link changes: a value fed samples of what the
/// transport measured, on the caller's clock, returning decisions. It knows nothing of sockets,
/// so it is tested by replaying bandwidth traces without sleeping (`TraceReplay`).
///
/// Its thresholds are the bandwidth hints' own (`BandwidthHints.VariantHint`): a player stays on a
/// rung while its estimate is at least that rung's `downswitchBelowBitRate`, and moves up to a
/// rung once its estimate is at least that rung's `upswitchAboveBitRate`, so the hints a node
/// publishes are exactly what moves its players.
///
/// - **Down, fast and as far as needed.** A sample whose estimate (measured while the sender
///   waited) is below the rung's down threshold while media waits (`downBacklog`) counts as bad,
///   and so does loss of `lossForDown` or more. After `downHold` seconds of bad samples, or at
///   once when the estimate falls under `shortfall` of the rung's rate (not on the reading right
///   after one over the down threshold: a burst's debt; two samples in a row under half of it,
///   whatever waits) or the player's backlog passes `backlogForDown` seconds, the
///   player moves to the highest rung the best of those bad samples carries, several rungs at a
///   time when the link collapsed. A backlog the new rung would drain only slowly is dropped with
///   the move (`slowDrainSeconds`).
/// - **Up, by evidence and one rung at a time.** After `upHold` clean seconds (no bad sample, a
///   small backlog), a player that *received* the next rung's up threshold over the last seconds
///   (`Sample.received`, which spans several bursts of the link) moves up. A transport that sends
///   only what the rung needs receives no more than that, so the policy first asks for a probe at
///   the next rung's threshold (`probe`: padding, or a burst) and judges what arrived over its
///   last seconds, with the backlog empty. No rate sample, however high, moves a player up, and
///   no move lands more than `upMargin` above what the player received.
/// - **Backoff.** A move up followed by a move down within `failedUpWindow` seconds (the player
///   saw it) doubles the clean time needed before the next try, up to `maximumUpHold`, unless the
///   link then read under what the rung climbed from needs (the link fell, not the climb); a rung held
///   for `failedUpWindow` after a move up brings it back to `upHold`. A probe that found too
///   little (the player saw nothing) only spaces the next probe out, up to `maximumProbeHold`, so
///   a link that recovers is found within seconds. An outage's end forgets both, and may ask
///   less clean time before the first climb after it (`holdAfterOutage`).
/// - **Live, whatever the link.** When even the lowest rung's backlog passes `maximumLag`
///   seconds on two samples in a row and the link does not carry it, the player skips to that rung's next IDR
///   (`skipToLiveEdge`) instead of falling further behind. Once the link carries the rung again
///   the backlog drains on its own and the skipping stops.
public struct SwitchingPolicy: Sendable {
    /// One rung as the policy needs it: level 1 is the top.
    public struct Rung: Sendable, Equatable {
        public var level: Int
        /// The rate the player needs on it (bit/s): the hints' required rate.
        public var bitRate: Int
        public var upswitchAbove: Int
        public var downswitchBelow: Int
        /// The rung's real segments' bit rates, in order (one per keyframe interval), for replays
        /// that send what was really encoded; empty: `bitRate` throughout.
        public var segmentBitRates: [Double] = []

        public init(level: Int, bitRate: Int, upswitchAbove: Int, downswitchBelow: Int, segmentBitRates: [Double] = []) {
            self.level = level
            self.bitRate = bitRate
            self.upswitchAbove = upswitchAbove
            self.downswitchBelow = downswitchBelow
            self.segmentBitRates = segmentBitRates.filter { $0.isFinite && $0 > 0 }
        }

        /// What the rung sends at `time`: its segment's rate (segments repeat), or its bit rate.
        public func bitRate(at time: Double, segmentDuration: Double) -> Double {
            guard !segmentBitRates.isEmpty, segmentDuration > 0 else { return Double(bitRate) }
            let index = Int(max(0, time) / segmentDuration) % segmentBitRates.count
            return segmentBitRates[index]
        }

        /// A variant's rung: its thresholds, and the rate they were derived from. The threshold
        /// is `ceil(required / factor)`, so `required ≤ threshold × factor < required + factor`:
        /// rounding down gives the rate back (rounding to nearest gave one more at 0.9).
        public init(hint: BandwidthHints.VariantHint) {
            self.init(level: hint.abrLevel, bitRate: Int((Double(hint.upswitchAboveBitRate) * BandwidthHints.upswitchFactor + 1e-6).rounded(.down)),
                      upswitchAbove: hint.upswitchAboveBitRate, downswitchBelow: hint.downswitchBelowBitRate)
        }

        /// The rungs of a ladder's hints, top first.
        public static func ladder(_ hints: BandwidthHints) -> [Rung] {
            hints.variants.sorted { $0.abrLevel < $1.abrLevel }.map(Rung.init(hint:))
        }

        /// The rung as a link that also carries `cost` sees it: every rate the policy compares
        /// with an estimate of the whole link, so the estimate and the rung count the same bytes.
        public func carrying(_ cost: LinkCost) -> Rung {
            guard cost != .none else { return self }
            func onTheWire(_ rate: Int) -> Int { Int((Double(rate) * cost.videoFactor + cost.besides).rounded(.up)) }
            return Rung(level: level, bitRate: onTheWire(bitRate), upswitchAbove: onTheWire(upswitchAbove),
                        downswitchBelow: onTheWire(downswitchBelow),
                        segmentBitRates: segmentBitRates.map { $0 * cost.videoFactor + cost.besides })
        }
    }

    /// What a player's link carries for a rung beyond the rung's video (whose rates the hints
    /// give): the video's headers and encryption, and the audio sent all the while. A WebRTC
    /// viewer's estimate counts every SRTP byte, Opus at 50 packets a second included (about
    /// 90 kbit/s on the wire for 64 kbit/s of audio): against the video's rates alone, a
    /// 568 kbit/s link read as carrying a 500 kbit/s rung it did not, and the viewer froze until
    /// a second move down.
    public struct LinkCost: Sendable, Equatable {
        /// Bytes on the wire per byte of video payload (1: the estimate counts payload only).
        public var videoFactor: Double
        /// What the player gets beside the video all the time (bit/s).
        public var besides: Double

        public static let none = LinkCost(videoFactor: 1, besides: 0)

        /// Nonsense (a factor under 1, a negative rate, NaN) counts as no cost.
        public init(videoFactor: Double, besides: Double) {
            self.videoFactor = videoFactor.isFinite && videoFactor >= 1 && videoFactor < 2 ? videoFactor : 1
            self.besides = besides.isFinite && besides > 0 ? besides : 0
        }
    }

    /// What the transport says about one player's link at one moment.
    public struct Sample: Sendable, Equatable {
        /// Seconds on the caller's monotonic clock.
        public var time: Double
        /// What the link delivers (bit/s): TCP's delivery rate, or what RTCP reports imply; nil
        /// when the transport has not measured anything yet.
        public var estimate: Double?
        /// The sender had nothing more to send while measuring: the link may carry more than the estimate.
        public var appLimited: Bool
        /// Packets lost since the last sample, as a fraction (RTCP's fraction lost; 0 on TCP).
        public var lossFraction: Double
        /// Media the player has been sent but not received, in seconds of media.
        public var backlogSeconds: Double
        /// What the player received over the last few seconds (bit/s), over enough time and bytes
        /// to span several bursts of a shaped link (`LinkEstimator`); nil until there is such a
        /// span. The only figure that can move a player up, and the ceiling of any move up.
        public var received: Double?
        /// The transport's freshest rate sample (bit/s: TCP's `delivery_rate`), nil when it was
        /// limited by the sender. A burst can inflate it several times, so it never moves a
        /// player; it only says, the moment an outage ends, that the link carries data again.
        public var latestRate: Double?
        /// Seconds before `time` that the sample's loss and backlog speak for (0: a moment). A
        /// receiver report covers the seconds since the one before: ffmpeg, which reports after
        /// each 280 KB it receives, sends one every 7 s on a 300 kbit/s rung. Counting clean time
        /// only from each report's arrival held such a player on its lowest rung for 30–60 s
        /// after its link came back (two clean reports before a probe could start).
        public var covers: Double

        public init(time: Double, estimate: Double?, appLimited: Bool = false, lossFraction: Double = 0, backlogSeconds: Double = 0,
                    received: Double? = nil, latestRate: Double? = nil, covers: Double = 0) {
            self.covers = covers.isFinite ? max(0, covers) : 0
            self.latestRate = latestRate
            self.time = time
            self.estimate = estimate
            self.appLimited = appLimited
            self.lossFraction = lossFraction
            self.backlogSeconds = backlogSeconds
            self.received = received
        }
    }

    public enum Decision: Sendable, Equatable {
        case stay
        /// Switch to this level at its next IDR. With `flush`, what is queued for the player and
        /// not sent yet is dropped at once and nothing more of the old rung is sent: a player that
        /// is already behind gets the new rung from its next IDR instead of the backlog first.
        case switchTo(level: Int, flush: Bool, reason: String)
        /// Send extra (padding, or a burst) up to this rate for `probeDuration` seconds, so the
        /// next samples measure whether the link carries the next rung.
        case probe(bitRate: Int)
        /// Drop what is queued and go on from the current rung's next IDR.
        case skipToLiveEdge
    }

    public var downHold = 1.0
    public var lossForDown = 0.10
    public var lossForClean = 0.02
    public var backlogForDown = 1.0
    public var upHold = 6.0
    public var maximumUpHold = 30.0
    public var maximumProbeHold = 8.0
    /// A move down drops the backlog when the new rung would take longer than this to drain it.
    public var slowDrainSeconds = 1.5
    /// A saturated estimate under this share of the rung's rate moves the player down at once.
    public var shortfall = 0.8
    public var failedUpWindow = 10.0
    /// Long enough for the received rate's window (`LinkEstimator.evidenceSeconds`) to lie inside it.
    public var probeDuration = 3.0
    /// A move up lands at most this far above what the player received lately.
    public var upMargin = 0.1

    public var maximumLag = 2.0
    /// Backlog below which a low estimate does not count against the rung (seconds).
    public var downBacklog = 0.15
    /// Backlog above which a sample is not clean (seconds of media).
    public var cleanBacklog = 0.3
    /// Backlog at which a probe ends: the link is full. A TCP sender's probe keeps a fifth of a
    /// second of its rate outstanding (`LinkEstimator.outstandingLimit`), all of it queued at a
    /// bottleneck that carries a little less than the probe, and the media written after it waits
    /// behind it in the socket. Ended at `cleanBacklog`, that allowance alone ended probes after
    /// about a second on links that carried 1.5–1.7 Mbit/s against a 1.385 Mbit/s threshold,
    /// before the received evidence spanned any of the probe: a reader stayed on 500 kbit/s for
    /// 20 s the oracle spent on 1 Mbit/s. A probe that cannot succeed still ends at
    /// `cleanBacklog` (the link reads full well under its threshold). Transports whose probe is
    /// judged on reports or per-packet feedback set it to `cleanBacklog` (`AdaptationProfile`).
    public var probeBacklogLimit = 0.7

    /// What a probe offers, over the target's required rate: 1.41 × the up threshold (1/0.9 of
    /// the required rate). What the probe is judged on spans seconds that begin before the
    /// padding flows (and the rung's real rate wanders under its required rate), so a probe
    /// offering the threshold plus 10 % received 670–770 kbit/s of a 752 kbit/s threshold on
    /// links carrying twice that. Offering more costs nothing on a link that cannot carry it:
    /// padding waits behind the media and is dropped when the probe ends. The figure is what
    /// the probe offered when the threshold was 1/0.8 (a quarter over it); a quarter over the
    /// lower threshold passed more probes on links that then froze the player (200 replays:
    /// freezes 4.0 → 6.9 s in all, two replays over a second).
    static let probeOffer = 1.5625

    public private(set) var rungs: [Rung]
    public private(set) var level: Int
    public private(set) var switches = 0
    /// The policy's current view of the link (bit/s), for status.
    public private(set) var estimate: Double?

    private var badSince: Double?
    /// Since `badSince`: consecutive samples under half the rung's rate, and the best estimate.
    private var collapsedSamples = 0
    /// Since `badSince`: consecutive samples under `shortfall` of the rung's rate.
    private var shortSamples = 0
    /// The last bad sample read short but was given the benefit of the doubt: the next short one counts.
    private var shortDoubted = false
    /// When the player last moved (unlike `settledAt`, which a probe's end also pushes back).
    private var lastMoveAt = -Double.infinity
    private var bestWhileBad: Double?
    /// Since `badSince`: every measurement was the transport's freshest rate sample alone.
    private var measuredOnlyByLatest = true
    private var cleanSince: Double?
    /// When the last evidence that was not clean (or a move, a skip) ended: a clean stretch that
    /// a sample covers back in time starts no earlier.
    private var uncleanAt = -Double.infinity
    private var currentUpHold = 6.0
    private var probeHold = 6.0
    private var lastUp: (time: Double, from: Int)?
    /// A probe under way: the rung it must show the link carries (the next one up), and the
    /// highest it offers enough for (`probeReach`).
    private var probe: (level: Int, started: Double, until: Double, best: Double, aimed: Int)?
    private var lastSkip: Double?
    private var previousBacklog: Double?
    /// The previous sample's estimate of the full link (nil when it was app-limited).
    private var previousSaturated: Double?
    /// Until then, the backlog left by the last move is not held against the new rung.
    private var settledAt = -Double.infinity
    /// Seconds a move gives the old rung's queued media to drain. The old rung goes on until the
    /// target's IDR (up to a keyframe interval), and what it queued drains only as fast as the
    /// link outruns the new rung; lag stays bounded meanwhile by `maximumLag`, and the estimate
    /// still moves the player on at once if the link collapses.
    public var settleTime = 6.0
    /// Seconds after a probe ended (or a move down) during which loss is still the probe's (or the
    /// old rung's) doing: what it overfilled in the bottleneck's queue is reported lost for about
    /// as long as feedback takes to come back.
    public var probeAftermath = 1.5
    private var probeAftermathUntil = -Double.infinity
    /// Seconds from the first sample during which loss is the catch-up's doing: a new player gets
    /// the cached GOP from its IDR faster than live, which overfills a narrow link's queue for
    /// about a second (a viewer on a 2.6 Mbit/s link was moved off a 2 Mbit/s top it carried on
    /// 43 % "loss" in its second second). Backlog and a saturated estimate still move it at once.
    public var catchUpAftermath = 2.5
    private var firstSample: Double?
    /// Whether the transport's rates come from each packet's arrival (transport-wide feedback)
    /// rather than from acknowledgements, which a TCP reader sends late and compressed in bursts.
    /// Such rates speak for the link in two more places:
    /// - A probe that filled the link (its queue built, nothing lost) is judged on the rate the
    ///   link delivered while full, its capacity, rather than failing. A link that carries the
    ///   next rung with its margin but not the probe's quarter more otherwise never sees a probe
    ///   succeed: Chromium on a 3G trace window carrying 1.4–1.6 Mbit/s stayed on 500 kbit/s for a
    ///   minute, each probe to the 1 Mbit/s rung (threshold 1.38 Mbit/s) ending with 0.3 s queued
    ///   and 1.5 Mbit/s delivered. TCP keeps judging on received evidence over seconds
    ///   (`Sample.received`). A full link has no tokens left to burst with, and the estimator
    ///   leaves out a saturated run's first interval, where a burst would be.
    /// - The freshest rate sample (`Sample.latestRate`) alone can say that a link fell under the
    ///   rung a player climbed from (see `moveDown`); a TCP reader's can read half its link.
    public var ratesFromArrivals = false
    /// How many rungs above the current one a probe offers enough for, so that one probe can
    /// move a player that far (1: the next rung only). A viewer climbing a rung at a time needs
    /// its clean hold and a probe for each: on a 3G window whose link carried 1.6–2 Mbit/s for
    /// 17 s after a starved start, Chromium went from 240p to 360p 13–18 s in and no further.
    /// Worth it where a probe that cannot succeed costs the media little: WebRTC's pacer holds a
    /// probe's queue at 0.06 s.
    public var probeReach = 1
    /// The clean time asked before the first move up or probe after an outage (the player
    /// skipped to its rung's live edge; nil: `upHold`). A 3G
    /// link that comes back from an outage mostly comes back whole: on a window whose link carried
    /// 27 kbit/s for 5 s and then 1.6–2.1 Mbit/s for 17 s, a Chromium viewer held 240p for 10 s of
    /// them (6 s clean, a 4 s probe). Worth it where a probe that finds too little costs the media
    /// little (WebRTC's ramped probe, its queue held short).
    public var holdAfterOutage: Double?
    /// The least a probe lasts before a sample that covers it alone may judge it (seconds).
    static let minimumProbe = 3.0
    private var lastMoveWasDown = false
    /// When the last move landed, as its caller saw it (`landed(at:)`).
    private var landedAt = -Double.infinity

    /// - Parameters:
    ///   - rungs: the ladder, in any order (level 1 is the top).
    ///   - level: where the player starts (the level it asked for).
    public init(rungs: [Rung], startingAt level: Int) {
        self.rungs = rungs.sorted { $0.level < $1.level }
        self.level = self.rungs.contains { $0.level == level } ? level : (self.rungs.last?.level ?? level)
        currentUpHold = upHold
        probeHold = upHold
    }

    /// New hints (measurements came in): the thresholds change, the player's level does not.
    public mutating func update(rungs: [Rung]) {
        guard !rungs.isEmpty else { return }
        self.rungs = rungs.sorted { $0.level < $1.level }
        if !self.rungs.contains(where: { $0.level == level }) { level = self.rungs.last!.level }
    }

    private var current: Rung { rungs.first { $0.level == level } ?? rungs.last! }
    private var lowest: Rung { rungs.last! }
    private var nextUp: Rung? { rungs.last { $0.level < level } }

    /// The highest rung an estimate keeps a player on.
    /// Where a move down lands: the highest rung whose required rate the estimate covers. The
    /// down threshold's margin decides *when* a rung is left; landing by it too would skip a rung
    /// the link carries, every time the estimate falls within that margin of it (a saturated
    /// link reads a few percent under its nominal rate: headers, retransmissions). Should the
    /// rung not fit after all, its backlog grows and moves the player on.
    private func highestCarried(by estimate: Double) -> Rung {
        rungs.first { Double($0.bitRate) <= estimate } ?? lowest
    }

    public mutating func observe(_ sample: Sample) -> Decision {
        // A transport's figures come from the network (RTCP can be forged): nonsense counts as nothing.
        var sample = sample
        if let value = sample.estimate, !value.isFinite || value < 0 { sample.estimate = nil }
        if let value = sample.received, !value.isFinite || value < 0 { sample.received = nil }
        sample.lossFraction = sample.lossFraction.isFinite ? min(1, max(0, sample.lossFraction)) : 0
        sample.backlogSeconds = sample.backlogSeconds.isFinite ? max(0, sample.backlogSeconds) : 0
        let now = sample.time
        guard now.isFinite else { return .stay }
        if firstSample == nil {
            firstSample = now
            probeAftermathUntil = max(probeAftermathUntil, now + catchUpAftermath)
        }
        // An app-limited sample says only that the link carries at least that much.
        if let measured = sample.estimate, !sample.appLimited || measured > (estimate ?? 0) { estimate = measured }

        // A probe's padding fills the link on top of the media, so what it reads is no sign of a burst.
        let probingBefore = probe != nil
        defer {
            previousBacklog = sample.backlogSeconds
            previousSaturated = sample.appLimited || probingBefore ? nil : sample.estimate
        }
        // Live first: a player this far behind on the lowest rung skips ahead.
        if sample.backlogSeconds > maximumLag {
            if level == lowest.level {
                guard lastSkip.map({ now - $0 >= maximumLag }) ?? true else { return .stay }
                // A link that carries the rung again drains the backlog by itself (the oldest media
                // waiting gets younger): skipping then would only throw away the media it is about
                // to deliver. Skip only while the backlog still grows.
                // One sample over the limit may be the last of an outage that just ended: a skip
                // needs two in a row, the backlog still growing.
                guard let previous = previousBacklog, previous > maximumLag, sample.backlogSeconds >= previous - 0.05 else { return .stay }
                if let latest = sample.latestRate, latest.isFinite, latest >= Double(current.bitRate) * 1.2 { return .stay }
                lastSkip = now
                badSince = now
                cleanUntil(now)
                return .skipToLiveEdge
            }
            return moveDown(to: lower(sample.estimate.map(highestCarried)), now: now, flush: true,
                            reason: "\(format(sample.backlogSeconds)) s behind live", linkRead: sample.appLimited ? nil : sample.estimate)
        }

        // A rate measured while the sender waited reads low when the queue emptied between two
        // looks (a keyframe's burst drained, then small pictures): on its own it says little. It
        // counts against the rung only while media is actually waiting (`downBacklog`), the sign
        // the link falls behind; a collapse to under half the rung counts at once.
        var measured = sample.appLimited ? nil : sample.estimate
        if let rate = measured, rate >= Double(current.bitRate) / 2, sample.backlogSeconds < downBacklog { measured = nil }
        // A sample that covers seconds from before the last move landed (a UDP player's first
        // receiver report after it) measured the old rung's pictures until the new rung's IDR,
        // and that IDR still in flight: its rate says nothing of the new rung. Such a report, the
        // old 300 kbit/s rung and then 480p's IDR, read 576 kbit/s with 0.2 s on the path, and
        // moved an ffmpeg player straight back down from the 480p a probe had just shown its link
        // carried (and the failed move doubled its next hold).
        if sample.covers > 0, now - sample.covers < landedAt - 0.05 { measured = nil }
        // A link that fell a moment ago has no saturated run long enough to be measured yet, but
        // its media queue grows and the transport's freshest rate sample of the full link reads
        // it: together, and well under the rung, they speak for the link half a second sooner (a
        // burst or ACK compression makes such a sample read high, never low). Waiting for the
        // saturated run, a player on a 3G link that fell from 1.5 Mbit/s to 570 kbit/s under a
        // 1.1 Mbit/s rung missed the grid IDR just after it and froze for a keyframe interval.
        var measuredByLatest = false
        if measured == nil, let latest = sample.latestRate, latest < Double(current.bitRate) * shortfall,
           sample.backlogSeconds >= downBacklog, let previous = previousBacklog, sample.backlogSeconds > previous + 0.05 {
            measured = latest
            measuredByLatest = true
        }
        // Right after a move, the queue still holds the old rung's media, counted in seconds of the
        // new one: it says nothing about the new rung until it has had time to drain.
        let backlogBad = sample.backlogSeconds > backlogForDown && now >= settledAt
        let lossBad = sample.lossFraction >= lossForDown && now >= probeAftermathUntil
        var bad = lossBad || backlogBad
        if let measured, measured < Double(current.downswitchBelow) { bad = true }

        // A probe under way: the samples it measures say whether the next rung fits.
        if let running = probe {
            // A probe sends at the next rung's threshold: a link that delivered it, even with the
            // sender as the limit, carries it.
            // Judged on what arrived over seconds of the probe (several bursts of any link), never
            // on a rate sample or on what was merely sent.
            let best = max(running.best, sample.received ?? 0)
            probe!.best = best
            // A queue building up means the link is full: the probe stops there, before it hurts;
            // and as soon as the queue is clean no longer, when the link reads full well under
            // what the probe must show (a probe from 1 Mbit/s to a 2 Mbit/s top on a 1.3 Mbit/s
            // link), since queueing more cannot make it succeed and delays the media behind it.
            let target = rungs.first { $0.level == running.level }
            let hopeless = sample.backlogSeconds > cleanBacklog && !sample.appLimited
                && (sample.estimate ?? .infinity) < Double(target?.upswitchAbove ?? 0) * shortfall
            // A sample that covers seconds (a receiver report) and lies wholly within the probe has
            // judged it once the probe has run `minimumProbe`: a player whose reports come faster
            // with the padding (ffmpeg's, per 280 KB received) need not wait out a duration sized
            // for its reports' pace before it.
            let covered = sample.covers >= 1 && now - sample.covers >= running.started && now - running.started >= Self.minimumProbe
            let judged = now >= running.until || covered
            if judged || bad || sample.backlogSeconds > probeBacklogLimit || hopeless {
                probe = nil
                // Unless the link, read full just now, has fallen under the target since: the
                // evidence spans seconds, and a 3G link that carried 1.4 Mbit/s through a probe
                // and then 900 kbit/s at its end would take the player up into the fall.
                // The highest rung from the target to the one the probe aimed at that `rate` shows the
                // link carries, and that the link, if read full just now, has not fallen under.
                func reached(_ rate: Double) -> Rung? {
                    rungs.first { rung in
                        rung.level >= running.aimed && rung.level <= running.level && rate >= Double(rung.upswitchAbove)
                            && (sample.appLimited || (sample.estimate ?? .infinity) >= Double(rung.bitRate))
                    }
                }
                if judged, !bad, sample.backlogSeconds <= probeBacklogLimit, let reached = reached(best) {
                    return moveUp(to: reached, now: now, received: best, reason: "probe: received \(kbps(best)) over its last seconds")
                }
                // Ended early because the queue built: the link was full, and what it delivered
                // meanwhile is its capacity.
                if ratesFromArrivals, !judged, !bad, sample.lossFraction < lossForClean, sample.backlogSeconds > probeBacklogLimit,
                   !sample.appLimited, let full = sample.estimate, let reached = reached(full) {
                    let decision = moveUp(to: reached, now: now, received: full, reason: "probe filled the link at \(kbps(full))")
                    // What the probe queued is still draining, and what it overfilled may be reported lost next.
                    probeAftermathUntil = now + probeAftermath
                    return decision
                }
                probeHold = min(maximumProbeHold, probeHold * 2)
                cleanSince = now
                // A link that, full, carries less than the current rung's own down threshold has
                // fallen under the rung, probe or not (a probe fills the link, so the saturated
                // rate is the link's, padding included): it moves the player down now. Blaming the
                // probe held a Chromium viewer on 480p for 4 s after its link fell to 650 kbit/s
                // in the middle of a probe.
                let fellUnderRung = ratesFromArrivals && (measured.map { $0 < Double(current.downswitchBelow) } ?? false)
                if !fellUnderRung {
                    // What the probe queued drains next, and what it overfilled is reported lost
                    // next: neither is the rung's doing.
                    settledAt = now + settleTime
                    probeAftermathUntil = now + probeAftermath
                    // Loss or queueing while probing is the probe's own doing: it ends, and only
                    // what the link shows without it can move the player down.
                    if bad {
                        cleanUntil(now)
                        return .stay
                    }
                }
            } else {
                return .stay
            }
        }

        if bad {
            cleanUntil(now)
            if badSince == nil {
                badSince = now
                collapsedSamples = 0
                shortSamples = 0
                shortDoubted = false
                bestWhileBad = nil
                measuredOnlyByLatest = true
            }
            // One sample can catch TCP in loss recovery or a reader's hiccup: a collapse is two in a
            // row under half the rung, and the move goes to what the best of the bad samples carries.
            if let measured {
                bestWhileBad = max(bestWhileBad ?? measured, measured)
                measuredOnlyByLatest = measuredOnlyByLatest && measuredByLatest
                collapsedSamples = measured < Double(current.bitRate) / 2 ? collapsedSamples + 1 : 0
            }
            // A link measured saturated over half a second (`LinkEstimator`: several bursts'
            // worth, and a burst only raises it) well short of the rung's own rate cannot carry it:
            // every second spent deciding adds to the queue the next rung has to drain.
            // But a shaped link owes what it burst: right after a reading of the full link at or
            // over the rung's down threshold, one reading well under the rung may be that debt (a
            // 16 KB-burst link shaped to 1.39 Mbit/s read 1.74 and then 0.675 Mbit/s, half a second
            // apart, with no loss and data in flight throughout, and moved a reader off a rung it
            // carried). A link that falls reads in between first, the estimator's windows
            // overlapping by half, unless it falls to a fraction of the rung; so a short reading
            // straight after a good one waits for the next, which still counts it bad meanwhile.
            // Not within `settleTime` of a move, though: a link still falling after a move down
            // reads "good" against the lower rung's threshold and then short (a 3G link going
            // 846 → 568 → 250 kbit/s froze a reader 1.5 s while the doubt held it on 360p). Nor
            // after a reading taken while probing (`previousSaturated` is nil then): a step player
            // whose link fell to 650 kbit/s as a probe ended read 1.56 Mbit/s at its end, and the
            // doubt held it on 480p for 2.3 s.
            let afterGoodReading = previousSaturated.map { $0 >= Double(current.downswitchBelow) } ?? false
            let underRate = measured.map { $0 < Double(current.bitRate) * shortfall } ?? false
            let settledOnRung = now - lastMoveAt >= settleTime
            let doubtful = underRate && !shortDoubted && settledOnRung && afterGoodReading
            shortDoubted = doubtful
            let short = underRate && !doubtful
            shortSamples = short ? shortSamples + 1 : 0
            let collapse = collapsedSamples >= 2 || short
            let persistent = now - badSince! >= downHold
            let best = bestWhileBad
            if level != lowest.level, collapse || persistent || lossBad || backlogBad {
                // A backlog, loss or a collapse that lasts says the rung does not fit, whatever
                // the estimate claims: the player moves at least a rung down. The best of the bad
                // samples may be one a probe's queue inflated just before the link fell: a reader
                // stepped from 1.3 Mbit/s to 650 kbit/s in a probe's last second had 1.11 Mbit/s
                // as its best bad sample, which "carries" the 1.108 Mbit/s rung, and stayed on it
                // for 4 s, reading 650 kbit/s, until its lag passed two seconds. One short sample
                // alone moves the player only as far as the best carries: right after a probe a
                // reader's link once read 785 kbit/s for a moment on a 1.3 Mbit/s link.
                let overrun = backlogBad || lossBad || collapsedSamples >= 2 || shortSamples >= 2
                var target = overrun ? lower(best.map(highestCarried)) : (best.map(highestCarried) ?? lower(nil))
                // The freshest rate sample alone moves the player one rung: it can read half the
                // link when the reader is slow to acknowledge (a player on a link stepped from wide
                // to 1.3 Mbit/s read 710 kbit/s in its first full half second, against 1.31 Mbit/s
                // received over that second, and was moved from 720p past the 480p rung it
                // carried). The saturated run half a second later moves it further if need be.
                // A sample read from packets' arrivals (`ratesFromArrivals`) is the link's own and
                // moves the player as far as it reads: a WebRTC viewer whose link fell from wide to
                // 400 kbit/s as its first picture showed was moved 720p → 480p → 240p a second
                // apart, and 480p's IDR went into the narrow path ahead of 240p's.
                if measuredOnlyByLatest, !ratesFromArrivals, bestWhileBad != nil, !backlogBad, !lossBad, target.level > lower(nil).level {
                    target = lower(nil)
                }
                if target.level > level {
                    let why = lossBad ? "loss \(Int(sample.lossFraction * 100)) %"
                        : backlogBad ? "\(format(sample.backlogSeconds)) s backlog"
                        : best.map { "estimate \(kbps($0)) under \(kbps(Double(current.downswitchBelow)))" } ?? "link slower than the rung"
                    // A backlog the new rung would take long to drain (the link carries little more
                    // than it) is dropped, old rung and all: the player waits for the new rung's
                    // IDR instead of playing seconds behind live and then skipping anyway.
                    let surplus = (best ?? 0) - Double(target.bitRate)
                    let slowDrain = sample.backlogSeconds > cleanBacklog
                        && (surplus <= 0 || sample.backlogSeconds * Double(target.bitRate) / surplus > slowDrainSeconds)
                    return moveDown(to: target, now: now, flush: backlogBad || slowDrain, reason: why,
                                    linkRead: measuredOnlyByLatest && !ratesFromArrivals ? nil : best)
                }
            }
            return .stay
        }
        badSince = nil

        // A rung held long enough after a move up: the move worked, the backoff is forgotten.
        if let up = lastUp, now - up.time >= failedUpWindow {
            lastUp = nil
            currentUpHold = upHold
        }

        let clean = sample.lossFraction < lossForClean && sample.backlogSeconds <= cleanBacklog
        guard clean else {
            cleanUntil(now)
            return .stay
        }
        // A sample that covers seconds (a receiver report's interval) was clean all that time.
        if cleanSince == nil { cleanSince = max(uncleanAt, now - sample.covers) }
        // The first clean sample after skipping: the outage is over. What a failed climb or a
        // fruitless probe taught about the link before it says nothing about the link now.
        if lastSkip != nil {
            lastSkip = nil
            currentUpHold = holdAfterOutage ?? upHold
            probeHold = holdAfterOutage ?? upHold
        }
        guard let target = nextUp, now - cleanSince! >= currentUpHold else { return .stay }
        // Evidence first: the player already received what the next rung needs (after a backlog
        // drained, say), with nothing queued all the while.
        if let received = sample.received, received >= Double(target.upswitchAbove) {
            return moveUp(to: target, now: now, received: received, reason: "received \(kbps(received)) with an empty backlog")
        }
        guard now - cleanSince! >= max(currentUpHold, probeHold) else { return .stay }
        // The link has shown no more than the current rung uses: look further before moving.
        let aimed = rungs.filter { $0.level < level }.suffix(max(1, probeReach)).first ?? target
        probe = (target.level, now, now + probeDuration, 0, aimed.level)
        return .probe(bitRate: Int((Double(aimed.bitRate) * Self.probeOffer).rounded()))
    }

    /// The clean stretch, if any, ends at `now`.
    private mutating func cleanUntil(_ now: Double) {
        cleanSince = nil
        uncleanAt = now
    }

    /// `candidate` when it is below the current rung, else the rung just below (or the lowest).
    private func lower(_ candidate: Rung?) -> Rung {
        if let candidate, candidate.level > level { return candidate }
        return rungs.first { $0.level > level } ?? lowest
    }

    /// - Parameter linkRead: the rate the move rests on, if it speaks for the link (not a TCP
    ///   reader's freshest sample alone, which can read half of it).
    private mutating func moveDown(to target: Rung, now: Double, flush: Bool, reason: String, linkRead: Double? = nil) -> Decision {
        guard target.level != level else { return .stay }
        // A move down soon after a climb backs off the next one, unless the link now reads under
        // what the rung the player climbed from needs: the link fell, not the climb, and it would
        // have moved the player off that rung as well. Backing off held a Chromium viewer on the
        // lowest rung for 15 s of a 2–3 Mbit/s link: a probe took it from 250 kbit/s to 1 Mbit/s,
        // and the link fell to 287 kbit/s a second later for three seconds, then recovered.
        if let up = lastUp, now - up.time < failedUpWindow {
            let origin = rungs.first { $0.level == up.from }
            let linkFell = origin.flatMap { origin in linkRead.map { $0 < Double(origin.downswitchBelow) } } ?? false
            if !linkFell { backOff() }
        }
        lastUp = nil
        return move(to: target, now: now, flush: flush, reason: reason)
    }

    /// Never above what the player received lately, plus `upMargin`: no single rate sample, probe
    /// or timer can take a player past what its link has shown it carries.
    private mutating func moveUp(to target: Rung, now: Double, received: Double?, reason: String) -> Decision {
        guard let received, Double(target.bitRate) <= received * (1 + upMargin) else { return .stay }
        lastUp = (now, level)
        probeHold = upHold
        // A hold shortened after an outage was for the first climb only.
        currentUpHold = max(currentUpHold, upHold)
        return move(to: target, now: now, flush: false, reason: reason)
    }

    private mutating func move(to target: Rung, now: Double, flush: Bool, reason: String) -> Decision {
        // Loss reported just after a move down is the old rung's overflow, still in the feedback.
        lastMoveWasDown = target.level > level
        if lastMoveWasDown { probeAftermathUntil = now + probeAftermath }
        level = target.level
        switches += 1
        lastMoveAt = now
        settledAt = now + settleTime
        badSince = nil
        cleanUntil(now)
        probe = nil
        return .switchTo(level: target.level, flush: flush, reason: reason)
    }

    /// The last move landed (the player gets the target's IDR now): what the old rung overfilled
    /// is still being reported lost for `probeAftermath` seconds, and is not the new rung's.
    /// A move may take up to a keyframe interval to land, during which the old rung goes on.
    public mutating func landed(at now: Double) {
        guard now.isFinite else { return }
        landedAt = now
        guard lastMoveWasDown else { return }
        probeAftermathUntil = max(probeAftermathUntil, now + probeAftermath)
    }

    private mutating func backOff() {
        currentUpHold = min(maximumUpHold, currentUpHold * 2)
    }

    /// A probe is under way: the caller keeps sending its extra until this turns false.
    public var isProbing: Bool { probe != nil }

    /// The clean time the next move up needs (grows after failed tries).
    public var upHoldNow: Double { currentUpHold }

    private func kbps(_ value: Double) -> String { "\(Int(value / 1000)) kbit/s" }
    private func format(_ seconds: Double) -> String { String(Int(seconds * 10) / 10) + "." + String(Int(seconds * 10) % 10) }
}
