import Dispatch
import Ingest
import Logging
import MediaCore
import NIOCore
import NIOPosix
import RTMP
import ServiceLifecycle
import Synchronization

/// The node's RTMP ingest (RTMP 1.0, as ffmpeg, OBS and GStreamer publish): one port, publishers
/// only. A publish goes through the same `PublishPolicy` as an RTSP ANNOUNCE and claims the same
/// path in the `StreamRegistry`, so the ladder, interrupts, hints and players downstream are
/// shared, and one stream has one publisher whatever protocols try.
public final class RTMPService: Sendable {
    public struct Configuration: Sendable {
        public var host = "127.0.0.1"
        public var port = 1935
        /// Connections at once, and from one IP address.
        public var maximumConnections = 256
        public var maximumConnectionsPerAddress = 16
        /// Seconds a connection has to finish the handshake and start publishing.
        public var publishDeadline: Int64 = 10
        /// Seconds without a byte from a publisher before its connection is closed.
        public var idleTimeout: Int64 = 30
        /// Seconds a publisher must have been silent before a new connection that passes the same
        /// authentication may take its stream over.
        public var publisherTakeoverSilence = 5.0
        public var limits = RTMPChunkDecoder.Limits()
        /// The largest picture (width × height from the sequence header's SPS) a publisher may send.
        public var maximumPublishPixels = PublishAdmission.defaultMaximumPixels
        /// What its publishers' silences are measured on.
        public var clock = NodeClock.system
        public init() {}
    }

    public let configuration: Configuration
    /// The node's publisher slots: one publisher per stream, whatever its protocol.
    let publishers: PublisherSlots
    /// Credentials, the node's policy and the publisher slot, as every protocol admits a publish.
    let gate: PublishGate
    let logger: Logger
    let connections: ConnectionQuota
    /// Refused connections and failed authentications: one log line a second at most.
    let refusals = RefusalLog()
    /// How long a closing connection waits for its last bytes to go out before it is closed anyway.
    static let closeWait = TimeAmount.seconds(2)
    private let state = Mutex<(group: MultiThreadedEventLoopGroup?, server: Channel?, open: [ObjectIdentifier: Channel])>((nil, nil, [:]))

    public init(configuration: Configuration, publishers: PublisherSlots, policy: any PublishPolicy,
                logger: Logger = Logger(label: "abr.rtmp")) {
        self.configuration = configuration
        self.publishers = publishers
        gate = PublishGate(policy: policy, slots: publishers, takeoverSilence: configuration.publisherTakeoverSilence)
        self.logger = logger
        connections = ConnectionQuota(total: configuration.maximumConnections, perAddress: configuration.maximumConnectionsPerAddress)
    }

    /// The bound port (after `start`).
    public var port: Int? { state.withLock { $0.server?.localAddress?.port } }

    /// Publishers connected now.
    public var connectionCount: Int { connections.open }

    /// Binds the port; returns it.
    @discardableResult
    public func start() throws -> Int {
        let group = state.withLock { state in
            if let group = state.group { return group }
            // A loop per core: a busy connection shares its loop with only part of the others.
            let made = MultiThreadedEventLoopGroup(numberOfThreads: System.coreCount)
            state.group = made
            return made
        }
        let server = try ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .sharingLoopsFairly()
            .childChannelInitializer { [self] channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandlers(makeConnectionHandlers())
                }
            }
            .bind(host: configuration.host, port: configuration.port).wait()
        state.withLock { $0.server = server }
        logger.info("RTMP listening", metadata: ["rtmp.port": "\(server.localAddress?.port ?? 0)"])
        return server.localAddress?.port ?? configuration.port
    }

    /// The handlers that serve one RTMP connection, in pipeline order: the idle timer, framing, the session.
    public func makeConnectionHandlers() -> [any ChannelHandler] {
        [IdleStateHandler(readTimeout: .seconds(configuration.idleTimeout)),
         ByteToMessageHandler(RTMPChunkDecoder(limits: configuration.limits)),
         RTMPConnectionHandler(service: self)]
    }

    func opened(_ channel: Channel) {
        state.withLock { $0.open[ObjectIdentifier(channel)] = channel }
    }

    func closed(_ channel: Channel) {
        _ = state.withLock { $0.open.removeValue(forKey: ObjectIdentifier(channel)) }
    }

    public func shutdown() {
        let (group, server, open) = state.withLock { state in
            defer { state = (nil, nil, [:]) }
            return state
        }
        try? server?.close().wait()
        for channel in open.values { try? channel.close().wait() }
        try? group?.syncShutdownGracefully()
    }
}

extension RTMPService: IngestListener {
    public static let ingestProtocol = IngestProtocol(scheme: "rtmp", name: "RTMP", urlTemplate: "rtmp://{host}:{port}/{stream}",
                                                      note: "publish only")
    public var ingestProtocol: IngestProtocol { Self.ingestProtocol }

    /// The node's RTMP listener, on the context's address, with the defaults for everything else.
    public convenience init(_ context: IngestContext) {
        var configuration = Configuration()
        configuration.host = context.host
        configuration.port = context.port
        configuration.clock = context.clock
        self.init(configuration: configuration, publishers: context.publishers, policy: context.policy)
    }
}

extension RTMPService: Service {
    public func run() async throws {
        if state.withLock({ $0.server == nil }) { try start() }
        try? await gracefulShutdown()
        // Closing waits on event loops: on the process's thread pool for blocking work, not the cooperative pool.
        try? await NIOThreadPool.singleton.runIfActive { self.shutdown() }
    }
}
