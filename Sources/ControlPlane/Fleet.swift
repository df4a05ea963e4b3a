import Foundation
import Ingest
import Logging
import MediaCore
import ServiceLifecycle
import Store
import Synchronization

/// Which node gets a new job: the pure part of placement, testable with records alone.
///
/// A node qualifies when its heartbeat is fresh, it is `INSERVICE`, it is in the group, and its
/// free cores (capacity × maximum load − measured encode cores − jobs placed on it that its own
/// figures do not count yet) cover the job's estimate. The most free cores win, as Red5 ranks
/// nodes by an expression under a limit; ties go to fewer subscribers, then the node id.
public enum PlacementPolicy {
    /// Seconds without a heartbeat after which a node is taken for dead: four missed 2-s heartbeats
    /// and a half, so a dead node is routed around within 10 s of its death, whenever it falls
    /// between two heartbeats.
    public static let heartbeatExpiry = 9.0
    /// Seconds a placement counts against its node before the node's own figures take over.
    public static let reservationLifetime = 15.0

    public static func reservedCores(on node: NodeRecord, placements: [Placement]) -> Double {
        placements.filter { $0.nodeId == node.nodeId && $0.age < reservationLifetime && !node.streams.contains($0.streamGuid) }
            .reduce(0) { $0 + $1.cores }
    }

    public static func isAlive(_ node: NodeRecord, expiry: Double = heartbeatExpiry) -> Bool { node.age < expiry }

    /// The nodes that can take a job of `cores`, best first.
    public static func rank(needing cores: Double, group: String, nodes: [NodeRecord], placements: [Placement],
                            expiry: Double = heartbeatExpiry) -> [NodeRecord] {
        nodes.filter { $0.nodeGroup == group && $0.state == .inService && isAlive($0, expiry: expiry) }
            .map { ($0, $0.freeCores - reservedCores(on: $0, placements: placements)) }
            .filter { $0.1 >= cores }
            .sorted { a, b in
                if a.1 != b.1 { return a.1 > b.1 }
                if a.0.subscribers != b.0.subscribers { return a.0.subscribers < b.0.subscribers }
                return a.0.nodeId < b.0.nodeId
            }
            .map(\.0)
    }

    /// The node already serving `ladderGuid` (its job has or awaits a publisher), if one is alive
    /// and not in HARD_SUNSET; else the live, in-service node it was last placed on.
    public static func serving(_ ladderGuid: String, nodes: [NodeRecord], placements: [Placement],
                               expiry: Double = heartbeatExpiry) -> NodeRecord? {
        let alive = nodes.filter { isAlive($0, expiry: expiry) && $0.state != .hardSunset }
        if let running = alive.first(where: { $0.streams.contains(ladderGuid) }) { return running }
        guard let placed = placements.first(where: { $0.streamGuid == ladderGuid && $0.age < reservationLifetime }) else { return nil }
        return alive.first { $0.nodeId == placed.nodeId && $0.state == .inService }
    }
}

/// This node's place in the fleet: who it is, the state it is in, and where it listens.
public final class FleetMembership: Sendable {
    public struct Identity: Sendable {
        public var nodeId: String
        public var nodeGroup = "default"
        public var subGroup = "default"
        public var role = "transcoder"
        /// The host publishers and players reach this node at.
        public var address = "127.0.0.1"
        public var heartbeatInterval = 2.0

        public init(nodeId: String = FleetMembership.defaultNodeId()) {
            self.nodeId = nodeId
        }
    }

    public struct Ports: Sendable, Equatable {
        public var rtsp = 0
        public var http = 0
        /// The other publish protocols' listeners.
        public var ingest: [IngestEndpoint] = []
    }

    public let identity: Identity
    let state = Mutex<NodeState>(.inService)
    let ports = Mutex(Ports())

    public init(identity: Identity) {
        self.identity = identity
    }

    public var nodeState: NodeState { state.withLock { $0 } }

    public func setPorts(_ update: (inout Ports) -> Void) { ports.withLock { update(&$0) } }

    /// The ports the node listens on, as they are bound (HTTP's is 0 until its server runs).
    public var listeningPorts: Ports { ports.withLock { $0 } }

    /// The host name and a random suffix: unique per process, so a restarted node is a new member
    /// and the old record simply expires.
    public static func defaultNodeId() -> String {
        let host = ProcessInfo.processInfo.hostName.split(separator: ".").first.map(String.init) ?? "node"
        return "\(host)-\(UUID().uuidString.prefix(8).lowercased())"
    }

    /// Why this node takes no publisher for a new job now (nil: it does). A publisher coming back
    /// to a job waiting for it is not a new job: SOFT_SUNSET lets it resume.
    func refusal(resuming: Bool) -> String? {
        switch nodeState {
        case .inService: nil
        case .softSunset: resuming ? nil : "node \(identity.nodeId) is in SOFT_SUNSET: it takes no new publisher (ask the stream manager for another node)"
        case .hardSunset: "node \(identity.nodeId) is in HARD_SUNSET: it is leaving service"
        }
    }
}

/// A node as a node request answers it: the fields of the Stream Manager 2.0 answer, plus the
/// URLs a client needs when the node does not listen on the default ports.
public struct NodeAnswer: Encodable, Sendable, Equatable {
    public var streamGuid: String
    public var serverAddress: String
    public var nodeRole: String
    public var subGroup: String
    public var nodeState: String
    public var subscribers: Int
    public var nodeId: String
    public var rtspPort: Int
    public var rtsp: String
    /// A publish URL for each other protocol the node listens on, by scheme (`rtmp`, `srt`): each
    /// is a field of the answer named by its scheme.
    public var publishURLs: [String: String]
    public var http: String

    init(streamGuid: String, role: String, node: NodeRecord) {
        self.streamGuid = streamGuid
        serverAddress = node.address
        nodeRole = role
        subGroup = node.subGroup
        nodeState = node.state.rawValue
        subscribers = node.subscribers
        nodeId = node.nodeId
        rtspPort = node.rtspPort
        let host = node.address.contains(":") ? "[\(node.address)]" : node.address
        rtsp = "rtsp://\(host):\(node.rtspPort)/\(streamGuid)"
        publishURLs = Dictionary((node.ingest ?? []).map {
            ($0.ingestProtocol.scheme, $0.ingestProtocol.publishURL(host: node.address, port: $0.port, stream: streamGuid))
        }, uniquingKeysWith: { first, _ in first })
        http = "http://\(host):\(node.httpPort)"
    }

    private struct Key: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(_ string: String) { stringValue = string }
        init?(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Key.self)
        try container.encode(streamGuid, forKey: Key("streamGuid"))
        try container.encode(serverAddress, forKey: Key("serverAddress"))
        try container.encode(nodeRole, forKey: Key("nodeRole"))
        try container.encode(subGroup, forKey: Key("subGroup"))
        try container.encode(nodeState, forKey: Key("nodeState"))
        try container.encode(subscribers, forKey: Key("subscribers"))
        try container.encode(nodeId, forKey: Key("nodeId"))
        try container.encode(rtspPort, forKey: Key("rtspPort"))
        try container.encode(rtsp, forKey: Key("rtsp"))
        for (scheme, url) in publishURLs.sorted(by: { $0.key < $1.key }) { try container.encode(url, forKey: Key(scheme)) }
        try container.encode(http, forKey: Key("http"))
    }
}

public enum NodeRequestFailure: Error, Sendable, Equatable {
    /// 400: a malformed group or stream name, or a publish of a lower rung.
    case badRequest(String)
    /// 404: nothing provisioned under that name in that group, or nothing live to subscribe to.
    case notFound(String)
    /// 503: no node of the group has room; ask again after `retryAfter` seconds.
    case noRoom(String, retryAfter: Int)
    /// 503: the store cannot be reached.
    case storeUnavailable(String)
    /// 429: this client address reserved room for too many streams of late; ask again after `retryAfter` seconds.
    case tooManyPlacements(String, retryAfter: Int)

    public var message: String {
        switch self {
        case let .badRequest(m), let .notFound(m), let .noRoom(m, _), let .storeUnavailable(m), let .tooManyPlacements(m, _): m
        }
    }
}

/// Keeps this node in the fleet: a heartbeat into the registry about every 2 s (with its state,
/// capacity and streams), the state an operator asked for through another node, provisions made
/// through other nodes, and this node's placements. Leaves the registry when the node stops.
public struct FleetService: Service {
    let plane: ControlPlane

    public init(plane: ControlPlane) {
        self.plane = plane
    }

    public func run() async throws {
        let changes = plane.store.provisionChanges()
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                group.addTask {
                    for await _ in changes { await plane.synchronizeProvisions() }
                }
                group.addTask {
                    while !Task.isCancelled {
                        await plane.heartbeat()
                        try? await Task.sleep(for: .seconds(plane.fleet.identity.heartbeatInterval))
                    }
                }
            }
        }
        try? await plane.store.removeNode(plane.fleet.identity.nodeId)
    }
}

/// SIGTERM's drain: SOFT_SUNSET, wait for the node's jobs to end (their publishers stop) up to
/// `timeout`, then HARD_SUNSET. Listed last among the services so it runs first at shutdown, while
/// RTSP and HTTP still serve. SIGINT (`interrupted` set) skips the wait.
public struct DrainService: Service {
    let plane: ControlPlane
    let timeout: Double
    let interrupted: @Sendable () -> Bool
    let logger: Logger

    public init(plane: ControlPlane, timeout: Double, interrupted: @escaping @Sendable () -> Bool, logger: Logger) {
        self.plane = plane
        self.timeout = timeout
        self.interrupted = interrupted
        self.logger = logger
    }

    public func run() async throws {
        try? await gracefulShutdown()
        if plane.fleet.nodeState == .inService { await plane.setNodeState(.softSunset) }
        let deadline = ContinuousClock.now + .seconds(timeout)
        var waited = false
        while !plane.node.activeJobs.isEmpty, ContinuousClock.now < deadline, !interrupted() {
            if !waited {
                logger.info("draining: waiting up to \(Int(timeout)) s for \(plane.node.activeJobs.count) job(s) to end")
                waited = true
            }
            try? await Task.sleep(for: .milliseconds(200))
        }
        let left = plane.node.activeJobs.count
        logger.info(left == 0 ? "drained: no job left" : "drain ended with \(left) job(s) still live; ending them")
        if plane.fleet.nodeState != .hardSunset { await plane.setNodeState(.hardSunset, releasingPublishersAfter: 0) }
    }
}
