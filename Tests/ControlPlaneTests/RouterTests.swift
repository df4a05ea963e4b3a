import ControlPlane
import Digests
import Foundation
import HTTPTypes
import Hummingbird
import LiveNode
import MediaCore
import NIOCore
import RTSPServer
import Store
import TestSupport
import Testing
import Transcoder

/// A control plane in a fresh data directory, with known credentials.
struct TestPlane {
    static let user = "admin"
    static let password = "correct horse"
    static let secret = "test-signing-secret-0123456789abcdef"

    let directory: URL
    let plane: ControlPlane

    static func make(sm1Token: String? = nil, directory: URL? = nil) async throws -> TestPlane {
        let directory = directory ?? FileManager.default.temporaryDirectory.appendingPathComponent("abr-plane-\(UUID().uuidString)")
        var configuration = ControlPlane.Configuration(credentials: NodeCredentials(adminUser: user, adminPassword: password, jwtSecret: secret))
        configuration.sm1AccessToken = sm1Token
        configuration.tokenLifetime = 600
        let plane = await ControlPlane(configuration: configuration, nodeConfiguration: LiveNode.Configuration(dataDirectory: directory),
                                       registry: StreamRegistry(), store: try SQLiteStore(directory: directory))
        _ = try await plane.provisions.restore()
        return TestPlane(directory: directory, plane: plane)
    }

    func withClient(_ body: @escaping @Sendable (any TestClientProtocol) async throws -> Void) async throws {
        try await withLiveAPI(plane) { client in try await body(client) }
    }

    func close() {
        plane.drain()
        try? (plane.store as? SQLiteStore)?.closeNow()
        try? FileManager.default.removeItem(at: directory)
    }
}

let provisionBody = """
[{"streamGuid":"live/stream1","messageType":"ProvisionCommand","streams":[
 {"streamGuid":"live/stream1_1","abrLevel":1,"videoParams":{"videoWidth":1280,"videoHeight":720,"videoBitRate":2500000}},
 {"streamGuid":"live/stream1_2","abrLevel":2,"videoParams":{"videoWidth":854,"videoHeight":480,"videoBitRate":1000000}},
 {"streamGuid":"live/stream1_3","abrLevel":3,"videoParams":{"videoWidth":640,"videoHeight":360,"videoBitRate":600000}}]}]
"""

func bearer(_ token: String) -> HTTPFields { [.authorization: "Bearer \(token)"] }
func text(_ body: ByteBuffer) -> String { String(buffer: body) }
func jsonObject(_ body: ByteBuffer) throws -> [String: Any] {
    try #require(try JSONSerialization.jsonObject(with: Data(buffer: body)) as? [String: Any])
}

func login(_ client: some TestClientProtocol) async throws -> String {
    let basic = Data("\(TestPlane.user):\(TestPlane.password)".utf8).base64EncodedString()
    return try await client.execute(uri: "/as/v1/auth/login", method: .put, headers: [.authorization: "Basic \(basic)"]) { response in
        #expect(response.status == .ok)
        return try #require(try jsonObject(response.body)["token"] as? String)
    }
}

/// A compact HS256 JWS built by hand (header and claims as given), apart from the node's own
/// `TokenAuthority`: what the node accepts is checked against an independent signer.
func handSignedToken(header: String = #"{"alg":"HS256","typ":"JWT"}"#, claims: String, secret: String = TestPlane.secret) -> String {
    func base64URL(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }
    let input = base64URL(Data(header.utf8)) + "." + base64URL(Data(claims.utf8))
    let signature = Digest.hmac(.sha256, Data(input.utf8), key: Digest.Key(secret.utf8))
    return input + "." + base64URL(Data(signature))
}

/// Tokens an attacker or a careless client could send: each must get 401 and change nothing.
func badTokens() -> [(String, String)] {
    let now = Int(Date().timeIntervalSince1970)
    let expired = handSignedToken(claims: #"{"sub":"admin","exp":\#(now - 60)}"#)
    let forged = handSignedToken(claims: #"{"sub":"admin","exp":\#(now + 600)}"#, secret: "some-other-secret-that-is-long-enough-0123456789")
    let unsignedHeader = Data(#"{"alg":"none","typ":"JWT"}"#.utf8).base64EncodedString().replacingOccurrences(of: "=", with: "")
    let claims = Data(#"{"sub":"admin","exp":4102444800}"#.utf8).base64EncodedString().replacingOccurrences(of: "=", with: "")
    return [("expired", expired), ("forged", forged), ("alg none", "\(unsignedHeader).\(claims)."),
            ("malformed", "not.a.jwt"), ("empty", ""),
            ("exp as a string", handSignedToken(claims: #"{"sub":"admin","exp":"4102444800"}"#)),
            ("no exp", handSignedToken(claims: #"{"sub":"admin"}"#)),
            ("a critical header", handSignedToken(header: #"{"alg":"HS256","crit":["b64"],"b64":false}"#, claims: #"{"sub":"admin","exp":\#(now + 600)}"#)),
            ("signature cut short", String(handSignedToken(claims: #"{"sub":"admin","exp":\#(now + 600)}"#).dropLast(2)))]
}

@Suite struct RouterTests {
    @Test func loginIssuesAVerifiableTokenAndRefusesWrongCredentials() async throws {
        let test = try await TestPlane.make()
        defer { test.close() }
        try await test.withClient { client in
            let token = try await login(client)
            #expect(token.split(separator: ".").count == 3)
            let wrong = Data("admin:wrong".utf8).base64EncodedString()
            try await client.execute(uri: "/as/v1/auth/login", method: .put, headers: [.authorization: "Basic \(wrong)"]) { response in
                #expect(response.status == .unauthorized)
                #expect(text(response.body).contains("wrong user or password"))
            }
            try await client.execute(uri: "/as/v1/auth/login", method: .put) { response in
                #expect(response.status == .unauthorized)
                #expect(response.headers[.wwwAuthenticate]?.hasPrefix("Basic") == true)
            }
        }
    }

    @Test func provisionLifecycle() async throws {
        let test = try await TestPlane.make()
        defer { test.close() }
        try await test.withClient { client in
            let token = try await login(client)
            try await client.execute(uri: "/as/v1/streams/provision/east-1", method: .post, headers: bearer(token),
                                     body: ByteBuffer(string: provisionBody)) { response in
                #expect(response.status == .created)
                let stored = try #require(try JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [[String: Any]])
                #expect(stored.first?["streamGuid"] as? String == "live/stream1")
                #expect(stored.first?["messageType"] as? String == "ProvisionCommand")
            }
            // On disk before the reply, and the node waits for the top variant's publisher.
            #expect(try await test.plane.store.provision("live/stream1")?.nodeGroup == "east-1")
            #expect(test.plane.node.ladder("live/stream1")?.variants.count == 3)

            try await client.execute(uri: "/as/v1/streams/provision/east-1", method: .post, headers: bearer(token),
                                     body: ByteBuffer(string: provisionBody)) { response in
                #expect(response.status == .conflict)
                #expect(text(response.body).contains("already provisioned: live/stream1"))
            }
            // A batch is all or nothing: a new provision beside a taken one is not stored either.
            let fresh = #"{"streamGuid":"live/fresh","streams":[{"streamGuid":"live/fresh_1","abrLevel":1,"videoParams":{"videoWidth":640,"videoHeight":360,"videoBitRate":800000}}]}"#
            let mixed = "[\(fresh),\(provisionBody.dropFirst().dropLast())]"
            try await client.execute(uri: "/as/v1/streams/provision/east-1", method: .post, headers: bearer(token),
                                     body: ByteBuffer(string: mixed)) { response in
                #expect(response.status == .conflict, "\(text(response.body))")
            }
            #expect(try await test.plane.store.provision("live/fresh") == nil)
            #expect(test.plane.node.ladder("live/fresh") == nil)
            try await client.execute(uri: "/as/v1/streams/provision/east-1", method: .get, headers: bearer(token)) { response in
                #expect(response.status == .ok)
                #expect(text(response.body).contains("\"live/stream1_3\""))
            }
            try await client.execute(uri: "/as/v1/streams/provision/west", method: .get, headers: bearer(token)) { response in
                #expect(text(response.body) == "[]")
            }
            try await client.execute(uri: "/as/v1/streams/provision/east-1/live/stream1", method: .get, headers: bearer(token)) { response in
                #expect(response.status == .ok)
                let stored = try jsonObject(response.body)
                #expect(stored["streamGuid"] as? String == "live/stream1")
            }
            try await client.execute(uri: "/as/v1/streams/provision/west/live/stream1", method: .get, headers: bearer(token)) { response in
                #expect(response.status == .notFound)
            }
            try await client.execute(uri: "/v1/jobs/live/stream1", method: .get) { response in
                let job = try jsonObject(response.body)
                #expect(job["state"] as? String == "waitingForPublisher")
                #expect((job["variants"] as? [[String: Any]])?.map { $0["abrLevel"] as? Int } == [1, 2, 3])
            }
            try await client.execute(uri: "/v1/streams/live/stream1_2/abr", method: .get) { response in
                let hints = try jsonObject(response.body)
                let variants = try #require(hints["variants"] as? [[String: Any]])
                #expect(variants.map { $0["declaredBitRate"] as? Int } == [2_500_000, 1_000_000, 600_000])
                #expect(variants.allSatisfy { ($0["upswitchAboveBitRate"] as? Int ?? 0) > ($0["downswitchBelowBitRate"] as? Int ?? .max) })
            }
            try await client.execute(uri: "/as/v1/streams/provision/east-1/live/stream1", method: .delete, headers: bearer(token)) { response in
                #expect(response.status == .ok)
            }
            #expect(try await test.plane.store.provision("live/stream1") == nil)
            #expect(test.plane.node.ladder("live/stream1") == nil)
            try await client.execute(uri: "/as/v1/streams/provision/east-1/live/stream1", method: .delete, headers: bearer(token)) { response in
                #expect(response.status == .notFound)
            }
            try await client.execute(uri: "/v1/jobs/live/stream1", method: .get) { response in
                #expect(response.status == .notFound)
            }
        }
    }

    @Test func invalidProvisionsReportEveryProblemWithItsPathAndStoreNothing() async throws {
        let test = try await TestPlane.make()
        defer { test.close() }
        let good = #"{"streamGuid":"live/a","streams":[{"streamGuid":"live/a_1","abrLevel":1,"videoParams":{"videoWidth":640,"videoHeight":360,"videoBitRate":800000}}]}"#
        let cases: [(body: String, paths: [String])] = [
            ("[\(good),{\"streamGuid\":\"live/b\",\"streams\":[{\"streamGuid\":\"live/b_1\",\"abrLevel\":\"one\",\"videoParams\":{\"videoWidth\":640,\"videoHeight\":-1,\"videoBitRate\":800000}}]}]",
             ["$[1].streams[0].abrLevel", "$[1].streams[0].videoParams.videoHeight"]),
            ("[\(good),\(good)]", ["$[1]"]),
            (good, ["$"]),
            ("[]", ["$"]),
            ("[{\"streams\":[]}", ["$"]),
            ("[{\"provisionGuid\":\"x\",\"streams\":5}]", ["$[0].provisionGuid", "$[0].streams"]),
        ]
        try await test.withClient { client in
            let token = try await login(client)
            for (body, paths) in cases {
                try await client.execute(uri: "/as/v1/streams/provision/g", method: .post, headers: bearer(token), body: ByteBuffer(string: body)) { response in
                    #expect(response.status == .badRequest, "\(body)")
                    let error = try #require(try jsonObject(response.body)["error"] as? [String: Any])
                    #expect(!(error["message"] as? String ?? "").isEmpty)
                    let reported = (error["problems"] as? [[String: Any]] ?? []).compactMap { $0["path"] as? String }
                    for path in paths { #expect(reported.contains(path), "\(body): \(reported)") }
                }
            }
            try await client.execute(uri: "/as/v1/streams/provision/bad%20group", method: .post, headers: bearer(token), body: ByteBuffer(string: "[\(good)]")) { response in
                #expect(response.status == .badRequest)
            }
        }
        #expect(try await test.plane.store.provisions().isEmpty)
        #expect(test.plane.node.ladders.isEmpty)
    }

    @Test func unauthenticatedAndForgedRequestsChangeNothing() async throws {
        let test = try await TestPlane.make()
        defer { test.close() }
        let tokens = badTokens()
        try await test.withClient { client in
            let token = try await login(client)
            let kept = #"[{"streamGuid":"live/kept","streams":[{"streamGuid":"live/kept_1","abrLevel":1,"videoParams":{"videoWidth":640,"videoHeight":360,"videoBitRate":800000}}]}]"#
            try await client.execute(uri: "/as/v1/streams/provision/g", method: .post, headers: bearer(token), body: ByteBuffer(string: kept)) { response in
                #expect(response.status == .created)
            }
            var attempts: [(String, HTTPFields)] = tokens.map { ($0.0, bearer($0.1)) }
            attempts.append(("no header", [:]))
            attempts.append(("basic instead of bearer", [.authorization: "Basic \(Data("admin:correct horse".utf8).base64EncodedString())"]))
            for (name, headers) in attempts {
                for (method, uri, body) in [(HTTPRequest.Method.post, "/as/v1/streams/provision/g", provisionBody),
                                            (.delete, "/as/v1/streams/provision/g/live/kept", ""),
                                            (.get, "/as/v1/streams/provision/g", ""),
                                            (.get, "/as/v1/streams/provision/g/live/kept", "")] {
                    try await client.execute(uri: uri, method: method, headers: headers, body: ByteBuffer(string: body)) { response in
                        #expect(response.status == .unauthorized, "\(name) \(method) \(uri)")
                        let body = try jsonObject(response.body)
                        #expect(body["error"] != nil)
                    }
                }
            }
        }
        #expect(try await test.plane.store.provisions().map(\.streamGuid) == ["live/kept"])
        #expect(test.plane.node.ladders.map(\.streamGuid) == ["live/kept"])
    }

    @Test func streamManager1MetaAPI() async throws {
        let meta = #"{"meta":{"authentication":{"username":"","password":""},"stream":[{"name":"show_1","level":1,"properties":{"videoBR":1500000,"videoWidth":1280,"videoHeight":720}},{"name":"show_2","level":2,"properties":{"videoBR":500000,"videoWidth":640,"videoHeight":360}}],"georules":{"regions":["US"],"restricted":false},"qos":3}}"#
        let off = try await TestPlane.make()
        defer { off.close() }
        try await off.withClient { client in
            try await client.execute(uri: "/streammanager/api/4.0/admin/event/meta/live/show?accessToken=x", method: .post, body: ByteBuffer(string: meta)) { response in
                #expect(response.status == .notFound)
                #expect(text(response.body).contains("ABR_WORKER_SM1_ACCESS_TOKEN"))
            }
        }
        let test = try await TestPlane.make(sm1Token: "sm1-token")
        defer { test.close() }
        try await test.withClient { client in
            for uri in ["/streammanager/api/4.0/admin/event/meta/live/show", "/streammanager/api/4.0/admin/event/meta/live/show?accessToken=wrong"] {
                try await client.execute(uri: uri, method: .post, body: ByteBuffer(string: meta)) { response in
                    #expect(response.status == .unauthorized)
                }
            }
            #expect(test.plane.node.ladders.isEmpty)
            let uri = "/streammanager/api/4.0/admin/event/meta/live/show?accessToken=sm1-token"
            try await client.execute(uri: uri, method: .post, body: ByteBuffer(string: meta)) { response in
                #expect(response.status == .created)
            }
            let ladder = try #require(test.plane.node.ladder("live/show"))
            #expect(ladder.variants.map(\.streamGuid) == ["live/show_1", "live/show_2"])
            #expect(ladder.variants.map(\.bitRate) == [1_500_000, 500_000])
            try await client.execute(uri: uri, method: .post, body: ByteBuffer(string: meta)) { response in
                #expect(response.status == .conflict)
            }
            try await client.execute(uri: uri, method: .post, body: ByteBuffer(string: #"{"meta":{"stream":[{"name":"show_1","level":0}]}}"#)) { response in
                #expect(response.status == .badRequest)
            }
            try await client.execute(uri: uri, method: .get) { response in
                #expect(response.status == .ok)
                #expect(text(response.body).contains("\"qos\":3"))
            }
            try await client.execute(uri: uri, method: .delete) { response in
                #expect(response.status == .ok)
            }
            #expect(test.plane.node.ladder("live/show") == nil)
        }
    }

    @Test func hlsServesPlaylistsAndSegmentsAndNothingOutsideTheHLSDirectory() async throws {
        let test = try await TestPlane.make()
        defer { test.close() }
        let hls = test.directory.appendingPathComponent("hls/live/s/s_1")
        try FileManager.default.createDirectory(at: hls, withIntermediateDirectories: true)
        try "#EXTM3U\n".write(to: hls.appendingPathComponent("../master.m3u8").standardizedFileURL, atomically: true, encoding: .utf8)
        try Data([0, 0, 0, 8]).write(to: hls.appendingPathComponent("segment_00001.m4s"))
        try Data([0, 0, 0, 8]).write(to: hls.appendingPathComponent("init.mp4"))
        try "secret".write(to: test.directory.appendingPathComponent("hls/../outside.m3u8").standardizedFileURL, atomically: true, encoding: .utf8)
        try FileManager.default.createSymbolicLink(at: hls.appendingPathComponent("link.m3u8"), withDestinationURL: test.directory.appendingPathComponent("outside.m3u8"))
        try FileManager.default.createSymbolicLink(at: test.directory.appendingPathComponent("hls/live/up"), withDestinationURL: test.directory)
        try await test.withClient { client in
            for (uri, type) in [("/hls/live/s/master.m3u8", "application/vnd.apple.mpegurl"), ("/hls/live/s/s_1/segment_00001.m4s", "video/iso.segment"),
                                ("/hls/live/s/s_1/init.mp4", "video/mp4")] {
                try await client.execute(uri: uri, method: .get, headers: [.origin: "https://player.example"]) { response in
                    #expect(response.status == .ok, "\(uri)")
                    #expect(response.headers[.contentType] == type)
                    #expect(response.headers[.accessControlAllowOrigin] == "*")
                }
            }
            try await client.execute(uri: "/hls/live/s/master.m3u8", method: .options,
                                     headers: [.origin: "https://player.example", .accessControlRequestMethod: "GET"]) { response in
                #expect(response.headers[.accessControlAllowOrigin] == "*")
            }
            let attempts = ["/hls/../outside.m3u8", "/hls/live/../../outside.m3u8", "/hls/%2e%2e/outside.m3u8", "/hls/live%2F..%2F..%2Foutside.m3u8",
                            "/hls/live/s/..%2F..%2F..%2Foutside.m3u8", "/hls/live/s/s_1/link.m3u8", "/hls/live/up/outside.m3u8",
                            "/hls/live/up/hls/live/s/master.m3u8", "/hls/live/s/s_1/..%5C..%5C..%5Coutside.m3u8", "/hls/live/s/%2fetc%2fpasswd",
                            "/hls//etc/passwd", "/hls/live/s/s_1/segment_00001.m4s%00.m3u8", "/hls/live/s", "/hls/", "/hls/abr-worker.sqlite"]
            for uri in attempts {
                try await client.execute(uri: uri, method: .get) { response in
                    #expect(response.status == .notFound, "\(uri)")
                    #expect(!text(response.body).contains("secret"))
                }
            }
            // Raw backslashes are not a valid request target: the HTTP parser refuses the request
            // (the connection closes unanswered, or 400); either way nothing is served.
            let raw = "/hls/live/s/s_1/..\\..\\..\\outside.m3u8"
            let answer = try? await client.execute(uri: raw, method: .get) { response in (response.status, text(response.body)) }
            #expect(answer.map { $0.0 != .ok && !$0.1.contains("secret") } ?? true, "\(raw): \(String(describing: answer))")
        }
    }

    @Test func healthReadinessCapacityAndMetrics() async throws {
        let test = try await TestPlane.make()
        defer { test.close() }
        _ = try await test.plane.provisions.add(streamManager2: Array(provisionBody.utf8), nodeGroup: "g")
        try await test.withClient { client in
            try await client.execute(uri: "/health", method: .get) { #expect($0.status == .ok) }
            try await client.execute(uri: "/ready", method: .get) { #expect($0.status == .serviceUnavailable) }
            test.plane.setReady(true, rtspBase: "rtsp://127.0.0.1:8554")
            try await client.execute(uri: "/ready", method: .get) { #expect($0.status == .ok) }
            try await client.execute(uri: "/v1/capacity", method: .get) { response in
                let capacity = try jsonObject(response.body)
                #expect(capacity["cores"] as? Int == ProcessInfo.processInfo.activeProcessorCount)
                #expect(capacity["runningJobs"] as? Int == 0)
                #expect(capacity["provisionedJobs"] as? Int == 1)
                #expect(capacity["acceptsJob"] as? Bool == true)
                #expect((capacity["nextJobCores"] as? Double ?? 0) > 0)
            }
            try await client.execute(uri: "/metrics", method: .get) { response in
                #expect(response.headers[.contentType]?.hasPrefix("text/plain") == true)
                let samples = try PrometheusText.parse(text(response.body))
                #expect(samples["abr_worker_jobs{state=\"waitingForPublisher\"}"] == 1)
                #expect(samples["abr_worker_provisions"] == 1)
                #expect(samples["abr_worker_accepts_jobs"] == 1)
                #expect(samples["abr_worker_players{level=\"3\"}"] == 0)
                #expect(samples["abr_worker_variant_shed{level=\"3\"}"] == 0)
                #expect(samples["abr_worker_variant_shed_frames{level=\"3\"}"] == 0)
                #expect(samples["abr_worker_variant_segment_write_failures{level=\"3\"}"] == 0)
                #expect(samples["abr_worker_notifications_refused"] == 0)
                // Bounded labels: never a stream id.
                #expect(!samples.keys.contains { $0.contains("live/") })
            }
            try await client.execute(uri: "/", method: .get) { response in
                let page = text(response.body)
                #expect(response.headers[.contentType]?.hasPrefix("text/html") == true)
                #expect(page.contains("<video") && page.contains("src=\"/hls/live/stream1/master.m3u8\""))
                #expect(page.contains("rtsp://127.0.0.1:8554/live/stream1_1"))
                #expect(!page.contains("<script src"))
            }
        }
    }
}

/// Reads Prometheus' text exposition strictly enough to catch a malformed line.
enum PrometheusText {
    struct Malformed: Error, CustomStringConvertible {
        var line: String
        var description: String { "not a Prometheus sample or comment: \(line)" }
    }

    static func parse(_ text: String) throws -> [String: Double] {
        var samples: [String: Double] = [:]
        let sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})?) (-?[0-9.eE+-]+|NaN|[+-]Inf)$/
        for line in text.split(separator: "\n") where !line.isEmpty {
            if line.hasPrefix("# HELP ") || line.hasPrefix("# TYPE ") { continue }
            guard let match = try sample.wholeMatch(in: String(line)), let value = Double(match.output.2) ?? (match.output.2 == "NaN" ? .nan : nil) else {
                throw Malformed(line: String(line))
            }
            samples[String(match.output.1)] = value
        }
        return samples
    }
}

@Suite struct EventTests {
    /// Publisher notifications (a phone call on the publisher's device...) reach SSE listeners
    /// and the stored job history; hint updates reach listeners only.
    @Test func publisherNotificationsReachListenersAndTheHistory() async throws {
        let test = try await TestPlane.make()
        defer { test.close() }
        _ = try await test.plane.provisions.add(streamManager2: Array(provisionBody.utf8), nodeGroup: "g")
        let events = try #require(test.plane.events.listen(streamGuid: "live/stream1"))
        let other = try #require(test.plane.events.listen(streamGuid: "live/other"))
        let job = try #require(test.plane.node.job("live/stream1"))
        job.recordNotification("publisherBackground", value: "incoming call")
        job.recordNotification("publisherForeground", value: "")
        test.plane.events.publish(streamGuid: "live/stream1", time: 1, kind: "hintsUpdated", detail: "L1 ...")
        var received: [EventHub.Event] = []
        for await event in events {
            received.append(event)
            if received.count == 3 { break }
        }
        #expect(received.map(\.kind) == ["publisherBackground", "publisherForeground", "hintsUpdated"])
        #expect(received[0].detail == "incoming call")
        #expect(received.map(\.id) == received.map(\.id).sorted())
        let history = try await test.plane.store.history("live/stream1", limit: 100)
        #expect(history.map(\.kind) == ["publisherBackground", "publisherForeground"])
        test.plane.events.finishAll()
        var leaked = 0
        for await _ in other { leaked += 1 }
        #expect(leaked == 0)
    }

    /// A publisher cannot write what it likes into the history, nor as often as it likes.
    @Test func publisherNotificationsAreAllowListedAndRateLimited() async throws {
        let test = try await TestPlane.make()
        defer { test.close() }
        _ = try await test.plane.provisions.add(streamManager2: Array(provisionBody.utf8), nodeGroup: "g")
        let job = try #require(test.plane.node.job("live/stream1"))
        job.recordNotification("dropTables", value: "x")
        job.recordNotification("publisherBackground", value: String(repeating: "v", count: 10_000))
        for _ in 0..<500 { job.recordNotification("publisherForeground", value: "") }
        let kept = job.events.filter { $0.kind.hasPrefix("publisher") || $0.kind == "dropTables" }
        #expect(!kept.contains { $0.kind == "dropTables" })
        #expect(kept.first?.detail.utf8.count == LiveLadderJob.maximumNotificationValue)
        #expect(kept.count <= Int(LiveLadderJob.notificationBurst) + 2, "kept \(kept.count) of 501")
        #expect(job.status.notificationsRefused >= 500 - Int(LiveLadderJob.notificationBurst) - 2)
        #expect(await test.plane.jobView("live/stream1")?.notificationsRefused == job.status.notificationsRefused, "the API shows the count")
        let samples = try PrometheusText.parse(test.plane.metricsExposition())
        #expect(samples["abr_worker_notifications_refused"] == Double(job.status.notificationsRefused), "and so do the metrics")
        #expect(await test.plane.jobView("live/stream1")?.variants.allSatisfy { $0.segmentWriteFailures == 0 } == true)
    }

    @Test func theHistoryIsCappedPerStream() async throws {
        let test = try await TestPlane.make()
        defer { test.close() }
        for index in 0..<(JobHistoryLimits.eventsPerStream + 50) {
            test.plane.store.record(JobEvent(streamGuid: "live/capped", time: Double(index), kind: "k", detail: "\(index)"))
        }
        test.plane.store.record(JobEvent(streamGuid: "live/other", time: 0, kind: "k", detail: "kept"))
        let history = try await test.plane.store.history("live/capped", limit: 10_000)
        #expect(history.count == JobHistoryLimits.eventsPerStream)
        #expect(history.first?.detail == "50")
        #expect(try await test.plane.store.history("live/other").count == 1)
    }

    @Test func eventListenersAreLimitedPerStream() async throws {
        let test = try await TestPlane.make()
        defer { test.close() }
        let streams = (0..<EventHub.maximumListenersPerStream).compactMap { _ in test.plane.events.listen(streamGuid: "live/busy") }
        #expect(streams.count == EventHub.maximumListenersPerStream)
        #expect(test.plane.events.listen(streamGuid: "live/busy") == nil)
        #expect(test.plane.events.listen(streamGuid: "live/quiet") != nil)
        test.plane.events.finishAll()
    }
}

@Suite struct CapacityEstimateTests {
    @Test func aTopThatWillPassThroughIsNotCountedAsEncodingWork() throws {
        let monitor = CapacityMonitor(configuration: .init(cores: 2), statuses: { [] })
        let ladder = try ProvisionParser.parse(try Data(contentsOf: fixturesDirectory.appendingPathComponent("provisions/sm2-3-level.json")))
        let all = monitor.estimatedCores(ladder)
        let lower = monitor.estimatedCores(ladder, topPassesThrough: true)
        let top = Double(ladder.top.pixelCount) * 30 * monitor.configuration.coresPerPixelRate
        #expect(abs(all - lower - top) < 1e-9, "all \(all), without the top \(lower)")
        // On 2 cores at 85 %: a ladder whose top passes through fits where an encoded one might not.
        #expect(monitor.admissionRefusal(ladder, topPassesThrough: true) == nil)
    }
}
