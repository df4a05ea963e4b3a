import Foundation
import Logging
import NIOSSL
import PostgresNIO
import Synchronization

/// The fleet's store: a PostgreSQL server every node of the fleet reaches, through postgres-nio.
///
/// Times that decide liveness (heartbeats, placements) come from the server's clock, so nodes
/// with skewed clocks still agree on who is alive. Provision changes are announced with
/// `NOTIFY abr_provisions`, so every node provisions or removes a ladder within milliseconds.
public final class PostgresStore: NodeStore {
    public let location: String
    let client: PostgresClient
    let logger: Logger
    static let changesChannel = "abr_provisions"
    /// Event writes in order, off the job's thread; bounded, dropping the oldest when the server is slow.
    private let events: (stream: AsyncStream<JobEvent>, continuation: AsyncStream<JobEvent>.Continuation)
    private let changeListeners = Mutex<[Int: AsyncStream<Void>.Continuation]>([:])
    private let nextListener = Atomic<Int>(0)
    private let writerDone = Atomic<Bool>(false)

    public init(_ location: StoreLocation.PostgresLocation, logger: Logger = Logger(label: "abr.store")) throws {
        self.location = location.redacted
        self.logger = logger
        let tls: PostgresClient.Configuration.TLS = switch location.tls {
        case .disable: .disable
        case .prefer: .prefer(.makeClientConfiguration())
        case .require: .require(.makeClientConfiguration())
        }
        var configuration = PostgresClient.Configuration(host: location.host, port: location.port, username: location.user,
                                                         password: location.password, database: location.database, tls: tls)
        configuration.options.connectTimeout = .seconds(5)
        configuration.options.maximumConnections = 8
        client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        events = AsyncStream.makeStream(of: JobEvent.self, bufferingPolicy: .bufferingNewest(10_000))
    }

    /// Runs the client, creates or upgrades the schema, then listens for provision changes and
    /// writes queued events until cancelled.
    public func run() async {
        await withDiscardingTaskGroup { group in
            group.addTask { await self.client.run() }
            group.addTask { await self.writeEvents() }
            group.addTask { await self.listenForChanges() }
        }
    }

    /// Creates or upgrades the schema; the node calls it (with `run()` under way) before serving.
    /// An advisory lock keeps nodes starting together from migrating at once.
    public func migrate() async throws {
        try await transaction { connection in
            try await connection.query("SELECT pg_advisory_xact_lock(7246001)", logger: logger)
            try await connection.query("CREATE TABLE IF NOT EXISTS abr_migration (name TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())", logger: logger)
            var applied = Set<String>()
            for try await name in try await connection.query("SELECT name FROM abr_migration", logger: logger).decode(String.self) {
                applied.insert(name)
            }
            for (name, statements) in Self.migrations where !applied.contains(name) {
                for statement in statements {
                    try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                try await connection.query("INSERT INTO abr_migration (name) VALUES (\(name))", logger: logger)
            }
        }
    }

    /// A transaction whose own errors (a duplicate guid) come out as themselves, not wrapped.
    private func transaction<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        do {
            return try await client.withTransaction(logger: logger) { connection in try await body(connection) }
        } catch let error as PostgresTransactionError {
            throw error.closureError ?? error
        }
    }

    /// Each migration once, in order; never edited after release (add a new one instead).
    static let migrations: [(String, [String])] = [
        ("1-provisions-and-job-history", [
            """
            CREATE TABLE provision (stream_guid TEXT PRIMARY KEY, node_group TEXT NOT NULL, format TEXT NOT NULL,
                                    document TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL)
            """,
            "CREATE INDEX provision_node_group ON provision (node_group)",
            """
            CREATE TABLE job_event (id BIGSERIAL PRIMARY KEY, stream_guid TEXT NOT NULL, time DOUBLE PRECISION NOT NULL,
                                    kind TEXT NOT NULL, detail TEXT NOT NULL)
            """,
            "CREATE INDEX job_event_stream ON job_event (stream_guid, id)",
        ]),
        ("2-node-registry-and-placement", [
            """
            CREATE TABLE node (node_id TEXT PRIMARY KEY, record TEXT NOT NULL, last_seen DOUBLE PRECISION NOT NULL,
                               requested_state TEXT)
            """,
            """
            CREATE TABLE placement (stream_guid TEXT PRIMARY KEY, node_id TEXT NOT NULL, cores DOUBLE PRECISION NOT NULL,
                                    placed_at DOUBLE PRECISION NOT NULL)
            """,
            "CREATE INDEX placement_node ON placement (node_id)",
        ]),
    ]

    /// The server's clock, in seconds since 1970.
    private static let serverNow = "EXTRACT(EPOCH FROM clock_timestamp())::DOUBLE PRECISION"

    // MARK: Provisions

    public func insert(_ provisions: [StoredProvision]) async throws {
        let guids = provisions.map(\.streamGuid)
        try await transaction { connection in
            var existing: [String] = []
            for try await guid in try await connection.query("SELECT stream_guid FROM provision WHERE stream_guid = ANY(\(guids))", logger: logger).decode(String.self) {
                existing.append(guid)
            }
            guard existing.isEmpty else { throw StoreFailure.alreadyStored(existing.sorted()) }
            for p in provisions {
                try await connection.query("""
                    INSERT INTO provision (stream_guid, node_group, format, document, created_at)
                    VALUES (\(p.streamGuid), \(p.nodeGroup), \(p.format.rawValue), \(p.document), \(p.createdAt))
                    """, logger: logger)
            }
            // Delivered at commit, to every node listening (this one included).
            try await connection.query("SELECT pg_notify(\(Self.changesChannel), \(guids.joined(separator: ",")))", logger: logger)
        }
    }

    public func provisions(nodeGroup: String? = nil) async throws -> [StoredProvision] {
        let rows = if let nodeGroup {
            try await client.query("""
                SELECT stream_guid, node_group, format, document, created_at FROM provision WHERE node_group = \(nodeGroup)
                ORDER BY created_at, stream_guid
                """, logger: logger)
        } else {
            try await client.query("SELECT stream_guid, node_group, format, document, created_at FROM provision ORDER BY created_at, stream_guid", logger: logger)
        }
        return try await Self.storedProvisions(rows)
    }

    public func provision(_ streamGuid: String) async throws -> StoredProvision? {
        let rows = try await client.query("""
            SELECT stream_guid, node_group, format, document, created_at FROM provision WHERE stream_guid = \(streamGuid)
            """, logger: logger)
        return try await Self.storedProvisions(rows).first
    }

    /// Rows of `stream_guid, node_group, format, document, created_at`, as stored provisions.
    private static func storedProvisions(_ rows: PostgresRowSequence) async throws -> [StoredProvision] {
        var result: [StoredProvision] = []
        for try await (guid, group, format, document, created) in rows.decode((String, String, String, String, Double).self) {
            result.append(StoredProvision(streamGuid: guid, nodeGroup: group, format: .init(rawValue: format) ?? .streamManager2, document: document, createdAt: created))
        }
        return result
    }

    @discardableResult
    public func deleteProvision(_ streamGuid: String) async throws -> Bool {
        try await transaction { connection in
            var deleted = false
            for try await _ in try await connection.query("DELETE FROM provision WHERE stream_guid = \(streamGuid) RETURNING stream_guid", logger: logger).decode(String.self) {
                deleted = true
            }
            if deleted {
                try await connection.query("SELECT pg_notify(\(Self.changesChannel), \(streamGuid))", logger: logger)
            }
            return deleted
        }
    }

    // MARK: Job history

    public func record(_ event: JobEvent) {
        events.continuation.yield(event)
    }

    private func writeEvents() async {
        var written = 0
        for await event in events.stream {
            let detail = String(event.detail.utf8.prefix(JobHistoryLimits.detailBytes)) ?? ""
            do {
                // One statement, so no reader sees the stream over its cap between the insert and
                // the trim (a reader did, as 1001 events). Both parts see the table as it was: the
                // trim keeps one fewer than the cap, and the insert adds the newest.
                try await client.query("""
                    WITH trimmed AS (DELETE FROM job_event WHERE stream_guid = \(event.streamGuid) AND id < (SELECT id FROM job_event
                        WHERE stream_guid = \(event.streamGuid) ORDER BY id DESC OFFSET \(JobHistoryLimits.eventsPerStream - 2) LIMIT 1))
                    INSERT INTO job_event (stream_guid, time, kind, detail) VALUES (\(event.streamGuid), \(event.time), \(event.kind), \(detail))
                    """, logger: logger)
                written += 1
                // The stream cap keeps the table small, so this global trim is rare and cheap.
                if written % 100 == 0 {
                    try await client.query("""
                        DELETE FROM job_event WHERE id <= (SELECT max(id) FROM job_event) - \(JobHistoryLimits.events)
                        """, logger: logger)
                }
            } catch {
                logger.warning("job event not stored: \(String(reflecting: error))", metadata: ["stream.guid": "\(event.streamGuid)"])
            }
        }
        writerDone.store(true, ordering: .releasing)
    }

    public func history(_ streamGuid: String, limit: Int = 100) async throws -> [JobEvent] {
        var result: [JobEvent] = []
        let rows = try await client.query("""
            SELECT stream_guid, time, kind, detail FROM job_event WHERE stream_guid = \(streamGuid) ORDER BY id DESC LIMIT \(limit)
            """, logger: logger)
        for try await (guid, time, kind, detail) in rows.decode((String, Double, String, String).self) {
            result.append(JobEvent(streamGuid: guid, time: time, kind: kind, detail: detail))
        }
        return result.reversed()
    }

    // MARK: Node registry

    public func heartbeat(_ node: NodeRecord) async throws -> NodeState? {
        let record = try NodeRecordCoding.encode(node)
        let rows = try await client.query("""
            WITH previous AS (SELECT requested_state FROM node WHERE node_id = \(node.nodeId))
            INSERT INTO node (node_id, record, last_seen, requested_state) VALUES (\(node.nodeId), \(record), \(unescaped: Self.serverNow), NULL)
            ON CONFLICT (node_id) DO UPDATE SET record = EXCLUDED.record, last_seen = EXCLUDED.last_seen, requested_state = NULL
            RETURNING (SELECT requested_state FROM previous)
            """, logger: logger)
        for try await requested in rows.decode(String?.self) {
            return requested.flatMap(NodeState.init(rawValue:))
        }
        return nil
    }

    public func nodes() async throws -> [NodeRecord] {
        let rows = try await client.query("""
            SELECT record, \(unescaped: Self.serverNow) - last_seen FROM node ORDER BY node_id
            """, logger: logger)
        var result: [NodeRecord] = []
        for try await (record, age) in rows.decode((String, Double).self) {
            if let node = NodeRecordCoding.decode(record, age: age) { result.append(node) }
        }
        return result
    }

    public func requestState(_ state: NodeState, nodeId: String) async throws -> Bool {
        var found = false
        let rows = try await client.query("UPDATE node SET requested_state = \(state.rawValue) WHERE node_id = \(nodeId) RETURNING node_id", logger: logger)
        for try await _ in rows.decode(String.self) { found = true }
        return found
    }

    public func removeNode(_ nodeId: String) async throws {
        try await transaction { connection in
            try await connection.query("DELETE FROM node WHERE node_id = \(nodeId)", logger: logger)
            try await connection.query("DELETE FROM placement WHERE node_id = \(nodeId)", logger: logger)
        }
    }

    // MARK: Placement

    public func place(_ placement: Placement) async throws {
        try await client.query("""
            INSERT INTO placement (stream_guid, node_id, cores, placed_at)
            VALUES (\(placement.streamGuid), \(placement.nodeId), \(placement.cores), \(unescaped: Self.serverNow))
            ON CONFLICT (stream_guid) DO UPDATE SET node_id = EXCLUDED.node_id, cores = EXCLUDED.cores, placed_at = EXCLUDED.placed_at
            """, logger: logger)
    }

    public func placements() async throws -> [Placement] {
        let rows = try await client.query("""
            SELECT stream_guid, node_id, cores, \(unescaped: Self.serverNow) - placed_at FROM placement ORDER BY stream_guid
            """, logger: logger)
        var result: [Placement] = []
        for try await (guid, node, cores, age) in rows.decode((String, String, Double, Double).self) {
            result.append(Placement(streamGuid: guid, nodeId: node, cores: cores, age: age))
        }
        return result
    }

    public func releasePlacement(_ streamGuid: String, nodeId: String) async throws {
        try await client.query("DELETE FROM placement WHERE stream_guid = \(streamGuid) AND node_id = \(nodeId)", logger: logger)
    }

    // MARK: Changes

    public func provisionChanges() -> AsyncStream<Void> {
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let key = nextListener.add(1, ordering: .relaxed).oldValue
        changeListeners.withLock { $0[key] = continuation }
        continuation.onTermination = { [weak self] _ in _ = self?.changeListeners.withLock { $0.removeValue(forKey: key) } }
        return stream
    }

    /// Holds one connection in LISTEN; reconnects after a second when it drops (the heartbeat's
    /// comparison covers what was missed meanwhile).
    private func listenForChanges() async {
        while !Task.isCancelled {
            do {
                try await client.withConnection { connection in
                    try await connection.listen(on: Self.changesChannel) { notifications in
                        for try await _ in notifications {
                            changeListeners.withLock { $0.values.forEach { $0.yield() } }
                        }
                    }
                }
            } catch {
                if Task.isCancelled { return }
                logger.debug("listening for provision changes: \(String(reflecting: error)); again in 1 s")
            }
            try? await Task.sleep(for: .seconds(1))
        }
    }

    /// Writes the queued events (for up to 5 s) and stops listening; cancelling `run()` then closes the connections.
    public func close() async throws {
        events.continuation.finish()
        // Finished outside the lock: each listener's termination handler takes it.
        let listeners = changeListeners.withLock { listeners in
            defer { listeners.removeAll() }
            return Array(listeners.values)
        }
        listeners.forEach { $0.finish() }
        for _ in 0..<50 where !writerDone.load(ordering: .acquiring) {
            try? await Task.sleep(for: .milliseconds(100))
        }
    }
}
