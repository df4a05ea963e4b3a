import ControlPlane
import Foundation
import HTTPTypes
import MediaCore
import NIOCore
import NIOPosix
import NodeApp
import Testing
import TestSupport

/// The node `abr-worker serve` runs, built by the library and run in this process: what the
/// command line does, minus argument parsing and signals.
@Suite struct NodeApplicationTests {
    static let environment = ["ABR_WORKER_ADMIN_USER": TestPlane.user, "ABR_WORKER_ADMIN_PASSWORD": TestPlane.password,
                              "ABR_WORKER_JWT_SECRET": TestPlane.secret]

    static func scratch() -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("abr-app-\(UUID().uuidString.prefix(8))")
    }

    static func settings(_ directory: URL) -> NodeSettings {
        var settings = NodeSettings()
        settings.rtspPort = 0
        settings.httpPort = 0
        settings.rtmpPort = 0
        settings.srtPort = -1
        settings.webrtcPort = 0
        settings.dataDirectory = directory.path
        settings.provisionFiles = [fixture("provisions/sm2-3-level.json")]
        settings.nodeGroup = "east"
        settings.statusInterval = 0
        return settings
    }

    /// Runs the application until `body` is done with a client of its HTTP API, then shuts it down gracefully.
    static func serving(_ application: NodeApplication, _ body: (LiveHTTPClient) async throws -> Void) async throws {
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await application.run() }
            var http = 0
            for _ in 0..<100 where http == 0 {
                try await Task.sleep(for: .milliseconds(100))
                http = application.plane.fleet.listeningPorts.http
            }
            do {
                try #require(http > 0, "the HTTP server never listened")
                try await body(LiveHTTPClient(port: http))
            } catch {
                await application.triggerGracefulShutdown()
                try? await tasks.waitForAll()
                throw error
            }
            await application.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
    }

    @Test func theServedNodeRunsInProcessAnswersAndShutsDownInOrder() async throws {
        let directory = Self.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let application = try await buildApplication(Self.settings(directory), environment: Self.environment, shutdownSignals: [])
        try await Self.serving(application) { client in

            try await client.execute(uri: "/ready", method: .get) { response in #expect(response.status == .ok, "\(text(response.body))") }
            // The provision file given at start is stored, and a Stream Manager 2.0 client is sent here.
            try await client.execute(uri: "/as/v1/streams/stream/east/publish/live/stream1?transcode=true", method: .get) { response in
                #expect(response.status == .ok, "\(text(response.body))")
                let answer = try #require(try JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [[String: Any]]).first
                #expect(answer?["serverAddress"] as? String == "127.0.0.1")
                #expect(answer?["nodeRole"] as? String == "transcoder")
                #expect((answer?["rtsp"] as? String)?.hasSuffix(":\(application.rtspPort)/live/stream1_1") == true, "\(answer ?? [:])")
                // A field per other publish protocol the node listens on, named by its scheme: RTMP here, SRT off.
                let rtmpPort = try #require(application.plane.ingestEndpoints.first { $0.ingestProtocol.scheme == "rtmp" }?.port)
                #expect(answer?["rtmp"] as? String == "rtmp://127.0.0.1:\(rtmpPort)/live/stream1_1", "\(answer ?? [:])")
                #expect(answer?["srt"] == nil, "\(answer ?? [:])")
            }
            // The admin API is behind the bearer-token middleware: refused with a reason, then let through.
            try await client.execute(uri: "/as/v1/admin/nodes/self", method: .get) { response in
                #expect(response.status == .unauthorized)
                #expect(response.headers[.wwwAuthenticate] == "Bearer")
                #expect(text(response.body).contains("log in with PUT /as/v1/auth/login"), "\(text(response.body))")
            }
            let token = try await login(client)
            try await client.execute(uri: "/as/v1/admin/nodes/self", method: .get, headers: bearer(token)) { response in
                #expect(response.status == .ok, "\(text(response.body))")
                let node = try jsonObject(response.body)
                #expect(node["nodeGroup"] as? String == "east", "\(node)")
            }
            // RTSP listens on the port the application reports.
            let rtsp = try RawRTSPClient(port: application.rtspPort)
            rtsp.send("OPTIONS rtsp://127.0.0.1:\(application.rtspPort)/live/stream1_1 RTSP/1.0\r\nCSeq: 1\r\n\r\n")
            #expect(rtsp.receiveResponse().hasPrefix("RTSP/1.0 200"))

        }
        #expect(application.plane.fleet.nodeState == .hardSunset, "a graceful shutdown drains through HARD_SUNSET")
    }

    /// Node requests are open, and each new placement holds room for a while: one address may
    /// make 16 at once, then about one a second; asking again for a placed stream costs nothing.
    @Test func oneAddressCannotReserveTheFleetsRoom() async throws {
        let directory = Self.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        var settings = Self.settings(directory)
        settings.capacityCores = 1000
        settings.rtmpPort = -1
        let application = try await buildApplication(settings, environment: Self.environment, shutdownSignals: [])
        try await Self.serving(application) { client in
            let token = try await login(client)
            let ladders = (1...20).map { n in
                #"{"streamGuid":"live/s\#(n)","streams":[{"streamGuid":"live/s\#(n)_1","abrLevel":1,"videoParams":{"videoWidth":640,"videoHeight":360,"videoBitRate":800000}}]}"#
            }
            try await client.execute(uri: "/as/v1/streams/provision/east", method: .post, headers: bearer(token),
                                     body: ByteBuffer(string: "[" + ladders.joined(separator: ",") + "]")) { response in
                #expect(response.status == .created, "\(text(response.body))")
            }
            var statuses: [Int] = []
            for n in 1...20 {
                let status = try await client.execute(uri: "/as/v1/streams/stream/east/publish/live/s\(n)_1?transcode=true", method: .get) { response in
                    if response.status == .tooManyRequests {
                        #expect(Int(response.headers[.retryAfter] ?? "") ?? 0 >= 1, "429 says when to ask again")
                        #expect(text(response.body).contains("too many streams"), "\(text(response.body))")
                    }
                    return response.status.code
                }
                statuses.append(status)
            }
            #expect(statuses.prefix(16).allSatisfy { $0 == 200 } && statuses.dropFirst(16).allSatisfy { $0 == 429 }, "\(statuses)")
            try await client.execute(uri: "/as/v1/streams/stream/east/publish/live/s1_1?transcode=true", method: .get) { response in
                #expect(response.status == .ok, "a stream already placed is answered without a new placement")
            }
        }
    }

    @Test func whatCannotStartSaysWhy() async throws {
        let directory = Self.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        var bad = Self.settings(directory)
        bad.grace = -1
        await #expect(throws: NodeSettings.Invalid.self) { try await buildApplication(bad, environment: Self.environment, shutdownSignals: []) }

        var missing = Self.settings(directory)
        missing.provisionFiles = [directory.appendingPathComponent("nowhere.json").path]
        let problem = await #expect(throws: ProvisionError.self) {
            try await buildApplication(missing, environment: Self.environment, shutdownSignals: [])
        }
        #expect(problem?.description.contains("nowhere.json") == true)

        // A port already taken fails the start and names it.
        let taken = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton).bind(host: "127.0.0.1", port: 0).get()
        var busy = Self.settings(directory.appendingPathComponent("busy"))
        busy.rtspPort = try #require(taken.localAddress?.port)
        let failure = await #expect(throws: NodeStartFailure.self) {
            try await buildApplication(busy, environment: Self.environment, shutdownSignals: [])
        }
        #expect(failure?.description.contains("cannot listen for RTSP on 127.0.0.1:\(busy.rtspPort)") == true, "\(String(describing: failure))")
        // A failed start keeps nothing it opened (its UDP pair, its event loops' descriptors, the
        // provisions' jobs): five more leave the process's descriptors where they were, where each
        // used to leave five behind.
        let descriptorsBefore = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count
        for _ in 0..<5 { _ = try? await buildApplication(busy, environment: Self.environment, shutdownSignals: []) }
        let descriptorsAfter = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count
        #expect(descriptorsAfter - descriptorsBefore < 5, "\(descriptorsBefore) descriptors before five failed starts, \(descriptorsAfter) after")
        try await taken.close()
    }
}
