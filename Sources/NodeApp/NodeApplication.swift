import ControlPlane
import Foundation
import Ingest
import LiveNode
import Logging
import MediaCore
import TLSTransport
import RTMPServer
import RTSPServer
import SRTServer
import ServiceLifecycle
import Store
import Transcoder
import UnixSignals
import WebRTCServer

/// Why a node could not start: what the operator must fix, said once.
public struct NodeStartFailure: Error, CustomStringConvertible {
    public enum Kind: Sendable {
        /// A provision file given at start is unreadable or invalid.
        case provision
        /// The data directory, the store or a port.
        case environment
    }

    public var kind: Kind
    public var description: String
}

/// A node built and listening, not yet serving: `run()` serves until a shutdown signal (SIGTERM
/// drains, SIGINT ends jobs at once) or `triggerGracefulShutdown()`.
public final class NodeApplication: Sendable {
    public let plane: ControlPlane
    /// The RTSP port it listens on (the one picked when the settings said 0).
    public let rtspPort: Int
    private let group: ServiceGroup

    init(plane: ControlPlane, rtspPort: Int, group: ServiceGroup) {
        self.plane = plane
        self.rtspPort = rtspPort
        self.group = group
    }

    public func run() async throws { try await group.run() }

    /// What SIGTERM does: SOFT_SUNSET, the drain, HARD_SUNSET, then every service ends in order.
    public func triggerGracefulShutdown() async { await group.triggerGracefulShutdown() }
}

/// Builds the node `abr-worker serve` runs: opens the store, restores and loads provisions, binds
/// RTSP (and RTMP and SRT unless off), and assembles the services in their shutdown order. The
/// caller bootstraps logging and metrics (once a process) and passes the metrics in.
///
/// `shutdownSignals` are the signals that stop it; a node run in-process by a test takes none.
public func buildApplication(_ settings: NodeSettings, environment: [String: String] = ProcessInfo.processInfo.environment,
                             metrics: NodeMetrics = NodeMetrics(),
                             shutdownSignals: [UnixSignal] = [.sigterm, .sigint]) async throws -> NodeApplication {
    try settings.validate()
    // Before anything is bound or opened: a certificate that cannot be used stops the node at once.
    let tls = try settings.tlsCertificate.map { try HTTPAPI.tlsContext(certificate: $0, key: settings.tlsKey ?? "") }
    let logger = Logger(label: "abr.serve")
    let dataDirectory = URL(fileURLWithPath: settings.dataDirectory)
    let ladders = try settings.provisionFiles.map { (path: $0, ladder: try ProvisionFile.load(path: $0)) }

    let credentials: NodeCredentials
    do {
        credentials = try NodeCredentials.load(environment: environment, dataDirectory: dataDirectory)
    } catch {
        throw NodeStartFailure(kind: .environment, description: "cannot use the data directory \(dataDirectory.path): \(error)")
    }
    let (store, storeTask) = try await openStore(settings, environment: environment, dataDirectory: dataDirectory)
    logger.info("store", metadata: ["location": "\(store.location)"])
    do {
        return try await assemble(settings, environment: environment, metrics: metrics, shutdownSignals: shutdownSignals, logger: logger,
                                  credentials: credentials, dataDirectory: dataDirectory, ladders: ladders, store: store, storeTask: storeTask,
                                  tls: tls)
    } catch {
        // Nothing serves yet: the store is closed again, so an in-process caller may try again.
        try? await store.close()
        storeTask.cancel()
        throw error
    }
}

/// The control plane, its provisions, the listeners and the services, around an open store.
private func assemble(_ settings: NodeSettings, environment: [String: String], metrics: NodeMetrics, shutdownSignals: [UnixSignal],
                      logger: Logger, credentials: NodeCredentials, dataDirectory: URL, ladders: [(path: String, ladder: Ladder)],
                      store: any NodeStore, storeTask: Task<Void, Never>, tls: TLSContext?) async throws -> NodeApplication {
    var configuration = ControlPlane.Configuration(credentials: credentials)
    configuration.hlsPlayerScript = settings.hlsPlayerScript.map { URL(fileURLWithPath: $0) }
    configuration.tokenLifetime = settings.tokenLifetime
    configuration.sm1AccessToken = environment["ABR_WORKER_SM1_ACCESS_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
    configuration.capacity = CapacityMonitor.Configuration(cores: settings.capacityCores ?? Double(ProcessInfo.processInfo.activeProcessorCount))
    configuration.capacity.maximumLoad = settings.maxLoad
    let descriptors = DescriptorBudget.plan(limit: DescriptorBudget.raiseLimit(), rtsp: settings.maxConnections, http: settings.maxHttpConnections)
    let httpConnections = descriptors.httpConnections
    if descriptors.rtspConnections < settings.maxConnections || httpConnections < settings.maxHttpConnections {
        logger.warning("the descriptor limit (ulimit -n) is \(descriptors.limit): connections capped at \(descriptors.rtspConnections) RTSP and \(httpConnections) HTTP to keep \(DescriptorBudget.reserve) for files and the store; raise it for more")
    } else {
        logger.info("descriptors", metadata: ["limit": "\(descriptors.limit)", "rtsp.connections": "\(descriptors.rtspConnections)",
                                              "http.connections": "\(httpConnections)", "reserve": "\(DescriptorBudget.reserve)"])
    }
    let host = settings.host
    var identity = FleetMembership.Identity(nodeId: settings.nodeId ?? FleetMembership.defaultNodeId())
    identity.nodeGroup = settings.nodeGroup
    identity.subGroup = settings.subGroup
    identity.address = settings.advertiseAddress ?? (["0.0.0.0", "::"].contains(host) ? ProcessInfo.processInfo.hostName : host)
    configuration.identity = identity
    configuration.publisherReleaseAfterHardSunset = settings.grace
    configuration.httpConnections.total = httpConnections
    configuration.httpConnections.perAddress = min(settings.maxHttpConnectionsPerAddress, httpConnections)
    // A connection over the limits holds a descriptor until its 503 is written: as many as the
    // budget has to spare beyond its connections, two per slot at most (none: closed at once).
    configuration.httpConnections.refusing = min(httpConnections * HTTPConnectionLimiter.refusalsPerSlot,
                                                 max(0, descriptors.limit - DescriptorBudget.reserve - descriptors.rtspConnections - httpConnections))
    var nodeConfiguration = LiveNode.Configuration(dataDirectory: dataDirectory)
    nodeConfiguration.grace = settings.grace
    nodeConfiguration.allowUnprovisioned = settings.allowUnprovisioned
    nodeConfiguration.origin = settings.origin
    nodeConfiguration.transcode = settings.transcode
    nodeConfiguration.loadShedder = settings.loadShedding ? .node : nil
    nodeConfiguration.hlsLowLatency = settings.hlsLowLatency
    let registry = StreamRegistry()
    let plane = await ControlPlane(configuration: configuration, nodeConfiguration: nodeConfiguration, registry: registry,
                                   store: store, metrics: metrics)

    let listeners: (rtspPort: Int, services: [any Service])
    do {
        let restored = try await plane.provisions.restore()
        if !restored.restored.isEmpty { logger.info("provisions restored from the store", metadata: ["streams": "\(restored.restored)"]) }
        for problem in restored.problems { logger.error("stored provision no longer valid, left in the store: \(problem)") }
        for (path, ladder) in ladders {
            guard plane.node.ladder(ladder.streamGuid) == nil else {
                logger.info("\(ladder.streamGuid) from \(path) is already provisioned (kept from the store)")
                continue
            }
            try await ProvisionFile.store(path: path, streamGuid: ladder.streamGuid, nodeGroup: settings.nodeGroup, in: plane.provisions)
        }
        listeners = try startListeners(settings, environment: environment, descriptors: descriptors, registry: registry, plane: plane)
    } catch {
        // The provisions' jobs were made waiting for publishers: they end with the failed start.
        plane.drain()
        throw error
    }
    let rtspBase = "rtsp://\(host):\(listeners.rtspPort)"
    plane.setReady(true, rtspBase: rtspBase)

    if !credentials.generated.isEmpty {
        var lines = ["Generated and kept in \(NodeCredentials.fileURL(in: dataDirectory).path) (shown once):"]
        if credentials.generated.contains("ABR_WORKER_ADMIN_PASSWORD") {
            lines.append("  admin user \(credentials.adminUser), password \(credentials.adminPassword)")
        }
        if credentials.generated.contains("ABR_WORKER_JWT_SECRET") { lines.append("  JWT signing secret generated") }
        FileHandle.standardOutput.write(Data((lines.joined(separator: "\n") + "\n").utf8))
    }
    let httpHost = settings.httpHost ?? host
    let served = identity
    let publishTarget = settings.publishLoop.flatMap { file in
        plane.node.ladders.first.map { ladder in (file, LoopPublisher.publishURL(rtspHost: host, port: listeners.rtspPort, ladder: ladder)) }
    }
    let http = try HTTPAPI.makeApplication(plane, host: httpHost, port: settings.httpPort, tls: tls) { port in
        plane.fleet.setPorts { $0.http = port }
        let base = "\(tls == nil ? "http" : "https")://\(httpHost):\(port)"
        // Which group it serves comes first: a provision under another group is never placed here.
        var lines = ["Node \(served.nodeId): serves node group \(served.nodeGroup), sub-group \(served.subGroup)"
                        + " (provisions and node requests name the group; --node-group sets it)",
                     "HTTP: \(base)/  (status page)   API: \(base)/as/v1/...   metrics: \(base)/metrics",
                     "RTSP: \(rtspBase)/<stream guid>"]
        let listening = plane.ingestEndpoints
        for (ingest, _, _) in ingestListeners(settings) {
            if let endpoint = listening.first(where: { $0.ingestProtocol == ingest }) {
                lines.append("\(ingest.name): \(ingest.publishURL(host: settings.host, port: endpoint.port, stream: "<stream guid>"))  (\(ingest.note))")
            } else {
                lines.append("\(ingest.name): off (\(ingest.portOption) -1)")
            }
        }
        lines.append(plane.webrtcPort.map { "WebRTC: \(base)/whep/<stream guid> (WHEP; media on UDP \($0))   player page: \(base)/play/<stream guid>" }
                     ?? "WebRTC: off (--webrtc-port -1)")
        for ladder in plane.node.ladders {
            let credentials = ladder.publisherCredentials.map { " (as user \($0.username), with the provision's password)" } ?? ""
            lines.append("  \(ladder.streamGuid): publish to \(plane.publishURLs(top: ladder.top.streamGuid).joined(separator: " or "))\(credentials)")
            lines.append("    HLS: \(base)\(HLSLayout(ladderGuid: ladder.streamGuid).liveURLPath())")
            lines.append("    RTSP: " + ladder.variants.map { "\(rtspBase)/\($0.streamGuid)" }.joined(separator: " "))
            if plane.webrtcPort != nil {
                lines.append("    WebRTC: " + ladder.variants.map { "\(base)/play/\($0.streamGuid)" }.joined(separator: " "))
            }
        }
        // Unbuffered: scripts and tests read the ports from here while the node runs.
        FileHandle.standardOutput.write(Data((lines.joined(separator: "\n") + "\n").utf8))
    }

    // SIGINT (Ctrl-C) ends jobs at once; SIGTERM (Kubernetes, systemd) drains them first.
    let interrupted = shutdownSignals.contains(.sigint) ? InterruptFlag() : nil
    var services: [any Service] = [StoreService(store: store, task: storeTask, logger: logger)]
    services += listeners.services
    services += [
        NodeService(plane: plane, statusInterval: settings.statusInterval, logger: logger),
        FleetService(plane: plane),
        http,
        MemoryReturn(interval: .seconds(30), logger: logger),
        DrainService(plane: plane, timeout: settings.drainTimeout, interrupted: { interrupted?.isSet ?? false }, logger: logger),
    ]
    // The demo publisher is the node's own: it stops first, so a drain does not wait for it.
    if let (file, url) = publishTarget {
        services.append(LoopPublisher(file: file, url: url, logger: logger))
    }
    // Shutdown runs backwards: the demo publisher stops, the drain (SOFT_SUNSET, jobs end or time
    // out, HARD_SUNSET) runs while RTSP and HTTP still serve, HTTP stops taking requests, the node
    // leaves the registry, jobs finish (segments, playlists, sessions), and last the store is closed.
    let group = ServiceGroup(configuration: .init(services: services, gracefulShutdownSignals: shutdownSignals, logger: logger))
    return NodeApplication(plane: plane, rtspPort: listeners.rtspPort, group: group)
}

/// Opens the store the settings (or `ABR_WORKER_STORE`) name; PostgreSQL is migrated first, and
/// its connection pool runs in the returned task until the store service closes it.
private func openStore(_ settings: NodeSettings, environment: [String: String],
                       dataDirectory: URL) async throws -> (any NodeStore, Task<Void, Never>) {
    let named = settings.store ?? environment["ABR_WORKER_STORE"].flatMap { $0.isEmpty ? nil : $0 }
    let location: StoreLocation
    do {
        location = try named.map(StoreLocation.parse) ?? .sqlite(path: dataDirectory.path + "/")
    } catch {
        throw NodeStartFailure(kind: .environment, description: "ABR_WORKER_STORE: \(error)")
    }
    do {
        switch location {
        case let .sqlite(path):
            return (try SQLiteStore(path: path), Task {})
        case let .postgres(postgres):
            let shared = try PostgresStore(postgres, logger: Logger(label: "abr.store"))
            let task = Task { await shared.run() }
            do {
                try await shared.migrate()
            } catch {
                task.cancel()
                throw error
            }
            return (shared, task)
        }
    } catch {
        let shown = switch location {
        case let .sqlite(path): "sqlite:\(path)"
        case let .postgres(postgres): postgres.redacted
        }
        throw NodeStartFailure(kind: .environment, description: "cannot open the store \(shown): \(String(reflecting: error))")
    }
}

/// RTSP, and RTMP and SRT unless their ports are -1, bound now so a port in use fails the start
/// (and closes those already bound: an in-process caller may try again).
private func startListeners(_ settings: NodeSettings, environment: [String: String], descriptors: DescriptorBudget,
                            registry: StreamRegistry, plane: ControlPlane) throws -> (rtspPort: Int, services: [any Service]) {
    let host = settings.host
    var bound: [() -> Void] = []
    func bind(_ name: String, port: Int, hint: String = "", _ start: () throws -> Int, shutdown: @escaping () -> Void) throws -> Int {
        do {
            let port = try start()
            bound.append(shutdown)
            return port
        } catch {
            for close in bound.reversed() { close() }
            throw NodeStartFailure(kind: .environment, description: "cannot listen for \(name) on \(host):\(port): \(error)\(hint)")
        }
    }

    var rtsp = RTSPService.Configuration()
    rtsp.host = host
    rtsp.port = settings.rtspPort
    rtsp.rtpPort = settings.rtpPort
    rtsp.maximumConnections = descriptors.rtspConnections
    rtsp.maximumConnectionsPerAddress = min(settings.maxConnectionsPerAddress, descriptors.rtspConnections)
    // Players authenticate only when the operator sets both (kept out of argv, which `ps` shows).
    if let user = environment["ABR_WORKER_PLAYER_USER"], !user.isEmpty {
        rtsp.playerCredentials = StreamCredentials(username: user, password: environment["ABR_WORKER_PLAYER_PASSWORD"] ?? "")
    }
    rtsp.playback = plane.playback
    let rtspService = RTSPService(configuration: rtsp, registry: registry, policy: plane.node)
    plane.attachPlayers(rtspService)
    let rtspPort = try bind("RTSP", port: settings.rtspPort, rtspService.start, shutdown: rtspService.shutdown)
    plane.fleet.setPorts { $0.rtsp = rtspPort }
    var services: [any Service] = [rtspService]
    for (ingest, port, make) in ingestListeners(settings) where port >= 0 {
        let listener = make(IngestContext(host: host, port: port, publishers: registry.publishers, policy: plane.node, environment: environment))
        let bound = try bind(ingest.name, port: port, hint: " (\(ingest.portOption) -1 turns \(ingest.name) off)", listener.start, shutdown: listener.shutdown)
        plane.addIngest(IngestEndpoint(ingest, port: bound), host: host)
        services.append(listener)
    }
    if settings.webrtcPort >= 0 {
        var webrtc = WebRTCService.Configuration()
        webrtc.host = host
        webrtc.port = settings.webrtcPort
        webrtc.candidates = settings.webrtcCandidates
        webrtc.maximumSessions = descriptors.rtspConnections
        webrtc.maximumSessionsPerAddress = min(settings.maxConnectionsPerAddress, descriptors.rtspConnections)
        let service: WebRTCService
        do {
            service = try WebRTCService(configuration: webrtc, registry: registry)
        } catch {
            for close in bound.reversed() { close() }
            throw NodeStartFailure(kind: .environment, description: "cannot set up WebRTC's DTLS: \(error)")
        }
        let port = try bind("WebRTC", port: settings.webrtcPort, hint: " (--webrtc-port -1 turns WebRTC off)", service.start, shutdown: service.shutdown)
        plane.attachWebRTC(service)
        plane.setWebRTCPort(port)
        services.append(WebRTCLifecycle(service: service))
    }
    return (rtspPort, services)
}

/// Every publish protocol besides RTSP (which plays too), with its port from the settings (-1:
/// off) and how its listener is made. A new protocol is its module and one line here.
func ingestListeners(_ settings: NodeSettings) -> [(IngestProtocol, port: Int, make: (IngestContext) -> any IngestListener)] {
    [(RTMPService.ingestProtocol, settings.rtmpPort, { RTMPService($0) }),
     (SRTService.ingestProtocol, settings.srtPort, { SRTService($0, latencyMilliseconds: settings.srtLatencyMilliseconds) })]
}

/// The WebRTC port as a swift-service-lifecycle service: it runs until the node shuts down.
struct WebRTCLifecycle: Service {
    let service: WebRTCService
    func run() async throws {
        try? await gracefulShutdown()
        service.shutdown()
    }
}

/// Provision files named at start (`--provision`): read, checked, and stored like one posted to the API.
public enum ProvisionFile {
    /// The file's ladder; its problems carry the file's name (`ProvisionError`, exit 2 from the command line).
    public static func load(path: String, streamGuid: String? = nil) throws -> Ladder {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw ProvisionError(problems: [ProvisionProblem(path: path, message: "cannot read the provision file: \(error.localizedDescription)")])
        }
        do {
            return try ProvisionParser.parse(data, streamGuid: streamGuid)
        } catch {
            throw ProvisionError(problems: error.problems.map { ProvisionProblem(path: "\(path): \($0.path)", message: $0.message) })
        }
    }

    /// Stored as the API would store it: Stream Manager 1.0 meta, one 2.0 provision or a list of them.
    static func store(path: String, streamGuid: String, nodeGroup: String, in book: ProvisionBook) async throws {
        do {
            let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: path)))
            let document = try JSONReader.parse(bytes)
            switch document {
            case .object where document["meta"] != nil:
                _ = try await book.add(streamManager1: bytes, streamGuid: streamGuid)
            case .object:
                _ = try await book.add(streamManager2: Array(JSONValue.array([document]).jsonText.utf8), nodeGroup: nodeGroup)
            default:
                _ = try await book.add(streamManager2: bytes, nodeGroup: nodeGroup)
            }
        } catch {
            throw NodeStartFailure(kind: .provision, description: "cannot provision \(path): \(error)")
        }
    }
}
