import AccessTokens
import Dispatch
import Ingest
import Logging
import MediaCore
import NIOCore
import NIOPosix
import RTSP
import ServiceLifecycle
import Synchronization

/// The node's RTSP server (RFC 2326) on one port for publishers and players, with RTP over
/// TCP (interleaved) or UDP (one shared server port pair, routed by source address).
public final class RTSPService: Sendable {
    public struct Configuration: Sendable {
        public var host = "127.0.0.1"
        public var port = 8554
        /// The server's RTP port (RTCP is the next); 0 picks a free even pair.
        public var rtpPort = 0
        /// Seconds without a request or media before a session ends.
        public var sessionTimeout = 60
        /// What sessions, players and their adaptation measure time on.
        public var clock = NodeClock.system
        /// Player sessions at once.
        public var maximumSessions = 256
        /// Publisher sessions at once, counted apart from players so viewers cannot crowd out publishers.
        public var maximumPublishers = 64
        /// Sessions one RTSP connection may open (a player or publisher needs one), and one IP address
        /// over all its connections: one client cannot take every player slot.
        public var maximumSessionsPerConnection = 4
        public var maximumSessionsPerAddress = 32
        /// TCP connections at once, and from one IP address.
        public var maximumConnections = 1024
        public var maximumConnectionsPerAddress = 64
        /// Seconds a publisher's session must have been silent before a new connection that passes
        /// the same authentication may take its stream over.
        public var publisherTakeoverSilence = 5.0
        /// Seconds an announced publisher has to send RECORD before its stream is released.
        public var announceTimeout = 10
        /// When set, DESCRIBE and player SETUP require these (Digest or Basic).
        public var playerCredentials: StreamCredentials?
        /// Signed playback: streams whose provision asks for it need a `?token=` at DESCRIBE or
        /// the first SETUP. Nil leaves every stream open.
        public var playback: PlaybackAuthority?
        public var limits = RTSPMessageParser.Limits()
        /// Bytes a player may have queued before it alone skips to the next IDR.
        public var playerBacklogLimit = 4 * 1024 * 1024
        /// The largest picture (width × height from the SDP's SPS) a publisher may announce.
        public var maximumPublishPixels = PublishAdmission.defaultMaximumPixels
        /// SO_SNDBUF for RTSP connections; nil leaves the kernel's autotuning (what production wants).
        public var socketSendBuffer: Int?
        public init() {}
    }

    static let supportedMethods = "OPTIONS, DESCRIBE, ANNOUNCE, SETUP, PLAY, RECORD, PAUSE, TEARDOWN, GET_PARAMETER, SET_PARAMETER"

    public let configuration: Configuration
    public let registry: StreamRegistry
    /// Credentials, the node's policy and the publisher slot, as every protocol admits a publish.
    let gate: PublishGate
    let logger: Logger
    /// Refused connections and failed authentications: one log line a second at most.
    let refusals = RefusalLog()
    let sessions = SessionTable()
    let authenticator = RTSPAuthenticator(secret: RTSPAuthenticator.randomSecret())
    private let connections: ConnectionQuota
    private let threads: Int
    /// Made by `start`, so a service that only handles connections given to it (tests, fuzzing) owns no threads.
    private let eventLoops = Mutex<MultiThreadedEventLoopGroup?>(nil)
    private let channels = Mutex<(server: Channel?, rtp: Channel?, rtcp: Channel?, sweep: RepeatedTask?)>((nil, nil, nil, nil))
    private let switchObservers = Mutex<[@Sendable (PlayerSwitchEvent) -> Void]>([])
    /// Why new players are turned away (the node is leaving service), or nil.
    private let playerRefusal = Mutex<String?>(nil)

    public init(configuration: Configuration, registry: StreamRegistry, policy: any PublishPolicy,
                logger: Logger = Logger(label: "abr.rtsp"), threads: Int = 1) {
        self.configuration = configuration
        connections = ConnectionQuota(total: configuration.maximumConnections, perAddress: configuration.maximumConnectionsPerAddress)
        self.registry = registry
        gate = PublishGate(policy: policy, slots: registry.publishers, takeoverSilence: configuration.publisherTakeoverSilence)
        self.logger = logger
        self.threads = max(1, threads)
    }

    /// The bound RTSP port (after `start`).
    public var port: Int? { channels.withLock { $0.server?.localAddress?.port } }

    var udpPorts: (rtp: Int, rtcp: Int)? {
        channels.withLock { state in
            guard let rtp = state.rtp?.localAddress?.port, let rtcp = state.rtcp?.localAddress?.port else { return nil }
            return (rtp, rtcp)
        }
    }

    var udpChannels: (rtp: Channel, rtcp: Channel)? {
        channels.withLock { state in
            guard let rtp = state.rtp, let rtcp = state.rtcp else { return nil }
            return (rtp, rtcp)
        }
    }

    public var sessionCount: Int { sessions.count }

    /// Counts a new connection in; false when the node or that address is at its limit.
    func admitConnection(from address: String) -> Bool { connections.admit(address) }

    func releaseConnection(from address: String) { connections.release(address) }

    public var connectionCount: Int { connections.open }

    /// Binds the RTSP port and the UDP pair; returns the RTSP port.
    @discardableResult
    public func start() throws -> Int {
        let group = eventLoops.withLock { existing in
            if let existing { return existing }
            let made = MultiThreadedEventLoopGroup(numberOfThreads: threads)
            existing = made
            return made
        }
        let rtp: Channel, rtcp: Channel, server: Channel
        do {
            (rtp, rtcp) = try bindUDPPair(group: group)
            do {
                server = try bindRTSP(group: group)
            } catch {
                try? rtp.close().wait()
                try? rtcp.close().wait()
                throw error
            }
        } catch {
            // A start that fails (the port is taken) holds nothing: no UDP pair, no event-loop
            // threads, so an in-process caller may try again on other ports.
            try? eventLoops.withLock { group in defer { group = nil }; return group }?.syncShutdownGracefully()
            throw error
        }
        let sweep = group.next().scheduleRepeatedTask(initialDelay: .seconds(1), delay: .seconds(1)) { [self] _ in
            expireSessions()
            sendReceiverReports()
        }
        channels.withLock { $0 = (server, rtp, rtcp, sweep) }
        watchUDP(rtp: rtp, rtcp: rtcp, group: group)
        logger.info("RTSP listening", metadata: ["rtsp.port": "\(server.localAddress?.port ?? 0)",
                                                 "rtp.ports": "\(rtp.localAddress?.port ?? 0)-\(rtcp.localAddress?.port ?? 0)"])
        return server.localAddress?.port ?? configuration.port
    }

    private func bindRTSP(group: MultiThreadedEventLoopGroup) throws -> Channel {
        var bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .sharingLoopsFairly()
        if let size = configuration.socketSendBuffer {
            bootstrap = bootstrap.childChannelOption(.socketOption(.so_sndbuf), value: SocketOptionValue(size))
        }
        return try bootstrap
            .childChannelInitializer { [self] channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(IdleStateHandler(readTimeout: .seconds(Int64(configuration.sessionTimeout) * 2)))
                    try channel.pipeline.syncOperations.addHandlers(makeConnectionHandlers())
                }
            }
            .bind(host: configuration.host, port: configuration.port).wait()
    }

    /// The handlers that serve one RTSP connection (framing, then requests and media); `start`
    /// puts them on every accepted socket.
    public func makeConnectionHandlers() -> [any ChannelHandler] {
        RTSPConnectionHandler.pipeline(server: self)
    }

    private func bindUDPPair(group: MultiThreadedEventLoopGroup, port fixedPort: Int? = nil) throws -> (Channel, Channel) {
        func bind(_ port: Int) throws -> Channel {
            try DatagramBootstrap(group: group)
                .channelOption(.socketOption(.so_reuseaddr), value: 1)
                .channelInitializer { [self] channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(DatagramHandler(server: self))
                    }
                }
                .bind(host: configuration.host, port: port).wait()
        }
        if let port = fixedPort ?? (configuration.rtpPort != 0 ? configuration.rtpPort : nil) {
            return (try bind(port), try bind(port + 1))
        }
        // RTP wants an even port with RTCP just above it: try until a pair is free.
        for _ in 0..<50 {
            let rtp = try bind(0)
            guard let port = rtp.localAddress?.port, port % 2 == 0, port < 65535, let rtcp = try? bind(port + 1) else {
                try? rtp.close().wait()
                continue
            }
            return (rtp, rtcp)
        }
        throw IOError(errnoCode: EADDRINUSE, reason: "no free UDP port pair for RTP/RTCP")
    }

    /// One UDP pair serves every UDP publisher and player, and SwiftNIO closes a datagram socket
    /// on most send errors. Destinations are checked at SETUP, but should a socket close anyway
    /// (a firewall's EPERM, say), the pair is bound again on the same ports and the log says so:
    /// one destination must never take UDP away from the whole node.
    private func watchUDP(rtp: Channel, rtcp: Channel, group: MultiThreadedEventLoopGroup) {
        let rebind: @Sendable (Result<Void, Error>) -> Void = { [self] _ in
            let current = channels.withLock { state -> (Channel, Channel)? in
                guard state.server != nil, let rtp = state.rtp, let rtcp = state.rtcp, !rtp.isActive || !rtcp.isActive else { return nil }
                return (rtp, rtcp)
            }
            guard let (oldRTP, oldRTCP) = current, let rtpPort = oldRTP.localAddress?.port else { return }
            // Off the event loop: binding waits on it.
            DispatchQueue.global().async { [self] in
                logger.error("a shared UDP socket closed; binding the RTP/RTCP pair again", metadata: ["rtp.port": "\(rtpPort)"])
                try? oldRTP.close().wait()
                try? oldRTCP.close().wait()
                do {
                    let (newRTP, newRTCP) = try bindUDPPair(group: group, port: rtpPort)
                    let stillRunning = channels.withLock { state -> Bool in
                        guard state.server != nil else { return false }
                        state.rtp = newRTP
                        state.rtcp = newRTCP
                        return true
                    }
                    guard stillRunning else {
                        newRTP.close(promise: nil)
                        newRTCP.close(promise: nil)
                        return
                    }
                    watchUDP(rtp: newRTP, rtcp: newRTCP, group: group)
                } catch {
                    logger.critical("cannot bind the UDP pair again: \(error); UDP publishers and players are not served")
                }
            }
        }
        rtp.closeFuture.whenComplete(rebind)
        rtcp.closeFuture.whenComplete(rebind)
    }

    static let receiverReportInterval: UInt64 = 5_000_000_000

    /// RTCP receiver reports to publishers, on the transport each track uses.
    private func sendReceiverReports() {
        let udp = udpChannels
        for session in sessions.all {
            for (transport, report) in session.receiverReportsIfDue(interval: Self.receiverReportInterval) {
                var payload = session.connection.allocator.buffer(capacity: 64)
                report.write(to: &payload)
                switch transport.lower {
                case let .tcp(channels?):
                    var frame = session.connection.allocator.buffer(capacity: payload.readableBytes + 4)
                    RTSPSerialization.writeInterleaved(channel: channels.upperBound, payload: payload, to: &frame)
                    session.connection.writeAndFlush(frame, promise: nil)
                case let .udp(clientPorts?, _):
                    guard let udp, let ip = session.remoteAddress?.ipAddress,
                          let destination = try? SocketAddress(ipAddress: ip, port: Int(clientPorts.upperBound)) else { continue }
                    udp.rtcp.writeAndFlush(AddressedEnvelope(remoteAddress: destination, data: payload), promise: nil)
                default:
                    continue
                }
            }
        }
    }

    /// The one way a session ends: its publisher's sink or its player's stream is told, and it
    /// leaves the table (its slot and UDP routes are free again). Every refusal, timeout, close and
    /// TEARDOWN comes here, so no path can end a session and leave it counted.
    func end(_ session: ServerSession, reason: String) {
        session.end(reason: reason, registry: registry)
        sessions.remove(session.id)
    }

    func sessionLimits(for role: RTSPSessionStateMachine.Role) -> SessionTable.Limits {
        SessionTable.Limits(role: role == .publisher ? configuration.maximumPublishers : configuration.maximumSessions,
                            perConnection: configuration.maximumSessionsPerConnection,
                            perAddress: configuration.maximumSessionsPerAddress)
    }

    private func expireSessions() {
        let limit = UInt64(configuration.sessionTimeout) * 1_000_000_000
        let recordLimit = UInt64(configuration.announceTimeout) * 1_000_000_000
        for session in sessions.all {
            session.checkAcknowledgements()
            let reason: String
            if session.idleNanoseconds > limit {
                reason = "session timeout"
            } else if session.isAnnouncedWithoutRecord(for: recordLimit) {
                // An ANNOUNCE holds the stream: one that never records must not hold it for a whole session timeout.
                reason = "no RECORD within \(configuration.announceTimeout) s of ANNOUNCE"
            } else {
                continue
            }
            logger.info("session ended: \(reason)", metadata: ["session": "\(session.id)", "stream.guid": "\(session.path)"])
            end(session, reason: reason)
        }
    }

    /// UDP media from publishers (routed by source address) and RTCP from players.
    func receiveDatagram(_ envelope: AddressedEnvelope<ByteBuffer>) {
        guard let route = sessions.route(from: envelope.remoteAddress.routeKey) else { return }
        if route.isRTCP {
            route.session.touch()
            if route.session.role == .player { route.session.receivePlayerRTCP(envelope.data) }
        } else if route.session.role == .player {
            return  // players send no RTP
        } else if let refusal = route.session.receiveRTP(envelope.data, track: route.track, maximumPixels: configuration.maximumPublishPixels,
                                                         forgeable: true) {
            logger.warning("publish stopped: \(refusal)", metadata: ["stream.guid": "\(route.session.path)"])
            end(route.session, reason: refusal)
        }
    }

    /// Moves a player to another stream of its ladder (`live/stream1_3` → `live/stream1_1`) at
    /// that stream's next IDR, on the same RTP session. False when the session is not a playing
    /// player, the target cannot be played, or its audio differs (audio carries on unchanged).
    @discardableResult
    public func switchPlayer(session id: String, to path: String) -> Bool {
        guard let session = sessions.session(id), session.role == .player,
              let subscriber = session.state.withLock({ $0.subscriber }),
              let target = registry.existingStream(path), target.isPlayable,
              target.audio == subscriber.currentStream?.audio else { return false }
        return subscriber.switchTo(target)
    }

    /// Every playing player: what it asked for, where it is now and why, for status pages and tests.
    public func players() -> [PlayerStatus] {
        sessions.all.filter { $0.role == .player }.compactMap(\.playerStatus).sorted { $0.session < $1.session }
    }

    /// Turns new players away with 503 and `reason` (players already playing are not touched);
    /// nil takes them again.
    public func refuseNewPlayers(_ reason: String?) {
        playerRefusal.withLock { $0 = reason }
    }

    var newPlayerRefusal: String? { playerRefusal.withLock { $0 } }

    /// `handler` hears of every move a player's adaptation makes (any thread).
    public func observePlayerSwitches(_ handler: @escaping @Sendable (PlayerSwitchEvent) -> Void) {
        switchObservers.withLock { $0.append(handler) }
    }

    func playerSwitched(_ event: PlayerSwitchEvent) {
        for observer in switchObservers.withLock({ $0 }) { observer(event) }
    }

    /// The sessions playing `path` (the stream they asked for), for operators and tests.
    public func playerSessions(of path: String) -> [String] {
        sessions.all.filter { $0.role == .player && $0.path == path && $0.state.withLock { $0.subscriber != nil } }.map(\.id)
    }

    /// Ends every session and closes the sockets.
    public func shutdown() {
        let state = channels.withLock { state in
            defer { state = (nil, nil, nil, nil) }
            return state
        }
        state.sweep?.cancel()
        for session in sessions.all { end(session, reason: "server shutting down") }
        try? state.server?.close().wait()
        try? state.rtp?.close().wait()
        try? state.rtcp?.close().wait()
        try? eventLoops.withLock { group in defer { group = nil }; return group }?.syncShutdownGracefully()
    }
}

extension RTSPService: DatagramSockets {}

final class DatagramHandler: ChannelInboundHandler {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    private let server: RTSPService

    init(server: RTSPService) {
        self.server = server
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        server.receiveDatagram(unwrapInboundIn(data))
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        // ICMP port unreachable from a player that went away: not a reason to stop serving.
    }
}

#if canImport(Glibc)
import Glibc
#endif

/// In a service group the RTSP server lives until graceful shutdown, then ends every session and
/// closes its sockets. Listed before the services that feed it (the live node's jobs), so the
/// group's reverse-order shutdown lets jobs finish and tell their players before the sockets go.
extension RTSPService: Service {
    public func run() async throws {
        if channels.withLock({ $0.server == nil }) { try start() }
        try? await gracefulShutdown()
        // Closing waits on event loops: on the process's thread pool for blocking work, not the cooperative pool.
        try? await NIOThreadPool.singleton.runIfActive { self.shutdown() }
    }
}
