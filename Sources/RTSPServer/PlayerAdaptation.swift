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
///   (`TCP_INFO`: bytes acknowledged, delivery rate, unsent bytes) and the media queued for it.
/// - **UDP**: every RTCP receiver report the player sends is checked against what was sent
///   (`ReceiverReportMeter`): what arrived, what was lost, what is still on the path, the round
///   trip. A player that sends no reports gives nothing to judge and stays where it is.
final class PlayerAdaptation: Sendable {
    static let interval = TimeAmount.milliseconds(500)
    /// RTCP APP name of the probe's padding packets.
    static let probeName: [UInt8] = Array("ABRP".utf8)

    private let subscriber: MediaSubscriber
    private let transport: PlayerTransport
    private let registry: StreamRegistry
    private let ladder: [Int: String]
    private let logger: Logger
    private let onSwitch: @Sendable (PlayerSwitch) -> Void
    private let state: Mutex<State>
    private let started = DispatchTime.now().uptimeNanoseconds

    private struct State {
        var policy: SwitchingPolicy?
        var task: RepeatedTask?
        var stopped = false
        var lastAcked: (bytes: UInt64, time: Double)?
        /// TCP: bytes written and not yet acknowledged at the last look (ours, the kernel's unsent, in flight).
        var lastOutstanding: Double?
        /// TCP: the acknowledged rate, smoothed, which the queue is measured against (one interval
        /// without acknowledgements must not read as minutes of lag).
        var smoothedAckedRate: Double?
        /// UDP: the audio track's latest arrival rate, added to the video's.
        var audioBitRate: Double = 0
        /// UDP: seconds between the player's reports, smoothed (a probe must outlast one).
        var reportInterval: Double = 5
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
        self.registry = registry
        self.ladder = ladder
        self.onSwitch = onSwitch
        state = Mutex(State())
    }

    func start() {
        // UDP players are judged when their reports arrive.
        guard transport.sentMedia == nil else { return }
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

    private var now: Double { Double(DispatchTime.now().uptimeNanoseconds &- started) / 1e9 }

    private var rungs: (all: [SwitchingPolicy.Rung], current: SwitchingPolicy.Rung)? {
        let rungs = ladder.keys.sorted().compactMap { registry.existingStream(ladder[$0]!)?.rung }
        guard rungs.count == ladder.count, let current = subscriber.currentStream?.rung, subscriber.isSwitchable else { return nil }
        return (rungs, current)
    }

    private func observe(_ info: TCPInfo?) {
        guard let info, let (rungs, current) = rungs else { return }
        let now = self.now
        // Media queued for the player: ours, plus what the kernel has not sent.
        let queuedBits = Double(transport.pendingBytes + Int(info.notSentBytes)) * 8
        decide(rungs: rungs, current: current) { state in
            // What the player acknowledged since the last look: with data waiting, what its link
            // carries; with nothing waiting, what was sent (app-limited: the link carries at least
            // that), a probe's padding included. The kernel's own delivery rate samples bursts and
            // runs high behind a small receive window, so it serves only before the first interval.
            let interval = state.lastAcked.map { max(0.05, now - $0.time) }
            let acked = state.lastAcked.map { Double(info.bytesAcked &- $0.bytes) * 8 / max(0.05, now - $0.time) }
            state.lastAcked = (info.bytesAcked, now)
            // What was offered meanwhile: acknowledged, plus the growth of what is outstanding. Bytes
            // sent in the last round trip are not acknowledged yet, so on a slow path the acknowledged
            // rate alone reads short of a probe that the link carried whole.
            let outstanding = queuedBits + Double(info.unackedSegments) * Double(info.maximumSegmentSize) * 8
            var offered: Double?
            if let acked, let last = state.lastOutstanding, let interval { offered = acked + (outstanding - last) / interval }
            state.lastOutstanding = outstanding
            let delivery = info.deliveryRate > 0 ? Double(info.deliveryRate) * 8 : nil
            // How far behind the queue puts the player: what it holds over what the link drains.
            // Right after a move down the queue holds the old rung's media, so the current rung's
            // rate would overstate it; a stalled reader (nothing acknowledged) is as far behind as it gets.
            // Data sent but stuck in a queue on the path (a bottleneck's buffer) shows as round-trip
            // time above the least seen: that is lag too, and the sign the link is the limit.
            let queueing = max(0, Double(info.roundTripTime) - Double(info.minimumRoundTripTime)) / 1e6
            if let acked { state.smoothedAckedRate = state.smoothedAckedRate.map { $0 * 0.6 + acked * 0.4 } ?? acked }
            let drainRate = queuedBits > 0 ? (state.smoothedAckedRate ?? Double(current.bitRate)) : Double(current.bitRate)
            let backlog = queuedBits / max(1000, drainRate) + queueing
            let waiting = backlog > 0.1
            logger.trace("sample", metadata: ["acked": "\(Int(acked ?? -1))", "offered": "\(Int(offered ?? -1))", "backlog": "\(backlog)",
                                              "queueing": "\(queueing)", "queued": "\(Int(queuedBits / 8))"])
            return SwitchingPolicy.Sample(time: now, estimate: acked ?? delivery, appLimited: !waiting, lossFraction: 0,
                                          backlogSeconds: backlog, offered: offered)
        }
    }

    /// An RTCP receiver report block from a UDP player about one of its tracks.
    func receiverReport(_ block: RTCPPacket.ReportBlock, track: Int) {
        guard let log = transport.sentMedia, let (reading, padding) = log.receive(block, track: track, at: uptimeSeconds()) else { return }
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
            let estimate = reading.bitRate.map { $0 + state.audioBitRate + paddingRate }
            let appLimited = backlog < 0.1 && reading.lossFraction < 0.02
            return SwitchingPolicy.Sample(time: now, estimate: estimate, appLimited: appLimited,
                                          lossFraction: reading.lossFraction, backlogSeconds: backlog)
        }
    }

    private func decide(rungs: [SwitchingPolicy.Rung], current: SwitchingPolicy.Rung, sample: (inout State) -> SwitchingPolicy.Sample) {
        let (decision, probeSeconds): (SwitchingPolicy.Decision, Double) = state.withLock { state in
            guard !state.stopped else { return (.stay, 0) }
            let sample = sample(&state)
            if state.policy == nil { state.policy = SwitchingPolicy(rungs: rungs, startingAt: current.level) }
            state.policy!.update(rungs: rungs)
            // A UDP probe is judged on reports: it must outlast the interval between two.
            if transport.sentMedia != nil { state.policy!.probeDuration = min(8, max(1, state.reportInterval * 1.5)) }
            let wasProbing = state.policy!.isProbing
            let decision = state.policy!.observe(sample)
            if wasProbing, !state.policy!.isProbing {
                logger.debug("probe ended", metadata: ["estimate": "\(Int(sample.estimate ?? -1))", "backlog": "\(sample.backlogSeconds)",
                                                       "loss": "\(sample.lossFraction)", "decision": "\(decision)"])
            }
            return (decision, state.policy!.probeDuration)
        }
        switch decision {
        case .stay:
            break
        case let .switchTo(level, flush, reason):
            guard let path = ladder[level], let target = registry.existingStream(path) else { return }
            subscriber.switchTo(target, flush: flush)
            logger.info("player moves to another level", metadata: ["from": "\(current.level)", "to": "\(level)", "reason": "\(reason)"])
            onSwitch(PlayerSwitch(from: current.level, to: level, reason: reason))
        case let .probe(bitRate):
            logger.debug("probing the next level", metadata: ["level": "\(current.level)", "rate": "\(bitRate)"])
            // A little over the threshold: the rung's real rate wanders under its required rate, and
            // a probe that offers exactly the threshold measures just short of it.
            probe(extraBitRate: max(0, bitRate + bitRate / 10 - current.bitRate), seconds: probeSeconds)
        case .skipToLiveEdge:
            subscriber.skipToNextKeyframe()
            logger.info("player skips to the next keyframe: its link does not carry the lowest level", metadata: ["level": "\(current.level)"])
        }
    }

    /// Sends `extraBitRate` more for `seconds`, in slices of 100 ms, as RTCP APP padding.
    private func probe(extraBitRate: Int, seconds: Double) {
        let slice = extraBitRate / 8 / 10
        guard slice > 0 else { return }
        for index in 0..<max(1, Int(seconds * 10)) {
            transport.eventLoop.scheduleTask(in: .milliseconds(Int64(index) * 100)) { [self] in
                // The policy ends a probe as soon as a queue builds: the padding stops with it.
                guard state.withLock({ !$0.stopped && $0.policy?.isProbing == true }) else { return }
                transport.sendPadding(bytes: slice)
            }
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
}
