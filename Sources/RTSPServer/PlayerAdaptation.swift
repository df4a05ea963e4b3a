import Dispatch
import Logging
import MediaCore
import NIOCore
import RTSP
import Synchronization

/// Moves one player between the rungs of its ladder as its link changes. It turns what the
/// transport really measured into `SwitchingPolicy` samples, whose thresholds are the rungs'
/// hints, and carries out what the policy decides: a switch at the target's IDR on the same RTP
/// session, a probe (RTCP APP padding on the player's RTCP channel, which players ignore), or a
/// skip to the next IDR when even the lowest rung falls behind.
///
/// - **TCP** (interleaved): every `interval` it reads the kernel's view of the connection
///   (`TCP_INFO`: bytes acknowledged, delivery rate, unsent bytes) and the player's outbox (media
///   held, and how long the oldest media not acknowledged has waited), and gives them to a
///   `LinkEstimator`, which the policy's samples come from.
/// - **UDP**: every RTCP receiver report the player sends is checked against what was sent
///   (`ReceiverReportMeter`): what arrived, what was lost, what is still on the path, the round
///   trip. A player that sends no reports gives nothing to judge and stays where it is.
final class PlayerAdaptation: Sendable {
    static let interval = TimeAmount.milliseconds(500)
    /// RTCP APP name of the probe's padding packets.
    static let probeName: [UInt8] = Array("ABRP".utf8)

    private let subscriber: MediaSubscriber
    private let transport: PlayerTransport
    private let profile: AdaptationProfile
    private let registry: StreamRegistry
    private let ladder: [Int: String]
    private let logger: Logger
    private let onSwitch: @Sendable (PlayerSwitch) -> Void
    private let state: Mutex<State>
    private let started: UInt64

    private struct State {
        var policy: SwitchingPolicy?
        var task: RepeatedTask?
        var stopped = false
        /// TCP: the link's estimate from what the kernel and the outbox saw.
        var estimator = LinkEstimator()
        /// The padding rate of the probe under way (bit/s).
        var probeBitRate: Double = 0
        /// UDP: the audio track's latest arrival rate, added to the video's.
        var audioBitRate: Double = 0
        /// UDP: seconds between the player's reports, smoothed (a probe must outlast one).
        var reportInterval: Double = 5
        /// A move was decided and its first sample since landing is still to come.
        var awaitingLanding = false
        /// The latest sample's backlog (seconds): a datagram player's probe holds off while it is high.
        var lastBacklog = 0.0
        /// A browser player's Opus rendition.
        var audio = BrowserAudioChoice()
    }

    /// One move of a player, for events and metrics.
    struct PlayerSwitch: Sendable {
        var from: Int
        var to: Int
        var reason: String
    }

    init(subscriber: MediaSubscriber, transport: PlayerTransport, registry: StreamRegistry, ladder: [Int: String], logger: Logger,
         onSwitch: @escaping @Sendable (PlayerSwitch) -> Void = { _ in }) {
        self.logger = logger
        self.subscriber = subscriber
        self.transport = transport
        started = transport.clock.nanoseconds
        profile = AdaptationProfile(transport)
        self.registry = registry
        self.ladder = ladder
        self.onSwitch = onSwitch
        state = Mutex(State())
    }

    func start() {
        // UDP players are judged when their reports arrive, packet players when their protocol's
        // feedback does (`observe(_:)`).
        guard profile.evidence == .tcpInfo else { return }
        let task = transport.eventLoop.scheduleRepeatedTask(initialDelay: Self.interval, delay: Self.interval) { [self] _ in
            transport.connectionInfo().whenSuccess { [self] info in observe(info) }
        }
        let stopped: Bool = state.withLock { state in
            state.task = task
            return state.stopped
        }
        if stopped { task.cancel() }
    }

    func stop() {
        let task = state.withLock { state -> RepeatedTask? in
            state.stopped = true
            defer { state.task = nil }
            return state.task
        }
        task?.cancel()
    }

    /// The player's level and switches, for status.
    var level: Int? { state.withLock { $0.policy?.level } }
    var switches: Int { state.withLock { $0.policy?.switches ?? 0 } }
    var estimate: Double? { state.withLock { $0.policy?.estimate } }

    private var now: Double { transport.clock.seconds(since: started) }

    /// The ladder's rungs as this player's estimate counts them (`PlayerTransport.linkCost`).
    private var rungs: (all: [SwitchingPolicy.Rung], current: SwitchingPolicy.Rung)? {
        let rungs = ladder.keys.sorted().compactMap { registry.existingStream(ladder[$0]!)?.rung }
        guard rungs.count == ladder.count, let current = subscriber.currentStream?.rung, subscriber.isSwitchable else { return nil }
        let cost = transport.linkCost
        return (rungs.map { $0.carrying(cost) }, current.carrying(cost))
    }

    private func observe(_ info: TCPInfo?) {
        guard let info, let (rungs, current) = rungs, let outbox = (transport as? InterleavedTransport)?.outbox else { return }
        let now = self.now
        // The transport's view (what was acknowledged, whether data waited, how long the oldest
        // media not received has waited) goes through the estimator every player shares.
        let observation = outbox.observe(info, at: transport.clock.seconds)
        decide(rungs: rungs, current: current) { state in
            var observation = observation
            observation.time = now
            let sample = state.estimator.observe(observation)
            let probing = state.policy?.isProbing == true
            outbox.setLimit(LinkEstimator.outstandingLimit(receivedBitRate: state.estimator.receivedRate(over: 2),
                                                           sendingBitRate: Double(current.bitRate) + (probing ? state.probeBitRate : 0), probing: probing))
            logger.trace("sample", metadata: ["estimate": "\(Int(sample.estimate ?? -1))", "received": "\(Int(sample.received ?? -1))",
                                              "backlog": "\(sample.backlogSeconds)", "waiting": "\(observation.senderWaiting)",
                                              "retransmitted": "\(info.totalRetransmissions)", "cwnd": "\(info.congestionWindow)",
                                              "unacked": "\(info.unackedSegments)", "notSent": "\(info.notSentBytes)", "held": "\(outbox.heldBytes)",
                                              "rate": "\(info.deliveryRate &* 8)\(info.deliveryRateAppLimited ? " app-limited" : "")"])
            return sample
        }
    }

    /// What another protocol's feedback says of a packet player's link (WebRTC's transport-wide
    /// feedback): through the same estimator as a TCP player's `TCP_INFO`.
    func observe(_ observation: LinkObservation) {
        guard let (rungs, current) = rungs else { return }
        let now = self.now
        decide(rungs: rungs, current: current) { state in
            var observation = observation
            observation.time = now
            let sample = state.estimator.observe(observation)
            logger.trace("sample", metadata: ["estimate": "\(Int(sample.estimate ?? -1))", "received": "\(Int(sample.received ?? -1))",
                                              "backlog": "\(sample.backlogSeconds)", "waiting": "\(observation.senderWaiting)",
                                              "loss": "\(observation.lossFraction)", "delivered": "\(observation.deliveredBytes)",
                                              "rate": "\(Int(observation.rateSample ?? -1))"])
            return sample
        }
    }

    /// An RTCP receiver report block from a UDP player about one of its tracks; `ceiling`, the
    /// player's own estimate of its link (WebRTC's REMB), caps what the report says.
    func receiverReport(_ block: RTCPPacket.ReportBlock, track: Int, ceiling: Double? = nil) {
        guard let log = transport.sentMedia, let (reading, padding) = log.receive(block, track: track, at: transport.clock.seconds) else { return }
        guard track == 0 else {
            if let rate = reading.bitRate { state.withLock { $0.audioBitRate = rate } }
            return
        }
        guard let (rungs, current) = rungs else { return }
        let now = self.now
        decide(rungs: rungs, current: current) { state in
            if let interval = reading.interval { state.reportInterval = state.reportInterval * 0.7 + min(10, interval) * 0.3 }
            // Sent after the reported sequence and not yet there: queued on the path, less what one
            // way of the round trip holds on any link.
            let inFlight = Double(reading.inFlightBytes) * 8 / max(1000, reading.bitRate ?? Double(current.bitRate))
            let backlog = max(0, inFlight - (reading.roundTrip ?? 0) / 2)
            // The probe's padding crossed the same link: a report without loss or queueing says the
            // link carried it too.
            let paddingRate = reading.interval.map { Double(padding) * 8 / max(0.05, $0) } ?? 0
            var estimate = reading.bitRate.map { $0 + state.audioBitRate + paddingRate }
            // A peer's estimate under what arrived is the link's own limit speaking, not the sender's.
            var capped = false
            if let ceiling, ceiling > 0, ceiling < estimate ?? .infinity {
                estimate = ceiling
                capped = true
            }
            let appLimited = !capped && backlog < 0.1 && reading.lossFraction < 0.02
            logger.trace("report", metadata: ["estimate": "\(Int(estimate ?? -1))", "backlog": "\(backlog)", "loss": "\(reading.lossFraction)",
                                              "interval": "\(reading.interval ?? -1)", "roundTrip": "\(reading.roundTrip ?? -1)",
                                              "padding": "\(padding)", "upHold": "\(state.policy?.upHoldNow ?? -1)"])
            // A report covers a second or more of datagrams, each sent on its own (no window of
            // acknowledgements to release them in bursts): what it says arrived is evidence a move
            // up may rest on.
            return SwitchingPolicy.Sample(time: now, estimate: estimate, appLimited: appLimited,
                                          lossFraction: reading.lossFraction, backlogSeconds: backlog,
                                          received: (reading.interval ?? 0) >= 1 ? estimate : nil, covers: reading.interval ?? 0)
        }
    }

    private func decide(rungs: [SwitchingPolicy.Rung], current: SwitchingPolicy.Rung, sample: (inout State) -> SwitchingPolicy.Sample) {
        let audioCost = transport.linkCost.besides
        let (decision, probeSeconds, audio): (SwitchingPolicy.Decision, Double, BrowserAudioRendition?) = state.withLock { state in
            guard !state.stopped else { return (.stay, 0, nil) }
            let sample = sample(&state)
            state.lastBacklog = sample.backlogSeconds
            if state.policy == nil { state.policy = SwitchingPolicy(rungs: rungs, startingAt: current.level) }
            state.policy!.update(rungs: rungs)
            // Samples come only once a move landed (`rungs` is nil while one is pending).
            if state.awaitingLanding {
                state.awaitingLanding = false
                state.policy!.landed(at: sample.time)
            }
            profile.configureProbes(&state.policy!, reportInterval: state.reportInterval)
            let wasProbing = state.policy!.isProbing, holdBefore = state.policy!.upHoldNow
            let decision = state.policy!.observe(sample)
            if state.policy!.upHoldNow != holdBefore {
                logger.debug("clean time before the next move up changes", metadata: ["from": "\(holdBefore)", "to": "\(state.policy!.upHoldNow)",
                                                                                     "decision": "\(decision)"])
            }
            if wasProbing, !state.policy!.isProbing {
                // A probe that ended early (a queue began to build) leaves no padding behind it.
                transport.dropQueued(paddingOnly: true)
                logger.debug("probe ended", metadata: ["estimate": "\(Int(sample.estimate ?? -1))", "backlog": "\(sample.backlogSeconds)",
                                                       "loss": "\(sample.lossFraction)", "decision": "\(decision)"])
            }
            if case .switchTo = decision { state.awaitingLanding = true }
            var audio: BrowserAudioRendition?
            if subscriber.audioFeed == .opus, subscriber.hasAudio, let lowest = rungs.max(by: { $0.level < $1.level }) {
                var level = current.level
                if case let .switchTo(target, _, _) = decision { level = target }
                let before = state.audio.rendition
                // The rungs carry the audio measured so far; the choice weighs the full audio itself.
                let after = state.audio.update(onLowestRung: level == lowest.level, estimate: sample.estimate,
                                               lowestVideoOnTheWire: Double(lowest.bitRate) - audioCost, at: sample.time)
                if after != before { audio = after }
            }
            return (decision, profile.paddingSeconds(probe: state.policy!.probeDuration, reportInterval: state.reportInterval), audio)
        }
        if let audio {
            subscriber.audioRendition = audio
            logger.info("player's audio changes rendition", metadata: ["rendition": "\(audio)", "level": "\(current.level)"])
        }
        switch decision {
        case .stay:
            break
        case .switchTo(let level, var flush, let reason):
            guard let path = ladder[level], let target = registry.existingStream(path) else { return }
            if profile.flushesEveryMoveDown, level > current.level { flush = true }
            // Down: the link no longer carries this rung, so the target's encoder is asked for an
            // IDR now rather than the player waiting for the grid's (up to a keyframe interval of
            // pictures its link cannot carry). Up can wait: the current rung still flows.
            subscriber.switchTo(target, flush: flush, urgent: level > current.level)
            if flush { transport.dropQueued(paddingOnly: false) }
            logger.info("player moves to another level", metadata: ["from": "\(current.level)", "to": "\(level)", "reason": "\(reason)"])
            onSwitch(PlayerSwitch(from: current.level, to: level, reason: reason))
        case let .probe(bitRate):
            logger.debug("probing the next level", metadata: ["level": "\(current.level)", "rate": "\(bitRate)"])
            let extra = max(0, bitRate - current.bitRate)
            state.withLock { $0.probeBitRate = Double(extra) }
            probe(extraBitRate: extra, rungBitRate: current.bitRate, seconds: probeSeconds)
        case .skipToLiveEdge:
            // A keyframe the transport still holds that has waited less than the lag limit plays
            // now, where the next one would wait up to a keyframe interval; the cost is that lag
            // drains instead of being dropped (`MediaPacer.dropVideo(keepingKeyframeYoungerThan:at:)`).
            let limit = state.withLock { $0.policy!.maximumLag }  // the policy that decided the skip
            if subscriber.skipToLiveEdge(keepingKeyframeYoungerThan: limit) {
                logger.info("player skips to the newest keyframe it holds: its link does not carry the lowest level", metadata: ["level": "\(current.level)"])
            } else {
                logger.info("player skips to the next keyframe: its link does not carry the lowest level", metadata: ["level": "\(current.level)"])
            }
        }
    }

    /// Seconds of the rung's media waiting in a paced player's sender above which a probe's
    /// padding holds off: more than a P-frame, a keyframe leaving at the link's pace.
    static let pictureWaiting = 0.1

    /// Sends `extraBitRate` more for `seconds`, in slices of 100 ms (10 ms for a paced player), as
    /// padding: RTCP APP packets on RTSP, RTX padding on WebRTC.
    private func probe(extraBitRate: Int, rungBitRate: Int, seconds: Double) {
        // A paced player's padding is decided every 10 ms against the latest feedback: decided per
        // 100 ms, a slice already under way went on over a queue that had just filled, and the
        // probe's queue overshot its hold by that slice (past 0.15 s, which Chromium counts as a
        // freeze, and past a 30-packet queue's whole depth at 2.5 Mbit/s).
        let tick = profile.paced ? 10 : 100
        let slice = extraBitRate / 8 * tick / 1000
        guard slice > 0 else { return }
        // A datagram player's probe ramps up over its first second: on a link that cannot carry
        // it, the queue (and the loss past it) shows at a fraction of the padding, and the
        // policy ends the probe before it costs the media much. TCP's own window does that for
        // an interleaved player.
        let ramps = profile.paced
        let rampSlices = 1000 / tick
        let count = max(1, Int(seconds * 1000) / tick)
        // One slice scheduled at a time, each after the one before (not the probe's hundreds of
        // timers at once), and none once the probe has ended.
        @Sendable func schedule(_ index: Int) {
            transport.eventLoop.scheduleTask(in: .milliseconds(Int64(index == 0 ? 0 : tick))) { [self] in
                guard sendSlice(index) else { return }
                if index + 1 < count { schedule(index + 1) }
            }
        }
        // Whether the probe is still under way.
        @Sendable func sendSlice(_ index: Int) -> Bool {
            // The policy ends a probe as soon as a queue builds: the padding stops with it.
            let (probing, backlog) = state.withLock { (!$0.stopped && $0.policy?.isProbing == true, $0.lastBacklog) }
            guard probing else { return false }
            // Judged on the queue a packet sent now meets, where the transport can tell: the
            // latest feedback's is 50–100 ms old, and a probe paced on it overshot its hold.
            if let limit = profile.probeQueueLimit, transport.pathQueue ?? backlog > limit { return true }
            // A keyframe still leaving the node's pacer goes first: padding beside it overfills
            // the bottleneck just as the picture most needed arrives.
            if profile.paced, Double(transport.pendingBytes) * 8 > Double(rungBitRate) * Self.pictureWaiting { return true }
            transport.sendPadding(bytes: ramps ? slice * min(rampSlices, index + 1) / rampSlices : slice)
            // A probe is watched closely: the sooner a queue is seen building, the less it delays the media.
            if index > 0, (index * tick) % 100 == 0 { transport.connectionInfo().whenSuccess { [self] info in observe(info) } }
            return true
        }
        schedule(0)
    }
}

/// What a player's transport lets its adaptation see, and what a move costs it: fixed when the
/// player starts, so the policy's transport-specific settings live in one place.
struct AdaptationProfile: Equatable {
    enum Evidence: Equatable {
        /// Interleaved RTSP over TCP: the kernel's `TCP_INFO` and the player's outbox, read every interval.
        case tcpInfo
        /// RTP over UDP (RTSP, or WebRTC without transport-wide feedback): RTCP receiver reports, when the player sends them.
        case receiverReports
        /// WebRTC with transport-wide congestion control: per-packet arrival feedback.
        case transportFeedback
    }

    var evidence: Evidence
    /// Datagrams the node paces itself (WebRTC): no TCP window releases them and nothing
    /// retransmits them, so the old rung's tail is lost rather than late.
    var paced: Bool

    /// Whether every move down stops the old rung at once, as if the policy had asked for a
    /// flush. A datagram player without a congestion window (paced, judged on receiver reports)
    /// loses what its full link cannot carry: the old rung's pictures until the target's IDR
    /// arrive late and broken, and the loss they cause falls on that IDR too (seen in Chromium:
    /// 480p's first IDR lost on a 1.3 Mbit/s link the 720p rung overfilled, 4–5 s frozen until
    /// the next one). Stopping the old rung lets the queue drain before the IDR: the picture
    /// holds until then instead. With transport-wide feedback the viewer's congestion window keeps
    /// what the path cannot take in the node's pacer, late rather than lost, so the old rung plays
    /// on until the IDR unless the policy asks for a flush (a backlog it would not drain): stopped
    /// at once, each move froze Chromium 0.4–0.7 s waiting for the target's IDR, and starts whose
    /// link fell to 1.2 Mbit/s, moved 720p → 480p → 360p, froze 0.75 s on average against 0.40 s
    /// (runs EV–EY). TCP's own window holds the tail.
    var flushesEveryMoveDown: Bool { paced && evidence != .transportFeedback }

    /// Seconds queued on the path above which a probe's next slice of padding waits (nil: never).
    /// A datagram player's probe so holds the bottleneck's queue short: a link carrying less than
    /// the probe is full (its capacity measured) without overflowing. Ended only at 0.3 s queued,
    /// probes to the top on a 2.3 Mbit/s link with a 100-packet queue (0.42 s) overflowed it every
    /// time, and the media lost froze Chromium up to 2 s. Held at 0.1 s, every probe still took
    /// 0.1–0.25 s into Chromium's audio jitter buffer, whose delay lip sync then gave the video in
    /// one jump (a freeze of 0.2–0.4 s about every ten seconds on a link that carried the rung).
    /// TCP's own window holds its queue.
    var probeQueueLimit: Double? { paced ? 0.06 : nil }

    init(evidence: Evidence, paced: Bool) {
        self.evidence = evidence
        self.paced = paced
    }

    init(_ transport: PlayerTransport) {
        paced = transport is SinkTransport
        evidence = transport.sentMedia != nil ? .receiverReports : paced ? .transportFeedback : .tcpInfo
    }

    /// How long a probe's padding may flow: the probe's duration, and for a player judged on its
    /// reports, up to one report interval more. The policy judges a probe on the first sample
    /// after its end and stops the padding then; padding that stopped at the end slowed ffmpeg's
    /// reports (one per 280 KB received) back to the rung's pace, and the judging report came
    /// 4–5 s late on a 300 kbit/s rung.
    func paddingSeconds(probe: Double, reportInterval: Double) -> Double {
        evidence == .receiverReports ? probe + min(10, max(0, reportInterval)) : probe
    }

    /// How long a probe lasts and how it is judged.
    func configureProbes(_ policy: inout SwitchingPolicy, reportInterval: Double) {
        switch evidence {
        case .receiverReports:
            // Judged on reports: a probe must outlast the interval between two.
            policy.probeDuration = min(8, max(3, reportInterval * 1.5))
            policy.probeBacklogLimit = policy.cleanBacklog
        case .transportFeedback:
            // Its ramp's second, then the seconds the evidence spans. A ramped probe that finds
            // too little costs the media little (it ends as the queue starts to build), so probes
            // may come closer together: a link that opens is found sooner.
            policy.probeDuration = 4
            policy.maximumProbeHold = 6
            policy.ratesFromArrivals = true
            policy.holdAfterOutage = 2
            // Its pacer holds the probe's queue short (`probeQueueLimit`), so offering enough for
            // two rungs costs a link that carries one no more than offering for one.
            policy.probeReach = 2
            // The pacer holds the probe's queue at 0.06 s (`probeQueueLimit`): one that reaches
            // the clean limit anyway is a link that fell.
            policy.probeBacklogLimit = policy.cleanBacklog
        case .tcpInfo:
            break
        }
    }
}

/// One player as operators see it.
public struct PlayerStatus: Sendable, Equatable {
    public var session: String
    /// The stream the player asked for (`live/stream1_2`).
    public var requested: String
    /// The stream it gets now, and that stream's ladder level (nil: not a ladder's rung).
    public var stream: String?
    public var level: Int?
    /// True when the node moves it between rungs (false: pinned with `?abr=off`, or not a ladder).
    public var adaptive: Bool
    /// The adaptation's view of the player's link (bit/s).
    public var estimateBitRate: Int?
    public var switches: Int
    /// "tcp" or "udp".
    public var transport: String
    public var address: String?
    /// Pictures it never got: skipped to the next IDR while its backlog was over the limit (a
    /// slow player, or a node too busy to send), or owed to it when it left.
    public var droppedPictures: Int = 0
}

/// A move of one player between rungs.
public struct PlayerSwitchEvent: Sendable, Equatable {
    public var session: String
    public var requested: String
    public var from: String
    public var to: String
    public var fromLevel: Int
    public var toLevel: Int
    public var reason: String
    /// "down" or "up".
    public var direction: String { toLevel > fromLevel ? "down" : "up" }

    public init(session: String, requested: String, from: String, to: String, fromLevel: Int, toLevel: Int, reason: String) {
        self.session = session
        self.requested = requested
        self.from = from
        self.to = to
        self.fromLevel = fromLevel
        self.toLevel = toLevel
        self.reason = reason
    }
}
