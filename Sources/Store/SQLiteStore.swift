import Foundation
import GRDB

/// The embedded store: one SQLite file (WAL, `synchronous = FULL`), the default for one node.
///
/// Writes are synchronous: a provision is on disk before the API answers 2xx, so even `kill -9`
/// right after the reply loses nothing. Nodes on one machine may share the file.
public final class SQLiteStore: NodeStore {
    public let path: String
    public var location: String { "sqlite:\(path)" }
    private let database: DatabasePool
    /// Event writes leave the job's thread at once and keep their order.
    private let eventQueue = DispatchQueue(label: "abr.store.events")

    /// `path` is the database file, or a directory that gets `abr-worker.sqlite`.
    public init(path: String) throws {
        var isDirectory: ObjCBool = false
        let file: String
        if path.hasSuffix("/") || (FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) && isDirectory.boolValue) {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            file = URL(fileURLWithPath: path).appendingPathComponent("abr-worker.sqlite").path
        } else {
            try FileManager.default.createDirectory(at: URL(fileURLWithPath: path).deletingLastPathComponent(), withIntermediateDirectories: true)
            file = path
        }
        self.path = file
        var configuration = Configuration()
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
        }
        configuration.busyMode = .timeout(5)
        database = try DatabasePool(path: file, configuration: configuration)
        try Self.migrator.migrate(database)
    }

    /// The node's data directory's store (`DIR/abr-worker.sqlite`).
    public convenience init(directory: URL) throws {
        try self.init(path: directory.path + "/")
    }

    private static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("1-provisions-and-job-history") { db in
            try db.create(table: "provision") { table in
                table.primaryKey("streamGuid", .text)
                table.column("nodeGroup", .text).notNull().indexed()
                table.column("format", .text).notNull()
                table.column("document", .text).notNull()
                table.column("createdAt", .double).notNull()
            }
            try db.create(table: "jobEvent") { table in
                table.autoIncrementedPrimaryKey("id")
                table.column("streamGuid", .text).notNull().indexed()
                table.column("time", .double).notNull()
                table.column("kind", .text).notNull()
                table.column("detail", .text).notNull()
            }
        }
        migrator.registerMigration("2-node-registry-and-placement") { db in
            try db.create(table: "node") { table in
                table.primaryKey("nodeId", .text)
                table.column("record", .text).notNull()
                table.column("lastSeen", .double).notNull()
                table.column("requestedState", .text)
            }
            try db.create(table: "placement") { table in
                table.primaryKey("streamGuid", .text)
                table.column("nodeId", .text).notNull().indexed()
                table.column("cores", .double).notNull()
                table.column("placedAt", .double).notNull()
            }
        }
        return migrator
    }

    private static var now: Double { Date().timeIntervalSince1970 }

    // MARK: Provisions

    public func insert(_ provisions: [StoredProvision]) async throws {
        try await database.write { db in
            let guids = provisions.map(\.streamGuid)
            let existing = try String.fetchAll(db, sql: "SELECT streamGuid FROM provision WHERE streamGuid IN (\(guids.map { _ in "?" }.joined(separator: ",")))",
                                               arguments: StatementArguments(guids))
            guard existing.isEmpty else { throw StoreFailure.alreadyStored(existing) }
            for provision in provisions {
                try db.execute(sql: "INSERT INTO provision (streamGuid, nodeGroup, format, document, createdAt) VALUES (?, ?, ?, ?, ?)",
                               arguments: [provision.streamGuid, provision.nodeGroup, provision.format.rawValue, provision.document, provision.createdAt])
            }
        }
    }

    public func provisions(nodeGroup: String? = nil) async throws -> [StoredProvision] {
        try await database.read { db in
            let rows = if let nodeGroup {
                try Row.fetchAll(db, sql: "SELECT * FROM provision WHERE nodeGroup = ? ORDER BY createdAt, streamGuid", arguments: [nodeGroup])
            } else {
                try Row.fetchAll(db, sql: "SELECT * FROM provision ORDER BY createdAt, streamGuid")
            }
            return rows.map(Self.provision)
        }
    }

    public func provision(_ streamGuid: String) async throws -> StoredProvision? {
        try await database.read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM provision WHERE streamGuid = ?", arguments: [streamGuid]).map(Self.provision)
        }
    }

    @discardableResult
    public func deleteProvision(_ streamGuid: String) async throws -> Bool {
        try await database.write { db in
            try db.execute(sql: "DELETE FROM provision WHERE streamGuid = ?", arguments: [streamGuid])
            return db.changesCount > 0
        }
    }

    private static func provision(_ row: Row) -> StoredProvision {
        StoredProvision(streamGuid: row["streamGuid"], nodeGroup: row["nodeGroup"],
                        format: StoredProvision.Format(rawValue: row["format"]) ?? .streamManager2,
                        document: row["document"], createdAt: row["createdAt"])
    }

    // MARK: Job history

    public func record(_ event: JobEvent) {
        eventQueue.async { [database] in
            _ = try? database.write { db in
                try db.execute(sql: "INSERT INTO jobEvent (streamGuid, time, kind, detail) VALUES (?, ?, ?, ?)",
                               arguments: [event.streamGuid, event.time, event.kind, String(event.detail.utf8.prefix(JobHistoryLimits.detailBytes)) ?? ""])
                let id = db.lastInsertedRowID
                try db.execute(sql: """
                    DELETE FROM jobEvent WHERE streamGuid = ?1 AND id < \
                    (SELECT id FROM jobEvent WHERE streamGuid = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)
                    """, arguments: [event.streamGuid, JobHistoryLimits.eventsPerStream - 1])
                // The stream cap keeps the table small, so this global trim is rare and cheap.
                if id % 100 == 0 {
                    try db.execute(sql: "DELETE FROM jobEvent WHERE id <= ?", arguments: [id - Int64(JobHistoryLimits.events)])
                }
            }
        }
    }

    public func history(_ streamGuid: String, limit: Int = 100) async throws -> [JobEvent] {
        flushEvents()
        return try await database.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM jobEvent WHERE streamGuid = ? ORDER BY id DESC LIMIT ?", arguments: [streamGuid, limit])
                .reversed()
                .map { JobEvent(streamGuid: $0["streamGuid"], time: $0["time"], kind: $0["kind"], detail: $0["detail"]) }
        }
    }

    /// Waits for queued event writes.
    public func flushEvents() {
        eventQueue.sync {}
    }

    // MARK: Node registry

    public func heartbeat(_ node: NodeRecord) async throws -> NodeState? {
        let record = try NodeRecordCoding.encode(node)
        return try await database.write { db in
            let requested = try String.fetchOne(db, sql: "SELECT requestedState FROM node WHERE nodeId = ?", arguments: [node.nodeId])
            try db.execute(sql: """
                INSERT INTO node (nodeId, record, lastSeen, requestedState) VALUES (?, ?, ?, NULL)
                ON CONFLICT(nodeId) DO UPDATE SET record = excluded.record, lastSeen = excluded.lastSeen, requestedState = NULL
                """, arguments: [node.nodeId, record, Self.now])
            return requested.flatMap(NodeState.init(rawValue:))
        }
    }

    public func nodes() async throws -> [NodeRecord] {
        let now = Self.now
        return try await database.read { db in
            try Row.fetchAll(db, sql: "SELECT record, lastSeen FROM node ORDER BY nodeId").compactMap { row in
                NodeRecordCoding.decode(row["record"], age: now - (row["lastSeen"] as Double))
            }
        }
    }

    public func requestState(_ state: NodeState, nodeId: String) async throws -> Bool {
        try await database.write { db in
            try db.execute(sql: "UPDATE node SET requestedState = ? WHERE nodeId = ?", arguments: [state.rawValue, nodeId])
            return db.changesCount > 0
        }
    }

    public func removeNode(_ nodeId: String) async throws {
        try await database.write { db in
            try db.execute(sql: "DELETE FROM node WHERE nodeId = ?", arguments: [nodeId])
            try db.execute(sql: "DELETE FROM placement WHERE nodeId = ?", arguments: [nodeId])
        }
    }

    // MARK: Placement

    public func place(_ placement: Placement) async throws {
        try await database.write { db in
            try db.execute(sql: """
                INSERT INTO placement (streamGuid, nodeId, cores, placedAt) VALUES (?, ?, ?, ?)
                ON CONFLICT(streamGuid) DO UPDATE SET nodeId = excluded.nodeId, cores = excluded.cores, placedAt = excluded.placedAt
                """, arguments: [placement.streamGuid, placement.nodeId, placement.cores, Self.now])
        }
    }

    public func placements() async throws -> [Placement] {
        let now = Self.now
        return try await database.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM placement ORDER BY streamGuid").map {
                Placement(streamGuid: $0["streamGuid"], nodeId: $0["nodeId"], cores: $0["cores"], age: now - ($0["placedAt"] as Double))
            }
        }
    }

    public func releasePlacement(_ streamGuid: String, nodeId: String) async throws {
        try await database.write { db in
            try db.execute(sql: "DELETE FROM placement WHERE streamGuid = ? AND nodeId = ?", arguments: [streamGuid, nodeId])
        }
    }

    // MARK: Life

    /// One node per file in practice: the heartbeat's comparison catches what another process changed.
    public func provisionChanges() -> AsyncStream<Void> {
        AsyncStream { _ in }
    }

    public func run() async {
        while !Task.isCancelled {
            try? await Task.sleep(for: .seconds(3600))
        }
    }

    /// Writes what is queued, checkpoints the WAL into the database file and closes it.
    public func close() async throws {
        try closeNow()
    }

    public func closeNow() throws {
        flushEvents()
        try database.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)")
        }
        try database.close()
    }
}

/// A node record as the stores keep it: JSON, so adding a figure needs no migration.
enum NodeRecordCoding {
    static func encode(_ node: NodeRecord) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return String(decoding: try encoder.encode(node), as: UTF8.self)
    }

    static func decode(_ text: String, age: Double) -> NodeRecord? {
        guard var record = try? JSONDecoder().decode(NodeRecord.self, from: Data(text.utf8)) else { return nil }
        record.age = max(0, age)
        return record
    }
}
