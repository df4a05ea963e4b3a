import Foundation
import Testing
import TestSupport

/// Three nodes on loopback (127.0.0.1–3) sharing one real PostgreSQL server, as a stream manager,
/// publishers, players and an operator use them: provisions made through any node, node requests
/// placing publishers on the node with room, SOFT_SUNSET, a node killed with SIGKILL, and a
/// SIGTERM drain.
@Suite(.serialized) struct FleetTests {
    static let environment = ServeTests.credentials

    /// The top passed through and two small rungs: the suite runs beside real-time tests that
    /// count dropped frames, so the fleet's ladders stay cheap to encode.
    static func provision(_ name: String) -> String {
        """
        [{"streamGuid":"live/\(name)","messageType":"ProvisionCommand","streams":[
         {"streamGuid":"live/\(name)_1","abrLevel":1,"videoParams":{"videoWidth":1280,"videoHeight":720,"videoBitRate":2500000}},
         {"streamGuid":"live/\(name)_2","abrLevel":2,"videoParams":{"videoWidth":426,"videoHeight":240,"videoBitRate":400000}},
         {"streamGuid":"live/\(name)_3","abrLevel":3,"videoParams":{"videoWidth":256,"videoHeight":144,"videoBitRate":200000}}]}]
        """
    }

    struct Fleet {
        let postgres: PostgresServer
        let scratch: URL
        var token = ""

        func start(_ index: Int, cores: Double) throws -> ServeProcess {
            try ServeProcess(dataDirectory: scratch.appendingPathComponent("node-\(index)"),
                             arguments: ["--store", postgres.url, "--node-id", "node-\(index)", "--capacity-cores", "\(cores)",
                                         "--grace", "3", "--drain-timeout", "40"],
                             environment: FleetTests.environment, host: "127.0.0.\(index)")
        }
    }

    /// A node request's first answer as a dictionary, with the HTTP status.
    static func nodeRequest(_ node: ServeProcess, _ path: String) throws -> (status: Int, answer: [String: Any]) {
        let reply = try node.http("GET", path)
        let answer = (reply.json as? [[String: Any]])?.first ?? (reply.json as? [String: Any]) ?? [:]
        return (reply.status, answer)
    }

    static func ready(_ node: ServeProcess) -> Bool { (try? node.http("GET", "/ready"))?.status == 200 }

    /// True once every rung of `guid`'s job on `node` has sent pictures (players can start).
    static func rungsFlow(_ node: ServeProcess, _ guid: String) -> Bool {
        let variants = ((try? node.http("GET", "/v1/jobs/\(guid)"))?.json as? [String: Any])?["variants"] as? [[String: Any]] ?? []
        return !variants.isEmpty && variants.allSatisfy { ($0["framesOut"] as? Int ?? 0) > 30 }
    }

    /// Pictures `guid`'s job on `node` dropped for falling behind, as the node counts them: at
    /// ingest (to the next keyframe), in the rung's own queue, and skipped for its players (a
    /// backlog over the limit: a player, or a node, too busy to keep up). 0 when the node does not answer.
    static func picturesDroppedForLoad(_ node: ServeProcess, _ guid: String, level: Int) -> Int {
        guard let job = (try? node.http("GET", "/v1/jobs/\(guid)"))?.json as? [String: Any] else { return 0 }
        let variants = job["variants"] as? [[String: Any]] ?? []
        let rung = variants.first { $0["abrLevel"] as? Int == level }
        let players = (job["players"] as? [[String: Any]] ?? []).filter { $0["requested"] as? String == rung?["streamGuid"] as? String }
        return (job["droppedAtIngest"] as? Int ?? 0) + (rung?["droppedFrames"] as? Int ?? 0)
            + players.reduce(0) { $0 + ($1["droppedPictures"] as? Int ?? 0) }
    }

    @Test func threeNodesShareProvisionsPlacementAndFailover() throws {
        let postgres = try PostgresServer()
        defer { postgres.stop() }
        let scratch = ServeTests.scratch()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let fleet = Fleet(postgres: postgres, scratch: scratch)
        // A has no room for a ladder; B has the most; C has some.
        let a = try fleet.start(1, cores: 0.2)
        defer { a.stop(signal: SIGKILL) }
        let b = try fleet.start(2, cores: 4)
        defer { b.stop(signal: SIGKILL) }
        let c = try fleet.start(3, cores: 2)
        defer { c.stop(signal: SIGKILL) }
        let auth = ["Authorization": "Bearer \(try a.login(user: "manager", password: "s3cret-pass"))"]
        #expect(try a.http("GET", "/as/v1/admin/nodes", headers: auth).status == 200)
        #expect(try a.waitFor(timeout: 10) { ((try a.http("GET", "/as/v1/admin/nodes", headers: auth).json as? [Any])?.count ?? 0) == 3 },
                "every node registers within a heartbeat or two")

        // Provisioned through A, known to B and C at once (NOTIFY), not only at the next heartbeat.
        let created = try a.http("POST", "/as/v1/streams/provision/default", headers: auth, body: Self.provision("stream1"))
        #expect(created.status == 201, "\(created.body)")
        #expect(try b.waitFor(timeout: 2) { try b.http("GET", "/v1/jobs/live/stream1").status == 200 && c.http("GET", "/v1/jobs/live/stream1").status == 200 })

        // A publish request through B names the node with room (B), in the seed's answer shape.
        let (status, publishAt) = try Self.nodeRequest(b, "/as/v1/streams/stream/default/publish/live/stream1_1?transcode=true")
        #expect(status == 200)
        #expect(publishAt["nodeId"] as? String == "node-2" && publishAt["serverAddress"] as? String == "127.0.0.2", "\(publishAt)")
        #expect(publishAt["nodeRole"] as? String == "transcoder" && publishAt["nodeState"] as? String == "INSERVICE")
        #expect(publishAt["streamGuid"] as? String == "live/stream1_1" && publishAt["subGroup"] as? String == "default")
        #expect(publishAt["subscribers"] as? Int == 0)
        let publishURL = try #require(publishAt["rtsp"] as? String)
        var publisher = try ServeTests.startPublishing(publishURL, seconds: 120, loop: true)
        defer { stopProcess(publisher, signal: SIGINT) }
        #expect(b.waitFor(timeout: 30) { Self.rungsFlow(b, "live/stream1") }, "\(b.log.suffix(2000))")

        // A subscribe request through C names B, where the ladder plays out; the player gets the rung.
        let (_, playAt) = try Self.nodeRequest(c, "/as/v1/streams/stream/default/subscribe/live/stream1_2")
        #expect(playAt["nodeId"] as? String == "node-2" && playAt["nodeRole"] as? String == "edge", "\(playAt)")
        try ServeTests.play(try #require(playAt["rtsp"] as? String), seconds: 3, into: scratch.appendingPathComponent("b.ts"), width: 426, height: 240)

        // Errors: nothing provisioned (404), a bad group (400), a lower rung published (400).
        #expect(try Self.nodeRequest(a, "/as/v1/streams/stream/default/publish/live/nothing_1?transcode=true").status == 404)
        #expect(try Self.nodeRequest(a, "/as/v1/streams/stream/no%20such/publish/live/stream1_1").status == 400)
        #expect(try Self.nodeRequest(a, "/as/v1/streams/stream/default/publish/live/stream1_2?transcode=true").status == 400)

        // SOFT_SUNSET asked of C through A: C's readiness drops, no new publisher goes to it or is taken by it.
        let sunset = try a.http("PUT", "/as/v1/admin/nodes/node-3/state", headers: auth, body: #"{"state":"SOFT_SUNSET"}"#)
        #expect(sunset.status == 202, "\(sunset.body)")
        #expect(c.waitFor(timeout: 5) { !Self.ready(c) }, "C applies the state at its next heartbeat")
        #expect(try c.http("POST", "/as/v1/streams/provision/default", headers: auth, body: Self.provision("stream2")).status == 201,
                "any node provisions, whatever its state")
        let (_, second) = try Self.nodeRequest(a, "/as/v1/streams/stream/default/publish/live/stream2_1?transcode=true")
        #expect(second["nodeId"] as? String == "node-2", "A has no room and C is in SOFT_SUNSET: \(second)")
        #expect(try c.waitFor(timeout: 3) { try c.http("GET", "/v1/jobs/live/stream2").status == 200 })
        let refused = try ServeTests.publish("\(c.rtspBase)/live/stream2_1", seconds: 2)
        #expect(refused.status != 0 && refused.stderr.contains("503"), "C refuses a new publisher: \(refused.stderr)")
        #expect(try c.http("PUT", "/as/v1/admin/nodes/node-3/state", headers: auth, body: #"{"state":"INSERVICE"}"#).status == 200)
        #expect(c.waitFor(timeout: 3) { Self.ready(c) })

        // B dies (SIGKILL). Within 10 s node requests go elsewhere (C: A still has no room), and the
        // publisher that reconnects there resumes the stream.
        let killed = Date()
        b.stop(signal: SIGKILL)
        stopProcess(publisher, signal: SIGKILL)
        var moved: [String: Any] = [:]
        #expect(try a.waitFor(timeout: 12) {
            moved = try Self.nodeRequest(a, "/as/v1/streams/stream/default/publish/live/stream1_1?transcode=true").answer
            return moved["nodeId"] as? String == "node-3"
        }, "\(moved)")
        let noticed = Date().timeIntervalSince(killed)
        #expect(noticed < 10.5, "the dead node was routed around after \(noticed) s")
        publisher = try ServeTests.startPublishing(try #require(moved["rtsp"] as? String), seconds: 120, loop: true)
        #expect(c.waitFor(timeout: 30) { Self.rungsFlow(c, "live/stream1") })
        let (_, resumedAt) = try Self.nodeRequest(a, "/as/v1/streams/stream/default/subscribe/live/stream1_3")
        #expect(resumedAt["nodeId"] as? String == "node-3", "\(resumedAt)")
        try ServeTests.play(try #require(resumedAt["rtsp"] as? String), seconds: 3, into: scratch.appendingPathComponent("c.ts"), width: 256, height: 144)

        // No provision lost: through the API and in PostgreSQL itself.
        let listed = try a.http("GET", "/as/v1/streams/provision/default", headers: auth).json as? [[String: Any]]
        #expect(Set(listed?.compactMap { $0["streamGuid"] as? String } ?? []) == ["live/stream1", "live/stream2"])
        #expect(try postgres.query("SELECT count(*) FROM provision") == "2")

        // SIGTERM drains C: SOFT_SUNSET at once (not ready, no new publisher placed there), its
        // player keeps every picture until the publisher stops, then HARD_SUNSET and exit 0.
        let recording = scratch.appendingPathComponent("drain.ts")
        let player = Process()
        player.executableURL = URL(fileURLWithPath: "/usr/bin/ffmpeg")
        player.arguments = ["-hide_banner", "-loglevel", "error", "-rtsp_transport", "tcp", "-i", "\(c.rtspBase)/live/stream1_2",
                            "-c", "copy", "-f", "mpegts", "-y", recording.path]
        player.standardError = FileHandle.nullDevice
        try player.runDeliveringSignals()
        let playerStarted = Date()
        defer { stopProcess(player, signal: SIGKILL) }
        // Playing before the drain begins: the node lists it.
        #expect(c.waitFor(timeout: 15) {
            !((((try? c.http("GET", "/v1/jobs/live/stream1"))?.json as? [String: Any])?["players"] as? [[String: Any]]) ?? []).isEmpty
        }, "the player never started on node 3")
        kill(c.process.processIdentifier, SIGTERM)
        #expect(c.waitFor(timeout: 3) { !Self.ready(c) }, "SIGTERM moves the node to SOFT_SUNSET")
        let draining = try Self.nodeRequest(a, "/as/v1/streams/stream/default/publish/live/stream2_1?transcode=true")
        #expect(draining.answer["nodeId"] as? String != "node-3", "no new publisher goes to a draining node: \(draining)")
        Thread.sleep(forTimeInterval: 4)
        #expect(c.process.isRunning, "the node waits for its live job")
        let publisherStopped = Date()
        stopProcess(publisher, signal: SIGINT)
        // What the node dropped for falling behind real time (the machine is shared: two test
        // shards and the fuzzers beside three nodes), read before the job ends: pictures it never
        // had to give, which the drain did not lose.
        let dropped = Self.picturesDroppedForLoad(c, "live/stream1", level: 2)
        #expect(waitUntil(timeout: 30) { !c.process.isRunning }, "the job ends after its grace (3 s) and the node exits")
        #expect(c.process.terminationStatus == 0, "\(c.log.suffix(3000))")
        #expect(waitUntil(timeout: 10) { !player.isRunning }, "the player was told to leave")
        let packets = try MediaProbe.videoPackets(recording.path)
        let times = packets.map(\.pts)
        let gaps = zip(times.dropFirst(), times).map { $0 - $1 }
        print("drain: \(packets.count) pictures, largest gap \(gaps.max() ?? -1) s, \(dropped) dropped by the node for load")
        #expect((gaps.max() ?? 1) < 0.1 + Double(dropped) / 30,
                "no picture missing beyond the \(dropped) the node dropped for load: the largest gap is \(gaps.max() ?? -1) s")
        let covered = (times.last ?? 0) - (times.first ?? 0)
        let played = publisherStopped.timeIntervalSince(playerStarted)
        // Through the drain's 4 s at least, and as many pictures as that span holds at the
        // publisher's 30 a second. A fixed count (150) failed at 139 and 149 where the player had
        // every picture: how long it played before SIGTERM varies with how soon it was listed.
        #expect(covered > 3.5, "the player's pictures span \(covered) s")
        #expect(Double(packets.count) >= covered * 30 * 0.9, "\(packets.count) pictures over \(covered) s")
        #expect(covered > played - 2, "the player got pictures through the drain until the publisher stopped (\(covered) of \(played) s)")
        #expect(c.log.contains("SOFT_SUNSET") && c.log.contains("HARD_SUNSET"))
    }
}
