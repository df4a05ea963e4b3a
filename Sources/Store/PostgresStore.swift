import Foundation
import Logging
import Synchronization

/// The fleet's store: a PostgreSQL server every node of the fleet reaches, through the node's own
/// client of PostgreSQL's protocol (`PostgresConnection`).
///
/// Times that decide liveness (heartbeats, placements) come from the server's clock, so nodes
/// with skewed clocks still agree on who is alive. Provision changes are announced with
/// `NOTIFY abr_provisions`, so every node provisions or removes a ladder within milliseconds.
public final class PostgresStore: NodeStore {
    public let location: String
    let pool: PostgresConnectionPool
    let serverLocation: StoreLocation.PostgresLocation
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
        serverLocation = location
        pool = try PostgresConnectionPool(location: location, maximumConnections: 8)
        events = AsyncStream.makeStream(of: JobEvent.self, bufferingPolicy: .bufferingNewest(10_000))
    }

    /// Listens for provision changes and writes queued events until cancelled, then closes the pool's connections.
    public func run() async {
        await withDiscardingTaskGroup { group in
            group.addTask {
                // Until cancelled: the pool opens connections as they are needed.
                while !Task.isCancelled { try? await Task.sleep(for: .seconds(3600)) }
                await self.pool.close()
            }
            group.addTask { await self.writeEvents() }
            group.addTask { await self.listenForChanges() }
        }
    }

    /// Creates or upgrades the schema; the node calls it (with `run()` under way) before serving.
    /// An advisory lock keeps nodes starting together from migrating at once.
    public func migrate() async throws {
        try await transaction { connection in
            try await connection.query("SELECT pg_advisory_xact_lock(7246001)")
            try await connection.query("CREATE TABLE IF NOT EXISTS abr_migration (name TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
            let applied = Set(try await connection.query("SELECT name FROM abr_migration").map { try $0.text(0) })
            for (name, statements) in Self.migrations where !applied.contains(name) {
                for statement in statements {
                    try await connection.query(PostgresQuery(unsafeSQL: statement))
                }
                try await connection.query("INSERT INTO abr_migration (name) VALUES (\(name))")
            }
        }
    }

    /// A transaction whose own errors (a duplicate guid) come out as themselves, not wrapped.
    private func transaction<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        try await pool.withTransaction(body)
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
            let existing = try await connection.query("SELECT stream_guid FROM provision WHERE stream_guid = ANY(\(guids))").map { try $0.text(0) }
            guard existing.isEmpty else { throw StoreFailure.alreadyStored(existing.sorted()) }
            for p in provisions {
                try await connection.query("""
                    INSERT INTO provision (stream_guid, node_group, format, document, created_at)
                    VALUES (\(p.streamGuid), \(p.nodeGroup), \(p.format.rawValue), \(p.document), \(p.createdAt))
                    """)
            }
            // Delivered at commit, to every node listening (this one included).
            try await connection.query("SELECT pg_notify(\(Self.changesChannel), \(guids.joined(separator: ",")))")
        }
    }

    public func provisions(nodeGroup: String? = nil) async throws -> [StoredProvision] {
        let rows = if let nodeGroup {
            try await pool.query("""
                SELECT stream_guid, node_group, format, document, created_at FROM provision WHERE node_group = \(nodeGroup)
                ORDER BY created_at, stream_guid
                """)
        } else {
            try await pool.query("SELECT stream_guid, node_group, format, document, created_at FROM provision ORDER BY created_at, stream_guid")
        }
        return try Self.storedProvisions(rows)
    }

    public func provision(_ streamGuid: String) async throws -> StoredProvision? {
        let rows = try await pool.query("""
            SELECT stream_guid, node_group, format, document, created_at FROM provision WHERE stream_guid = \(streamGuid)
            """)
        return try Self.storedProvisions(rows).first
    }

    /// Rows of `stream_guid, node_group, format, document, created_at`, as stored provisions.
    private static func storedProvisions(_ rows: [PostgresRow]) throws -> [StoredProvision] {
        try rows.map { row in
            StoredProvision(streamGuid: try row.text(0), nodeGroup: try row.text(1), format: .init(rawValue: try row.text(2)) ?? .streamManager2,
                            document: try row.text(3), createdAt: try row.double(4))
        }
    }

    @discardableResult
    public func deleteProvision(_ streamGuid: String) async throws -> Bool {
        try await transaction { connection in
            let deleted = try await !connection.query("DELETE FROM provision WHERE stream_guid = \(streamGuid) RETURNING stream_guid").isEmpty
            if deleted {
                try await connection.query("SELECT pg_notify(\(Self.changesChannel), \(streamGuid))")
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
                try await pool.query("""
                    WITH trimmed AS (DELETE FROM job_event WHERE stream_guid = \(event.streamGuid) AND id < (SELECT id FROM job_event
                        WHERE stream_guid = \(event.streamGuid) ORDER BY id DESC OFFSET \(JobHistoryLimits.eventsPerStream - 2) LIMIT 1))
                    INSERT INTO job_event (stream_guid, time, kind, detail) VALUES (\(event.streamGuid), \(event.time), \(event.kind), \(detail))
                    """)
                written += 1
                // The stream cap keeps the table small, so this global trim is rare and cheap.
                if written % 100 == 0 {
                    try await pool.query("""
                        DELETE FROM job_event WHERE id <= (SELECT max(id) FROM job_event) - \(JobHistoryLimits.events)
                        """)
                }
            } catch {
                logger.warning("job event not stored: \(String(reflecting: error))", metadata: ["stream.guid": "\(event.streamGuid)"])
            }
        }
        writerDone.store(true, ordering: .releasing)
    }

    public func history(_ streamGuid: String, limit: Int = 100) async throws -> [JobEvent] {
        let rows = try await pool.query("""
            SELECT stream_guid, time, kind, detail FROM job_event WHERE stream_guid = \(streamGuid) ORDER BY id DESC LIMIT \(limit)
            """)
        return try rows.map { row in
            JobEvent(streamGuid: try row.text(0), time: try row.double(1), kind: try row.text(2), detail: try row.text(3))
        }.reversed()
    }

    // MARK: Node registry

    public func heartbeat(_ node: NodeRecord) async throws -> NodeState? {
        let record = try NodeRecordCoding.encode(node)
        let rows = try await pool.query("""
            WITH previous AS (SELECT requested_state FROM node WHERE node_id = \(node.nodeId))
            INSERT INTO node (node_id, record, last_seen, requested_state) VALUES (\(node.nodeId), \(record), \(unescaped: Self.serverNow), NULL)
            ON CONFLICT (node_id) DO UPDATE SET record = EXCLUDED.record, last_seen = EXCLUDED.last_seen, requested_state = NULL
            RETURNING (SELECT requested_state FROM previous)
            """)
        return try rows.first?.optionalText(0).flatMap(NodeState.init(rawValue:))
    }

    public func nodes() async throws -> [NodeRecord] {
        let rows = try await pool.query("""
            SELECT record, \(unescaped: Self.serverNow) - last_seen FROM node ORDER BY node_id
            """)
        return try rows.compactMap { row in NodeRecordCoding.decode(try row.text(0), age: try row.double(1)) }
    }

    public func requestState(_ state: NodeState, nodeId: String) async throws -> Bool {
        try await !pool.query("UPDATE node SET requested_state = \(state.rawValue) WHERE node_id = \(nodeId) RETURNING node_id").isEmpty
    }

    public func removeNode(_ nodeId: String) async throws {
        try await transaction { connection in
            try await connection.query("DELETE FROM node WHERE node_id = \(nodeId)")
            try await connection.query("DELETE FROM placement WHERE node_id = \(nodeId)")
        }
    }

    // MARK: Placement

    public func place(_ placement: Placement) async throws {
        try await pool.query("""
            INSERT INTO placement (stream_guid, node_id, cores, placed_at)
            VALUES (\(placement.streamGuid), \(placement.nodeId), \(placement.cores), \(unescaped: Self.serverNow))
            ON CONFLICT (stream_guid) DO UPDATE SET node_id = EXCLUDED.node_id, cores = EXCLUDED.cores, placed_at = EXCLUDED.placed_at
            """)
    }

    public func placements() async throws -> [Placement] {
        let rows = try await pool.query("""
            SELECT stream_guid, node_id, cores, \(unescaped: Self.serverNow) - placed_at FROM placement ORDER BY stream_guid
            """)
        return try rows.map { row in
            Placement(streamGuid: try row.text(0), nodeId: try row.text(1), cores: try row.double(2), age: try row.double(3))
        }
    }

    public func releasePlacement(_ streamGuid: String, nodeId: String) async throws {
        try await pool.query("DELETE FROM placement WHERE stream_guid = \(streamGuid) AND node_id = \(nodeId)")
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
                let connection = try await PostgresConnection.connect(to: serverLocation, tls: pool.tls) { [weak self] channel, _ in
                    guard channel == Self.changesChannel, let self else { return }
                    self.changeListeners.withLock { $0.values.forEach { $0.yield() } }
                }
                try await connection.query(PostgresQuery(unsafeSQL: "LISTEN \(Self.changesChannel)"))
                // Notifications arrive through the handler above until the connection ends.
                try await withTaskCancellationHandler {
                    try await connection.channel.closeFuture.get()
                } onCancel: {
                    connection.close()
                }
                if Task.isCancelled { return }
                throw PostgresFailure.connection("the listening connection closed")
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
