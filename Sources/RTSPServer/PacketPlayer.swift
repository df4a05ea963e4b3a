import Logging
import MediaCore
import NIOCore
import RTSP
import Synchronization

/// Where a player of another protocol (WebRTC) takes a stream's RTP: the same packets an RTSP
/// player gets (made once per picture, under the player's own SSRC, sequence and timestamps),
/// which the protocol then wraps its own way (header extensions, SRTP, its socket).
public protocol PacketSink: Sendable {
    /// Packets for `track` (0 video, 1 audio), in order.
    func send(_ packets: [RTPPacket], track: Int)
    /// Sender reports and goodbyes, for the player's lip sync and end.
    func send(_ rtcp: RTCPPacket, track: Int)
    /// Bytes taken and not yet handed to the network: the player's backlog.
    var pendingBytes: Int { get }
    /// The stream ended, or the player was closed.
    func close()
    /// Where timed sends for this player run.
    var eventLoop: EventLoop { get }
    /// About `bytes` of padding the player discards, beside the media: a probe of its link.
    func sendPadding(bytes: Int)
    /// The video it holds and has not yet sent is dropped, and what it sent is not resent: the
    /// player moves to another rung from that rung's IDR (a flushing move, a skip).
    func dropQueuedVideo()
    /// As `dropQueuedVideo()` for a skip to the live edge, but the video it holds from its newest
    /// keyframe that has waited less than `age` on is kept; true when there was one (the player
    /// goes on from it), false when everything was dropped.
    func dropQueuedVideo(keepingKeyframeYoungerThan age: Double) -> Bool
    /// What the player's link carries beside each rung's video, as its feedback counts bytes
    /// (the video's headers and encryption, its audio): the rungs' rates the switching policy
    /// compares with its estimate.
    var linkCost: SwitchingPolicy.LinkCost { get }
    /// The queue on the player's path that a packet sent now would meet, seconds (nil: not known).
    var pathQueue: Double? { get }
}

extension PacketSink {
    public func dropQueuedVideo() {}
    public func dropQueuedVideo(keepingKeyframeYoungerThan age: Double) -> Bool {
        dropQueuedVideo()
        return false
    }
    public var linkCost: SwitchingPolicy.LinkCost { .none }
    public var pathQueue: Double? { nil }
}

/// A player of a stream through a `PacketSink`: it starts on the cached GOP's IDR and catches up
/// to live as an RTSP player does, and can be moved between the rungs of its ladder at their
/// aligned IDRs. The narrow door through which another protocol's players share RTSP's media path.
public final class PacketPlayer: Sendable {
    let subscriber: MediaSubscriber
    private let sink: any PacketSink
    private let adaptation = Mutex<PlayerAdaptation?>(nil)

    /// What the player's protocol says of its link.
    public enum Feedback: Sendable {
        /// Per-packet arrivals (WebRTC's transport-wide feedback), given to `observe(_:)`.
        case perPacket
        /// Receiver reports only (a WebRTC peer without transport-wide feedback), given to
        /// `receiverReport(_:track:receiverEstimate:)` and judged as an RTSP player's over UDP.
        case receiverReports
    }

    private let transport: SinkTransport

    /// - Parameter opusAudio: the player takes its stream's Opus (48 kHz) as track 1; without it, no audio.
    /// - Parameter pacedCatchUp: the sink paces what it is given (a WebRTC viewer's pacer): a new
    ///   player's catch-up is handed over only while the sink holds less than this many bytes,
    ///   timed as it is handed over, and a move may end it (`MediaSubscriber.pacedCatchUp`).
    public init(sink: any PacketSink, opusAudio: Bool, feedback: Feedback = .perPacket, maximumBacklog: Int = 4 * 1024 * 1024,
                pacedCatchUp: Int? = nil, clock: NodeClock = .system, onEnd: @escaping @Sendable () -> Void) {
        self.sink = sink
        transport = SinkTransport(sink: sink, log: feedback == .receiverReports ? SentMediaLog(clock: clock) : nil, clock: clock)
        subscriber = MediaSubscriber(transport: transport, hasVideo: true, hasAudio: opusAudio, audioRate: 48000,
                                     audioFeed: .opus, maximumBacklog: maximumBacklog, pacedCatchUp: pacedCatchUp, onEnd: onEnd)
    }

    /// Seconds of media the player's catch-up still holds back (0 once caught up).
    public var catchUpLag: Double { subscriber.catchUpLag }

    /// Starts delivery of `stream` (its cached GOP first).
    public func play(_ stream: LiveStream) {
        stream.subscribe(subscriber)
    }

    /// Moves the player to `target` at its next IDR (its ladder's IDRs are aligned).
    @discardableResult
    public func switchTo(_ target: LiveStream, flush: Bool = false, urgent: Bool = false) -> Bool {
        subscriber.switchTo(target, flush: flush, urgent: urgent)
    }

    /// Drops what is owed up to the next IDR (a player too far behind).
    public func skipToNextKeyframe() { subscriber.skipToNextKeyframe() }

    /// Moves the player between the rungs of `ladder` (level → path) by what `observe(_:)` says
    /// of its link, with the policy RTSP players use; `onSwitch` hears each move.
    public func adapt(registry: StreamRegistry, ladder: [Int: String], logger: Logger,
                      onSwitch: @escaping @Sendable (_ from: Int, _ to: Int, _ reason: String) -> Void) {
        let made = PlayerAdaptation(subscriber: subscriber, transport: transport, registry: registry, ladder: ladder,
                                    logger: logger) { move in onSwitch(move.from, move.to, move.reason) }
        adaptation.withLock { $0 = made }
    }

    /// What the protocol's feedback says of the link (time is replaced by the adaptation's clock).
    public func observe(_ observation: LinkObservation) {
        adaptation.withLock { $0 }?.observe(observation)
    }

    /// A receiver report block about `track` (0 video, 1 audio), with the peer's own estimate of
    /// its link (REMB, bit/s) when it sends one: that caps what the reports say.
    public func receiverReport(_ block: RTCPPacket.ReportBlock, track: Int, receiverEstimate: Double?) {
        adaptation.withLock { $0 }?.receiverReport(block, track: track, ceiling: receiverEstimate)
    }

    /// The rung the player is on, its switches and the adaptation's estimate (bit/s).
    public var level: Int? { adaptation.withLock { $0 }?.level ?? subscriber.currentStream?.rung?.level }
    public var switches: Int { adaptation.withLock { $0 }?.switches ?? 0 }
    public var isAdaptive: Bool { adaptation.withLock { $0 } != nil }
    public var estimate: Double? { adaptation.withLock { $0 }?.estimate }
    /// Which of the job's Opus renditions it gets (its adaptation chooses, `BrowserAudioChoice`).
    public var audioRendition: BrowserAudioRendition { subscriber.audioRendition }

    /// Stops delivery (the viewer left).
    public func stop() {
        adaptation.withLock { $0 }?.stop()
        subscriber.stopCatchUp()
        subscriber.leave()
    }

    /// The SSRCs its packets carry (video, audio).
    public var ssrcs: (video: UInt32, audio: UInt32) { subscriber.ssrcs }
}

/// A `PacketSink` as a `PlayerTransport`: no TCP to ask, nothing queued of its own; with a log,
/// what was sent is kept to check receiver reports against.
struct SinkTransport: PlayerTransport {
    let sink: any PacketSink
    let log: SentMediaLog?
    let clock: NodeClock
    func send(_ packets: [RTPPacket], track: Int) {
        log?.sent(packets, track: track)
        sink.send(packets, track: track)
    }
    func send(_ rtcp: RTCPPacket, track: Int) {
        log?.sent(rtcp, track: track)
        sink.send(rtcp, track: track)
    }
    var pendingBytes: Int { sink.pendingBytes }
    func close() { sink.close() }
    var eventLoop: EventLoop { sink.eventLoop }
    func connectionInfo() -> EventLoopFuture<TCPInfo?> { sink.eventLoop.makeSucceededFuture(nil) }
    func sendPadding(bytes: Int) {
        log?.paddingSent(bytes: bytes)
        sink.sendPadding(bytes: bytes)
    }
    var sentMedia: SentMediaLog? { log }
    var linkCost: SwitchingPolicy.LinkCost { sink.linkCost }
    var pathQueue: Double? { sink.pathQueue }
    func dropQueued(paddingOnly: Bool) {
        if !paddingOnly { sink.dropQueuedVideo() }
    }
    func dropQueued(keepingKeyframeYoungerThan age: Double) -> Bool { sink.dropQueuedVideo(keepingKeyframeYoungerThan: age) }
}
