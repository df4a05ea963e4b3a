import NIOCore
import RTSP

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
}

/// A player of a stream through a `PacketSink`: it starts on the cached GOP's IDR and catches up
/// to live as an RTSP player does, and can be moved between the rungs of its ladder at their
/// aligned IDRs. The narrow door through which another protocol's players share RTSP's media path.
public final class PacketPlayer: Sendable {
    let subscriber: MediaSubscriber
    private let sink: any PacketSink

    public init(sink: any PacketSink, hasAudio: Bool, audioRate: Int, maximumBacklog: Int = 4 * 1024 * 1024,
                onEnd: @escaping @Sendable () -> Void) {
        self.sink = sink
        subscriber = MediaSubscriber(transport: SinkTransport(sink: sink), hasVideo: true, hasAudio: hasAudio, audioRate: audioRate,
                                     maximumBacklog: maximumBacklog, onEnd: onEnd)
    }

    /// Starts delivery of `stream` (its cached GOP first).
    public func play(_ stream: LiveStream) {
        stream.subscribe(subscriber)
    }

    /// Moves the player to `target` at its next IDR (its ladder's IDRs are aligned).
    @discardableResult
    public func switchTo(_ target: LiveStream, flush: Bool = false) -> Bool { subscriber.switchTo(target, flush: flush) }

    /// Drops what is owed up to the next IDR (a player too far behind).
    public func skipToNextKeyframe() { subscriber.skipToNextKeyframe() }

    /// Stops delivery (the viewer left).
    public func stop() {
        subscriber.stopCatchUp()
        subscriber.leave()
    }

    /// The SSRCs its packets carry (video, audio).
    public var ssrcs: (video: UInt32, audio: UInt32) { subscriber.ssrcs }
}

/// A `PacketSink` as a `PlayerTransport`: no TCP to ask, no padding, nothing queued of its own.
struct SinkTransport: PlayerTransport {
    let sink: any PacketSink
    func send(_ packets: [RTPPacket], track: Int) { sink.send(packets, track: track) }
    func send(_ rtcp: RTCPPacket, track: Int) { sink.send(rtcp, track: track) }
    var pendingBytes: Int { sink.pendingBytes }
    func close() { sink.close() }
    var eventLoop: EventLoop { sink.eventLoop }
    func connectionInfo() -> EventLoopFuture<TCPInfo?> { sink.eventLoop.makeSucceededFuture(nil) }
    func sendPadding(bytes: Int) {}
    var sentMedia: SentMediaLog? { nil }
    func dropQueued(paddingOnly: Bool) {}
}
