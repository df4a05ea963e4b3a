import ControlPlane
import Foundation
import Ingest
import Logging
import Store
import Testing
import TestSupport

/// Both stores keep the same promises: the same tests against the embedded SQLite file and a real
/// PostgreSQL server started for them.
@Suite(.serialized) struct StoreTests {
    static func provision(_ guid: String, group: String = "g") -> StoredProvision {
        StoredProvision(streamGuid: guid, nodeGroup: group, format: .streamManager2, document: #"{"streamGuid":"\#(guid)"}"#, createdAt: 1)
    }

    static let srt = IngestProtocol(scheme: "srt", name: "SRT", urlTemplate: "srt://{host}:{port}?streamid=publish:{stream}")

    static func node(_ id: String, state: NodeState = .inService, encode: Double = 0, streams: [String] = []) -> NodeRecord {
        NodeRecord(nodeId: id, nodeGroup: "g", subGroup: "s", role: "transcoder", state: state, address: "127.0.0.1", rtspPort: 8554,
                   httpPort: 5080, ingest: [IngestEndpoint(srt, port: 8890)], capacityCores: 2, maximumLoad: 0.85, encodeCores: encode,
                   publishers: 0, subscribers: 0, streams: streams)
    }

    /// The promises, whichever store keeps them.
    static func checkPromises(_ store: any NodeStore) async throws {
        // Provisions: all or nothing, duplicates named, oldest first, deletes say whether they did.
        try await store.insert([provision("live/a"), provision("live/b", group: "other")])
        await #expect(throws: StoreFailure.alreadyStored(["live/a"])) { try await store.insert([provision("live/c"), provision("live/a")]) }
        #expect(try await store.provision("live/c") == nil, "a failed batch stores nothing")
        #expect(try await store.provisions(nodeGroup: "g").map(\.streamGuid) == ["live/a"])
        #expect(try await store.provisions().count == 2)
        #expect(try await store.provision("live/b")?.nodeGroup == "other")
        #expect(try await store.deleteProvision("live/a"))
        #expect(try await store.deleteProvision("live/a") == false)

        // Registry: heartbeats replace the record; a state asked for is handed over once.
        let firstHeartbeat = Date()
        #expect(try await store.heartbeat(node("n1")) == nil)
        #expect(try await store.heartbeat(node("n2", encode: 0.5, streams: ["live/b"])) == nil)
        #expect(try await store.requestState(.softSunset, nodeId: "n1"))
        #expect(try await store.requestState(.softSunset, nodeId: "nobody") == false)
        #expect(try await store.heartbeat(node("n1")) == .softSunset)
        #expect(try await store.heartbeat(node("n1", state: .softSunset)) == nil)
        let nodes = try await store.nodes()
        #expect(nodes.map(\.nodeId) == ["n1", "n2"])
        // Ages run on the store's clock from each record's last heartbeat: never more than the time
        // since the first one (a loaded machine's fsyncs can make that long), with a second of slack.
        let sinceFirstHeartbeat = Date().timeIntervalSince(firstHeartbeat)
        #expect(nodes.allSatisfy { $0.age >= 0 && $0.age <= sinceFirstHeartbeat + 1 },
                "ages by the store's clock: \(nodes.map(\.age)), \(sinceFirstHeartbeat) s since the first heartbeat")
        #expect(nodes.first { $0.nodeId == "n2" }?.streams == ["live/b"] && nodes.first?.state == .softSunset)

        // Placement: one node per stream, the latest wins; release only by the node that holds it.
        try await store.place(Placement(streamGuid: "live/b", nodeId: "n1", cores: 0.4))
        try await store.place(Placement(streamGuid: "live/b", nodeId: "n2", cores: 0.3))
        #expect(try await store.placements().map { "\($0.streamGuid)@\($0.nodeId)" } == ["live/b@n2"])
        try await store.releasePlacement("live/b", nodeId: "n1")
        #expect(try await store.placements().count == 1)
        try await store.releasePlacement("live/b", nodeId: "n2")
        #expect(try await store.placements().isEmpty)
        try await store.place(Placement(streamGuid: "live/b", nodeId: "n2", cores: 0.3))
        try await store.removeNode("n2")
        #expect(try await store.nodes().map(\.nodeId) == ["n1"], "a node leaving takes its record...")
        #expect(try await store.placements().isEmpty, "...and its placements")

        // History: in order, capped per stream.
        for index in 0..<(JobHistoryLimits.eventsPerStream + 20) {
            store.record(JobEvent(streamGuid: "live/h", time: Double(index), kind: "k", detail: "\(index)"))
        }
        var history: [JobEvent] = []
        for _ in 0..<100 {
            history = try await store.history("live/h", limit: 5000)
            if history.last?.detail == "\(JobHistoryLimits.eventsPerStream + 19)" { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(history.count == JobHistoryLimits.eventsPerStream)
        #expect(history.first?.detail == "20" && history.last?.detail == "\(JobHistoryLimits.eventsPerStream + 19)")
    }

    @Test func theEmbeddedStoreKeepsItsPromises() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("abr-store-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SQLiteStore(directory: directory)
        try await Self.checkPromises(store)
        try store.closeNow()
        // Reopened (migrations run again, harmlessly), everything is still there.
        let reopened = try SQLiteStore(directory: directory)
        #expect(try await reopened.provision("live/b") != nil)
        try reopened.closeNow()
    }

    @Test func postgreSQLKeepsTheSamePromisesAndAnnouncesChanges() async throws {
        let server = try PostgresServer()
        defer { server.stop() }
        guard case let .postgres(location) = try StoreLocation.parse(server.url) else { Issue.record("not a PostgreSQL URL"); return }
        let store = try PostgresStore(location, logger: Logger(label: "test.store"))
        let running = Task { await store.run() }
        try await store.migrate()
        try await store.migrate()
        let changes = store.provisionChanges()
        try await Self.checkPromises(store)
        // Inserts and deletes were announced (NOTIFY), to this store's own listener too.
        var iterator = changes.makeAsyncIterator()
        let announced: Void? = await iterator.next()
        #expect(announced != nil)
        #expect(try server.query("SELECT string_agg(name, ',' ORDER BY name) FROM abr_migration") == "1-provisions-and-job-history,2-node-registry-and-placement")
        try await store.close()
        running.cancel()
        await running.value
    }

    /// The node's own PostgreSQL client against a server that asks for a password over SCRAM-SHA-256
    /// (PostgreSQL's default): the right one opens the store, its listening connection included; a
    /// wrong or missing one, or TLS the server does not offer, is refused with what is wrong.
    @Test func postgreSQLWithAPasswordIsReachedOverSCRAMAndWhatIsWrongIsSaid() async throws {
        let server = try PostgresServer(password: "s3cret, p@ss=word")
        defer { server.stop() }
        func store(_ url: String) throws -> PostgresStore {
            guard case let .postgres(location) = try StoreLocation.parse(url) else { throw StoreFailure.badLocation("not PostgreSQL: \(url)") }
            return try PostgresStore(location, logger: Logger(label: "test.store"))
        }
        // sslmode=prefer: the server offers no TLS, so the client goes on without it.
        let opened = try store(server.url(password: server.password, sslmode: "prefer"))
        let running = Task { await opened.run() }
        try await opened.migrate()
        let changes = opened.provisionChanges()
        try await opened.insert([Self.provision("live/scram")])
        #expect(try await opened.provision("live/scram")?.streamGuid == "live/scram")
        let announced = await withTaskGroup(of: Bool.self) { group in
            group.addTask { var iterator = changes.makeAsyncIterator(); return await iterator.next() != nil }
            group.addTask { try? await Task.sleep(for: .seconds(10)); return false }
            defer { group.cancelAll() }
            return await group.next() ?? false
        }
        #expect(announced, "the listening connection authenticated and heard the insert")
        try await opened.close()
        running.cancel()
        await running.value

        for (url, expected) in [(server.url(password: "wrong"), "28P01: password authentication failed for user \"abr\""),
                                (server.url(password: nil), "asks user abr for a password, and the URL has none"),
                                (server.url(password: server.password, sslmode: "require"), "does not offer TLS, and the URL says sslmode=require")] {
            let refused = try store(url)
            do {
                try await refused.migrate()
                Issue.record("\(url) was let in")
            } catch {
                #expect("\(error)".contains(expected), "\(url): \(error)")
            }
        }
    }

    /// The client's TLS (OpenSSL, through TLSTransport) against a real server in TLS: a certificate
    /// the URL's `sslrootcert` vouches for opens the store, encrypted (the server says so); the
    /// same server's certificate unvouched for is refused, with the reason.
    @Test func postgreSQLOverTLSIsVerifiedAgainstTheRootsTheURLNames() async throws {
        let server = try PostgresServer(password: "tls pass", tls: true)
        defer { server.stop() }
        let trusted = server.url(password: server.password, sslmode: "require") + "&sslrootcert=" + server.certificatePath
        guard case let .postgres(location) = try StoreLocation.parse(trusted) else { Issue.record("not a PostgreSQL URL"); return }
        #expect(location.rootCertificates == server.certificatePath)
        let store = try PostgresStore(location, logger: Logger(label: "test.store"))
        let running = Task { await store.run() }
        try await store.migrate()
        try await store.insert([Self.provision("live/tls")])
        #expect(try await store.provision("live/tls") != nil)
        #expect(try server.query("SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE s.ssl AND a.application_name = 'abr-worker'") != "0",
                "the node's connections are encrypted")
        try await store.close()
        running.cancel()
        await running.value

        guard case let .postgres(unvouched) = try StoreLocation.parse(server.url(password: server.password, sslmode: "require")) else { return }
        do {
            try await PostgresStore(unvouched, logger: Logger(label: "test.store")).migrate()
            Issue.record("a self-signed certificate was trusted")
        } catch {
            #expect("\(error)".contains("the peer's certificate is refused"), "\(error)")
        }
        guard case let .postgres(missingRoots) = try StoreLocation.parse(trusted.replacingOccurrences(of: server.certificatePath, with: "/nonexistent/roots.pem")) else { return }
        #expect { _ = try PostgresStore(missingRoots) } throws: { "\($0)".contains("sslrootcert=/nonexistent/roots.pem: not a readable PEM file") }
    }

    @Test func storeLocationsAreParsedOrRefusedWithAReason() throws {
        #expect(try StoreLocation.parse("sqlite:/var/lib/abr/store.sqlite") == .sqlite(path: "/var/lib/abr/store.sqlite"))
        guard case let .postgres(pg) = try StoreLocation.parse("postgres://abr:p%40ss@db.example:6543/fleet?sslmode=require") else {
            Issue.record("not parsed as PostgreSQL")
            return
        }
        #expect(pg.host == "db.example" && pg.port == 6543 && pg.user == "abr" && pg.password == "p@ss" && pg.database == "fleet" && pg.tls == .require)
        #expect(!pg.redacted.contains("p@ss") && !pg.redacted.contains("p%40ss"), "no password in logs")
        guard case let .postgres(defaults) = try StoreLocation.parse("postgresql://abr@localhost") else { return }
        #expect(defaults.port == 5432 && defaults.database == "abr" && defaults.tls == .prefer)
        for bad in ["mysql://x@y/z", "sqlite:", "postgres://db.example/abr", "postgres://abr@db/abr?sslmode=sometimes", "postgres:///abr"] {
            #expect(throws: StoreFailure.self, "\(bad)") { try StoreLocation.parse(bad) }
        }
    }

    @Test func placementPrefersRoomAndSkipsTheDeadAndTheSunset() {
        var roomy = Self.node("roomy", encode: 0.2)
        roomy.capacityCores = 4
        let busy = Self.node("busy", encode: 1.5)
        var dead = Self.node("dead")
        dead.capacityCores = 16
        dead.age = 11
        var sunset = Self.node("sunset", state: .softSunset)
        sunset.capacityCores = 16
        let nodes = [busy, roomy, dead, sunset]
        #expect(PlacementPolicy.rank(needing: 0.75, group: "g", nodes: nodes, placements: []).map(\.nodeId) == ["roomy"])
        #expect(PlacementPolicy.rank(needing: 0.75, group: "other", nodes: nodes, placements: []).isEmpty)
        // Jobs just placed on a node count against it until its own figures measure them.
        let placed = (0..<4).map { Placement(streamGuid: "live/\($0)", nodeId: "roomy", cores: 0.75, age: 1) }
        #expect(PlacementPolicy.rank(needing: 0.75, group: "g", nodes: nodes, placements: placed).isEmpty)
        let old = placed.map { var p = $0; p.age = 20; return p }
        #expect(PlacementPolicy.rank(needing: 0.75, group: "g", nodes: nodes, placements: old).map(\.nodeId) == ["roomy"])
        // A stream stays where it runs, unless that node is dead or in HARD_SUNSET.
        var running = Self.node("running", encode: 1.6, streams: ["live/x"])
        #expect(PlacementPolicy.serving("live/x", nodes: nodes + [running], placements: [])?.nodeId == "running")
        running.state = .hardSunset
        #expect(PlacementPolicy.serving("live/x", nodes: nodes + [running], placements: []) == nil)
        #expect(PlacementPolicy.serving("live/y", nodes: nodes, placements: [Placement(streamGuid: "live/y", nodeId: "busy", cores: 1, age: 2)])?.nodeId == "busy")
        #expect(PlacementPolicy.serving("live/y", nodes: nodes, placements: [Placement(streamGuid: "live/y", nodeId: "dead", cores: 1, age: 2)]) == nil)
    }
}
