import Foundation
import GRDB

/// The node's SQLite database (`DATA_DIR/abr-worker.sqlite`, WAL): accepted provisions, which
/// must survive any restart, and the job history (state changes and publisher events).
///
/// Writes are synchronous and `synchronous = FULL`: a provision is on disk before the API
/// answers 2xx, so even `kill -9` right after the reply loses nothing.
public final class NodeStore: Sendable {
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

    public let path: String
    private let database: DatabasePool
    /// Event writes leave the job's thread at once and keep their order.
    private let eventQueue = DispatchQueue(label: "abr.store.events")

    public init(directory: URL) throws {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        path = directory.appendingPathComponent("abr-worker.sqlite").path
        var configuration = Configuration()
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
        }
        configuration.busyMode = .timeout(5)
        database = try DatabasePool(path: path, configuration: configuration)
        try Self.migrator.migrate(database)
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
        return migrator
    }

    // MARK: Provisions

    public enum InsertFailure: Error, Sendable, Equatable {
        case alreadyStored([String])
    }

    /// Stores every provision or none: a guid already stored fails the whole batch.
    public func insert(_ provisions: [StoredProvision]) throws {
        try database.write { db in
            let guids = provisions.map(\.streamGuid)
            let existing = try String.fetchAll(db, sql: "SELECT streamGuid FROM provision WHERE streamGuid IN (\(guids.map { _ in "?" }.joined(separator: ",")))",
                                               arguments: StatementArguments(guids))
            guard existing.isEmpty else { throw InsertFailure.alreadyStored(existing) }
            for provision in provisions {
                try db.execute(sql: "INSERT INTO provision (streamGuid, nodeGroup, format, document, createdAt) VALUES (?, ?, ?, ?, ?)",
                               arguments: [provision.streamGuid, provision.nodeGroup, provision.format.rawValue, provision.document, provision.createdAt])
            }
        }
    }

    /// All provisions, or one node group's, oldest first.
    public func provisions(nodeGroup: String? = nil) throws -> [StoredProvision] {
        try database.read { db in
            let rows = if let nodeGroup {
                try Row.fetchAll(db, sql: "SELECT * FROM provision WHERE nodeGroup = ? ORDER BY createdAt, streamGuid", arguments: [nodeGroup])
            } else {
                try Row.fetchAll(db, sql: "SELECT * FROM provision ORDER BY createdAt, streamGuid")
            }
            return rows.map(Self.provision)
        }
    }

    public func provision(_ streamGuid: String) throws -> StoredProvision? {
        try database.read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM provision WHERE streamGuid = ?", arguments: [streamGuid]).map(Self.provision)
        }
    }

    /// True when there was one to delete.
    @discardableResult
    public func deleteProvision(_ streamGuid: String) throws -> Bool {
        try database.write { db in
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

    /// Rows kept per stream, and in all: the history is for operators, not an archive a
    /// publisher or a long-lived node can grow without bound.
    public static let maximumEventsPerStream = 1000
    public static let maximumEvents = 100_000

    /// Queued: the caller (a job's thread) does not wait for the disk.
    public func record(_ event: JobEvent) {
        eventQueue.async { [database] in
            _ = try? database.write { db in
                try db.execute(sql: "INSERT INTO jobEvent (streamGuid, time, kind, detail) VALUES (?, ?, ?, ?)",
                               arguments: [event.streamGuid, event.time, event.kind, String(event.detail.utf8.prefix(1024)) ?? ""])
                let id = db.lastInsertedRowID
                try db.execute(sql: """
                    DELETE FROM jobEvent WHERE streamGuid = ?1 AND id < \
                    (SELECT id FROM jobEvent WHERE streamGuid = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)
                    """, arguments: [event.streamGuid, Self.maximumEventsPerStream - 1])
                // The stream cap keeps the table small, so this global trim is rare and cheap.
                if id % 100 == 0 {
                    try db.execute(sql: "DELETE FROM jobEvent WHERE id <= ?", arguments: [id - Int64(Self.maximumEvents)])
                }
            }
        }
    }

    /// The most recent events of a stream, oldest first.
    public func history(_ streamGuid: String, limit: Int = 100) throws -> [JobEvent] {
        flushEvents()
        return try database.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM jobEvent WHERE streamGuid = ? ORDER BY id DESC LIMIT ?", arguments: [streamGuid, limit])
                .reversed()
                .map { JobEvent(streamGuid: $0["streamGuid"], time: $0["time"], kind: $0["kind"], detail: $0["detail"]) }
        }
    }

    /// Waits for queued event writes.
    public func flushEvents() {
        eventQueue.sync {}
    }

    /// Writes what is queued, checkpoints the WAL into the database file and closes it.
    public func close() throws {
        flushEvents()
        try database.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)")
        }
        try database.close()
    }
}
