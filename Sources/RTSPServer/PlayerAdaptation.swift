import Dispatch
import Logging
import MediaCore
import NIOCore
import RTSP
import Synchronization

/// Moves one player between the rungs of its ladder as its link changes: every `interval` it
/// reads what the kernel knows of the player's TCP connection (`TCP_INFO`: delivery rate and
/// whether the sender was the limit) and the media queued for it, feeds a `SwitchingPolicy` whose
/// thresholds are the rungs' hints, and carries out what it decides: a switch at the target's
/// IDR on the same RTP session, a probe (RTCP APP padding on the player's RTCP channel, which
/// players ignore), or a skip to the next IDR when even the lowest rung falls behind.
final class PlayerAdaptation: Sendable {
    static let interval = TimeAmount.milliseconds(500)
    /// RTCP APP name of the probe's padding packets.
    static let probeName: [UInt8] = Array("ABRP".utf8)

    private let subscriber: MediaSubscriber
    private let transport: PlayerTransport
    private let registry: StreamRegistry
    private let ladder: [Int: String]
    private let logger: Logger
    private let state: Mutex<(policy: SwitchingPolicy?, task: RepeatedTask?, stopped: Bool, lastAcked: (bytes: UInt64, time: Double)?)>
    private let started = DispatchTime.now().uptimeNanoseconds

    init(subscriber: MediaSubscriber, transport: PlayerTransport, registry: StreamRegistry, ladder: [Int: String], logger: Logger) {
        self.logger = logger
        self.subscriber = subscriber
        self.transport = transport
        self.registry = registry
        self.ladder = ladder
        state = Mutex((nil, nil, false, nil))
    }

    func start() {
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

    private func observe(_ info: TCPInfo?) {
        guard let info else { return }
        let rungs = ladder.keys.sorted().compactMap { registry.existingStream(ladder[$0]!)?.rung }
        guard rungs.count == ladder.count, let current = subscriber.currentStream?.rung, subscriber.isSwitchable else { return }
        let now = Double(DispatchTime.now().uptimeNanoseconds &- started) / 1e9
        // Media queued for the player in seconds of its current rung: ours, plus what the kernel has not sent.
        let queuedBits = Double(transport.pendingBytes + Int(info.notSentBytes)) * 8
        let backlog = queuedBits / Double(max(1, current.bitRate))
        let decision: SwitchingPolicy.Decision = state.withLock { state in
            guard !state.stopped else { return .stay }
            // What the player acknowledged since the last look. With data waiting, that is what its
            // link carries (the kernel's delivery rate samples bursts and runs high behind a small
            // receive window); with nothing waiting, the sender was the limit and the link carries
            // at least the larger of the two.
            let acked = state.lastAcked.map { Double(info.bytesAcked &- $0.bytes) * 8 / max(0.05, now - $0.time) }
            state.lastAcked = (info.bytesAcked, now)
            let delivery = info.deliveryRate > 0 ? Double(info.deliveryRate) * 8 : nil
            let waiting = backlog > 0.1
            let sample = SwitchingPolicy.Sample(time: now, estimate: waiting ? (acked ?? delivery) : [acked, delivery].compactMap { $0 }.max(),
                                                appLimited: !waiting, lossFraction: 0, backlogSeconds: backlog)
            if state.policy == nil { state.policy = SwitchingPolicy(rungs: rungs, startingAt: current.level) }
            state.policy!.update(rungs: rungs)
            return state.policy!.observe(sample)
        }
        switch decision {
        case .stay:
            break
        case let .switchTo(level, flush, reason):
            guard let path = ladder[level], let target = registry.existingStream(path) else { return }
            subscriber.switchTo(target, flush: flush)
            logger.info("player moves to another level", metadata: ["from": "\(current.level)", "to": "\(level)", "reason": "\(reason)"])
        case let .probe(bitRate):
            probe(extraBitRate: max(0, bitRate - current.bitRate))
        case .skipToLiveEdge:
            subscriber.skipToNextKeyframe()
            logger.info("player skips to the next keyframe: its link does not carry the lowest level", metadata: ["level": "\(current.level)"])
        }
    }

    /// Sends `extraBitRate` more for about a second, in ten slices, as RTCP APP padding.
    private func probe(extraBitRate: Int) {
        let slice = extraBitRate / 8 / 10
        guard slice > 0 else { return }
        for index in 0..<10 {
            transport.eventLoop.scheduleTask(in: .milliseconds(Int64(index) * 100)) { [transport] in
                transport.sendPadding(bytes: slice)
            }
        }
    }
}
