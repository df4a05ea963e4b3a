import Foundation
import Ingest

/// What a node keeps, and what a fleet of nodes shares: accepted provisions, the job history,
/// the node registry (who is up, in which state, with how much room) and job placement (which
/// node runs which stream).
///
/// Two stores keep it: `SQLiteStore` for one node (embedded, the default) and `PostgresStore`
/// for a fleet. `--store sqlite:PATH` or `--store postgres://…` picks one (`StoreLocation`).
///
/// Writes are durable before they return: a provision is stored before the API answers 2xx.
public protocol NodeStore: Sendable {
    /// Where it keeps things, without secrets (for logs and the status page).
    var location: String { get }

    // MARK: Provisions
    /// Stores every provision or none: a guid already stored fails the whole batch with
    /// `StoreFailure.alreadyStored`.
    func insert(_ provisions: [StoredProvision]) async throws
    /// All provisions, or one node group's, oldest first.
    func provisions(nodeGroup: String?) async throws -> [StoredProvision]
    func provision(_ streamGuid: String) async throws -> StoredProvision?
    /// True when there was one to delete.
    @discardableResult func deleteProvision(_ streamGuid: String) async throws -> Bool

    // MARK: Job history
    /// Queued: the caller (a job's thread) does not wait for the store.
    func record(_ event: JobEvent)
    /// The most recent events of a stream, oldest first.
    func history(_ streamGuid: String, limit: Int) async throws -> [JobEvent]

    // MARK: Node registry
    /// Writes the node's record with the store's clock as its last sign of life, and returns (and
    /// clears) a state an operator asked for through another node, if any.
    func heartbeat(_ node: NodeRecord) async throws -> NodeState?
    /// Registered nodes with the seconds since each one's last heartbeat (`age`), by the store's clock.
    func nodes() async throws -> [NodeRecord]
    /// Asks node `nodeId` to move to `state` at its next heartbeat. False when no such node.
    func requestState(_ state: NodeState, nodeId: String) async throws -> Bool
    /// A node leaving for good (after draining) removes its record and its placements.
    func removeNode(_ nodeId: String) async throws

    // MARK: Placement
    /// Records that `nodeId` runs, or was chosen to run, `placement.streamGuid`.
    func place(_ placement: Placement) async throws
    func placements() async throws -> [Placement]
    /// Forgets a placement if it still names `nodeId`.
    func releasePlacement(_ streamGuid: String, nodeId: String) async throws

    // MARK: Life
    /// Provisions added or removed through any node of the fleet, as they happen (in a fleet store);
    /// nodes also compare with the store at each heartbeat, so a missed notice is caught up.
    func provisionChanges() -> AsyncStream<Void>
    /// Runs the store's connections until the task is cancelled.
    func run() async
    /// Writes what is queued and closes.
    func close() async throws
}

public enum StoreFailure: Error, Sendable, Equatable, CustomStringConvertible {
    case alreadyStored([String])
    case badLocation(String)

    public var description: String {
        switch self {
        case let .alreadyStored(guids): "already stored: \(guids.joined(separator: ", "))"
        case let .badLocation(reason): reason
        }
    }
}

/// One accepted provision as it was submitted.
public struct StoredProvision: Sendable, Equatable {
    public enum Format: String, Sendable {
        /// Stream Manager 2.0: one element of the provision array.
        case streamManager2 = "sm2"
        /// Stream Manager 1.0: a `meta` document; the guid comes from the URL.
        case streamManager1 = "sm1"
    }

    public var streamGuid: String
    public var nodeGroup: String
    public var format: Format
    /// The submitted JSON, compact.
    public var document: String
    public var createdAt: Double

    public init(streamGuid: String, nodeGroup: String, format: Format, document: String, createdAt: Double) {
        self.streamGuid = streamGuid
        self.nodeGroup = nodeGroup
        self.format = format
        self.document = document
        self.createdAt = createdAt
    }
}

public struct JobEvent: Sendable, Equatable, Codable {
    public var streamGuid: String
    public var time: Double
    public var kind: String
    public var detail: String

    public init(streamGuid: String, time: Double, kind: String, detail: String) {
        self.streamGuid = streamGuid
        self.time = time
        self.kind = kind
        self.detail = detail
    }
}

/// Rows kept per stream, and in all: the history is for operators, not an archive a publisher or
/// a long-lived node can grow without bound.
public enum JobHistoryLimits {
    public static let eventsPerStream = 1000
    public static let events = 100_000
    public static let detailBytes = 1024
}

/// A node's service state, as Stream Manager 2.0 names them.
public enum NodeState: String, Sendable, Codable, CaseIterable {
    /// Takes publishers, jobs and players.
    case inService = "INSERVICE"
    /// Takes no new publisher or job; running jobs and their players go on, new players may join.
    case softSunset = "SOFT_SUNSET"
    /// Players are told to leave, playlists are ended, publishers are released after the grace period.
    case hardSunset = "HARD_SUNSET"
}

/// A node as the registry knows it: where it is, what it does, how much room it has.
public struct NodeRecord: Sendable, Codable, Equatable {
    public var nodeId: String
    public var nodeGroup: String
    public var subGroup: String
    /// `transcoder`: the node takes publishers, encodes their ladders and plays them out.
    public var role: String
    public var state: NodeState
    /// The host publishers and players reach it at.
    public var address: String
    public var rtspPort: Int
    public var httpPort: Int
    /// The other publish protocols it listens on (nil in the records of nodes that predate it).
    public var ingest: [IngestEndpoint]?
    /// Cores it may fill with encoding, and the fraction it fills before refusing work.
    public var capacityCores: Double
    public var maximumLoad: Double
    /// Cores busy encoding, measured.
    public var encodeCores: Double
    public var publishers: Int
    public var subscribers: Int
    /// Ladder guids whose job has a publisher, or is waiting for one to come back, on this node.
    public var streams: [String]
    /// Seconds since its last heartbeat, by the store's clock (set when read).
    public var age: Double

    public init(nodeId: String, nodeGroup: String, subGroup: String, role: String, state: NodeState, address: String, rtspPort: Int,
                httpPort: Int, ingest: [IngestEndpoint], capacityCores: Double, maximumLoad: Double, encodeCores: Double,
                publishers: Int, subscribers: Int, streams: [String], age: Double = 0) {
        self.nodeId = nodeId
        self.nodeGroup = nodeGroup
        self.subGroup = subGroup
        self.role = role
        self.state = state
        self.address = address
        self.rtspPort = rtspPort
        self.httpPort = httpPort
        self.ingest = ingest
        self.capacityCores = capacityCores
        self.maximumLoad = maximumLoad
        self.encodeCores = encodeCores
        self.publishers = publishers
        self.subscribers = subscribers
        self.streams = streams
        self.age = age
    }

    /// Cores it may still fill before it refuses work.
    public var freeCores: Double { capacityCores * maximumLoad - encodeCores }
}

/// Which node runs (or was chosen to run) a stream's job.
public struct Placement: Sendable, Codable, Equatable {
    public var streamGuid: String
    public var nodeId: String
    /// The job's estimated cores, counted against the node until its own heartbeat measures them.
    public var cores: Double
    /// Seconds since it was placed, by the store's clock (set when read).
    public var age: Double

    public init(streamGuid: String, nodeId: String, cores: Double, age: Double = 0) {
        self.streamGuid = streamGuid
        self.nodeId = nodeId
        self.cores = cores
        self.age = age
    }
}

/// `--store`: `sqlite:PATH` (a file, or a directory that gets `abr-worker.sqlite`) or a
/// PostgreSQL URL (`postgres://user:password@host:port/database?sslmode=disable|prefer|require`,
/// and `&sslrootcert=PATH` for a server whose certificate a private CA signed).
public enum StoreLocation: Sendable, Equatable {
    case sqlite(path: String)
    case postgres(PostgresLocation)

    public struct PostgresLocation: Sendable, Equatable {
        public enum TLSMode: String, Sendable { case disable, prefer, require }
        public var host: String
        public var port: Int
        public var user: String
        public var password: String?
        public var database: String
        public var tls: TLSMode
        /// A PEM file of the roots the server's certificate must chain to (libpq's `sslrootcert`); nil: the system's.
        public var rootCertificates: String? = nil

        /// The URL without its password.
        public var redacted: String {
            "postgres://\(user)@\(host):\(port)/\(database)?sslmode=\(tls.rawValue)" + (rootCertificates.map { "&sslrootcert=\($0)" } ?? "")
        }
    }

    public static func parse(_ text: String) throws(StoreFailure) -> StoreLocation {
        if text.hasPrefix("sqlite:") {
            let path = String(text.dropFirst("sqlite:".count))
            guard !path.isEmpty else { throw .badLocation("sqlite: needs a path (sqlite:./data/abr-worker.sqlite)") }
            return .sqlite(path: path)
        }
        guard text.hasPrefix("postgres://") || text.hasPrefix("postgresql://") else {
            throw .badLocation("the store must be sqlite:PATH or postgres://user:password@host:port/database (got \(text.prefix(40)))")
        }
        guard let url = URLComponents(string: text), let host = url.host, !host.isEmpty else {
            throw .badLocation("not a PostgreSQL URL: postgres://user:password@host:port/database")
        }
        guard let user = url.user, !user.isEmpty else { throw .badLocation("the PostgreSQL URL names no user (postgres://USER:password@host/database)") }
        let database = String(url.path.drop { $0 == "/" })
        let mode = url.queryItems?.first { $0.name == "sslmode" }?.value ?? "prefer"
        let roots = url.queryItems?.first { $0.name == "sslrootcert" }?.value
        guard let tls = PostgresLocation.TLSMode(rawValue: mode) else {
            throw .badLocation("sslmode must be disable, prefer or require (got \(mode))")
        }
        guard let port = url.port ?? Optional(5432), (1...65535).contains(port) else { throw .badLocation("the PostgreSQL port must be 1 to 65535") }
        return .postgres(PostgresLocation(host: host, port: port, user: user.removingPercentEncoding ?? user,
                                          password: url.password.map { $0.removingPercentEncoding ?? $0 },
                                          database: database.isEmpty ? user : database, tls: tls, rootCertificates: roots))
    }
}

extension NodeStore {
    public func provisions() async throws -> [StoredProvision] { try await provisions(nodeGroup: nil) }
    public func history(_ streamGuid: String) async throws -> [JobEvent] { try await history(streamGuid, limit: 100) }
}
