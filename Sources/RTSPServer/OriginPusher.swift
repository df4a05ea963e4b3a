import Dispatch
import Logging
import MediaCore
import NIOCore
import NIOPosix
import RTSP
import Synchronization

/// Pushes one stream to an origin server as `<origin>/<path>` with ANNOUNCE/SETUP/RECORD over TCP
/// (RTP interleaved), the way Red5's transcoder hands variants to its origin. Waits while the
/// stream has nothing to send; reconnects with exponential back-off (1 s … 30 s) when the origin
/// refuses or goes away, counting every attempt.
public final class OriginPusher: Sendable {
    public struct Statistics: Sendable {
        public var connectionAttempts = 0
        public var failures = 0
        public var connected = false
        public var lastError: String?
    }

    public let stream: LiveStream
    public let originHost: String
    public let originPort: Int
    private let group: EventLoopGroup
    private let logger: Logger
    /// What the push's pacing is measured on.
    private let clock: NodeClock
    private let state = Mutex<(statistics: Statistics, stopped: Bool, channel: Channel?, subscriber: MediaSubscriber?, backoff: Double)>(
        (Statistics(), false, nil, nil, 1))

    public static let maximumBackoff = 30.0

    /// - Parameter origin: `rtsp://host:port`.
    public init?(stream: LiveStream, origin: String, group: EventLoopGroup, logger: Logger, clock: NodeClock = .system) {
        guard let (host, port) = Self.hostAndPort(origin) else { return nil }
        self.clock = clock
        self.stream = stream
        self.originHost = host
        self.originPort = port
        self.group = group
        var logger = logger
        logger[metadataKey: "stream.guid"] = "\(stream.path)"
        logger[metadataKey: "origin"] = "\(origin)"
        self.logger = logger
    }

    public static func hostAndPort(_ url: String) -> (String, Int)? {
        guard url.hasPrefix("rtsp://") else { return nil }
        let authority = url.dropFirst(7).prefix { $0 != "/" }
        let parts = authority.split(separator: ":")
        guard let host = parts.first, !host.isEmpty else { return nil }
        let port = parts.count > 1 ? Int(parts[1]) : 554
        guard let port, (1...65535).contains(port) else { return nil }
        return (String(host), port)
    }

    public var statistics: Statistics { state.withLock { $0.statistics } }

    public func start() {
        schedule(after: 0)
    }

    public func stop() {
        let (channel, subscriber) = state.withLock { state -> (Channel?, MediaSubscriber?) in
            state.stopped = true
            defer { state.channel = nil; state.subscriber = nil }
            return (state.channel, state.subscriber)
        }
        if let subscriber { stream.unsubscribe(subscriber) }
        channel?.close(promise: nil)
    }

    private func schedule(after seconds: Double) {
        guard !state.withLock({ $0.stopped }) else { return }
        group.next().scheduleTask(in: .milliseconds(Int64(seconds * 1000))) { [self] in attempt() }
    }

    private func attempt() {
        guard !state.withLock({ $0.stopped }) else { return }
        // Nothing to announce until the variant has a format; look again shortly.
        guard stream.isPlayable, let description = stream.sessionDescription() else {
            schedule(after: 0.5)
            return
        }
        state.withLock { $0.statistics.connectionAttempts += 1 }
        let handler = OriginClientHandler(pusher: self, description: description,
                                          url: "rtsp://\(originHost):\(originPort)/\(stream.path)")
        ClientBootstrap(group: group)
            .connectTimeout(.seconds(5))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandlers([ByteToMessageHandler(RTSPFrameDecoder()), handler])
                }
            }
            .connect(host: originHost, port: originPort)
            .whenComplete { [self] result in
                switch result {
                case let .success(channel):
                    let stopped = state.withLock { state -> Bool in
                        state.channel = channel
                        return state.stopped
                    }
                    if stopped { channel.close(promise: nil) }
                case let .failure(error):
                    failed("cannot connect: \(error)")
                }
            }
    }

    /// The origin accepted RECORD: media flows from now on.
    func recording(on channel: Channel, hasAudio: Bool) {
        let subscriber = MediaSubscriber(transport: InterleavedTransport(channel: channel, channels: hasAudio ? [0: 0, 1: 2] : [0: 0], clock: clock),
                                         hasVideo: true, hasAudio: hasAudio, audioRate: stream.audio?.sampleRate ?? 0) { [weak self] in
            // The stream ended (its job is over): hang up; a later job on the same stream reconnects.
            self?.state.withLock { $0.subscriber = nil }
        }
        let stopped = state.withLock { state -> Bool in
            state.subscriber = subscriber
            state.statistics.connected = true
            state.backoff = 1
            return state.stopped
        }
        guard !stopped else { return }
        logger.info("pushing to origin")
        stream.subscribe(subscriber)
    }

    /// The origin refused, failed or closed the connection.
    func failed(_ reason: String) {
        let (subscriber, delay, stopped) = state.withLock { state -> (MediaSubscriber?, Double, Bool) in
            defer {
                state.subscriber = nil
                state.channel = nil
                state.backoff = min(state.backoff * 2, Self.maximumBackoff)
            }
            if state.statistics.connected || state.statistics.lastError != reason { state.statistics.failures += 1 }
            state.statistics.connected = false
            state.statistics.lastError = reason
            return (state.subscriber, state.backoff, state.stopped)
        }
        if let subscriber { stream.unsubscribe(subscriber) }
        guard !stopped else { return }
        logger.warning("origin push interrupted: \(reason); retrying in \(delay) s")
        schedule(after: delay)
    }
}

/// Speaks the publisher's side of RTSP to an origin: ANNOUNCE, SETUP per track, RECORD.
final class OriginClientHandler: ChannelInboundHandler {
    typealias InboundIn = RTSPInbound
    typealias OutboundOut = ByteBuffer

    private let pusher: OriginPusher
    private let description: SessionDescription
    private let url: String
    private var cseq = 0
    private var session: String?
    private var step = Step.announce
    private var failedOnce = false

    enum Step: Equatable { case announce, setup(Int), record, recording }

    init(pusher: OriginPusher, description: SessionDescription, url: String) {
        self.pusher = pusher
        self.description = description
        self.url = url
    }

    func channelActive(context: ChannelHandlerContext) {
        var body = description
        body.origin = "- 0 0 IN IP4 127.0.0.1"
        send(context: context, method: "ANNOUNCE", uri: url, headers: ["Content-Type": "application/sdp"], body: Array(body.render().utf8))
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case let .response(response) = unwrapInboundIn(data) { handle(response, context: context) }
    }

    private func handle(_ response: RTSPResponse, context: ChannelHandlerContext) {
        guard response.status == 200 else {
            fail(context: context, "origin answered \(response.status) \(response.reason) to \(step)")
            return
        }
        if let id = response.headers.sessionID {
            guard !id.isEmpty else {
                fail(context: context, "origin answered \(step) with an empty Session header")
                return
            }
            session = id
        }
        switch step {
        case .announce:
            setup(0, context: context)
        case let .setup(track):
            if track + 1 < description.media.count { setup(track + 1, context: context) } else {
                step = .record
                send(context: context, method: "RECORD", uri: url, headers: ["Range": "npt=0.000-"])
            }
        case .record:
            step = .recording
            pusher.recording(on: context.channel, hasAudio: description.media.count > 1)
        case .recording:
            break  // answers to keep-alives
        }
    }

    private func setup(_ track: Int, context: ChannelHandlerContext) {
        step = .setup(track)
        let control = description.media[track].control ?? "trackID=\(track)"
        send(context: context, method: "SETUP", uri: "\(url)/\(control)",
             headers: ["Transport": "RTP/AVP/TCP;unicast;interleaved=\(track * 2)-\(track * 2 + 1);mode=record"])
    }

    private func send(context: ChannelHandlerContext, method: String, uri: String, headers: RTSPHeaders = [:], body: [UInt8] = []) {
        cseq += 1
        var request = RTSPRequest(method: method, uri: uri, headers: headers, body: body)
        request.headers.set("CSeq", String(cseq))
        request.headers.set("User-Agent", "abr-worker")
        if let session { request.headers.set("Session", session) }
        var out = context.channel.allocator.buffer(capacity: 512 + body.count)
        request.write(to: &out)
        context.writeAndFlush(wrapOutboundOut(out), promise: nil)
    }

    private func fail(context: ChannelHandlerContext, _ reason: String) {
        guard !failedOnce else { return }
        failedOnce = true
        pusher.failed(reason)
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        fail(context: context, step == .recording ? "origin closed the connection" : "origin closed the connection during \(step)")
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        fail(context: context, error is RTSPParseError ? "unreadable reply from origin: \(error)" : "\(error)")
    }
}
