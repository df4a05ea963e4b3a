import ControlPlane
import Foundation
import HTTPTypes
import NIOCore
import NodeApp
import Testing
import TestSupport

/// The control plane's open doors against round three's attacks: node requests anyone may make,
/// and the Stream Manager 1.0 accessToken anyone may guess.
@Suite struct OpenDoorsTests {
    /// Each anonymous publish request held a ladder's cores for 15 s: two from one address made
    /// every other stream's node request answer 503 on a 2-core node. Anonymous requests now hold
    /// no room (their node still refuses, at publish, a job it cannot run); a stream manager's,
    /// with the admin bearer token, do, so jobs it dispatches at once spread over the fleet.
    @Test func anonymousNodeRequestsCannotFillATwoCoreNode() async throws {
        let directory = NodeApplicationTests.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        var settings = NodeApplicationTests.settings(directory)
        settings.capacityCores = 2
        settings.rtmpPort = -1
        let application = try await buildApplication(settings, environment: NodeApplicationTests.environment, shutdownSignals: [])
        try await NodeApplicationTests.serving(application) { client in
            let token = try await login(client)
            // 1080p single-rung ladders: about one core each by the node's estimate, of 1.7 usable.
            let ladders = (1...6).map { n in
                #"{"streamGuid":"live/room\#(n)","streams":[{"streamGuid":"live/room\#(n)_1","abrLevel":1,"videoParams":{"videoWidth":1920,"videoHeight":1080,"videoBitRate":4000000}}]}"#
            }
            try await client.execute(uri: "/as/v1/streams/provision/east", method: .post, headers: bearer(token),
                                     body: ByteBuffer(string: "[" + ladders.joined(separator: ",") + "]")) { response in
                #expect(response.status == .created, "\(text(response.body))")
            }
            func ask(_ n: Int, headers: HTTPFields = [:]) async throws -> Int {
                try await client.execute(uri: "/as/v1/streams/stream/east/publish/live/room\(n)_1", method: .get, headers: headers) { response in
                    Int(response.status.code)
                }
            }
            #expect(try await ask(1) == 200)
            #expect(try await ask(2) == 200)
            #expect(try await ask(3) == 200, "two anonymous requests must not make the node look full")
            #expect(try await ask(1) == 200, "a repeated ask is routed to the same node")
            // The stream manager's own requests hold room: the second finds none left.
            #expect(try await ask(4, headers: bearer(token)) == 200)
            #expect(try await ask(5, headers: bearer(token)) == 503)
            // A bad bearer token is refused, not served as anonymous.
            #expect(try await ask(6, headers: [.authorization: "Bearer not-a-token"]) == 401)
        }
    }

    /// 300 wrong accessToken guesses got 300 × 401; logins were throttled, this was not. Now
    /// after 10 wrong ones an address gets 429 with Retry-After.
    @Test func accessTokenGuessesAreThrottled() async throws {
        let test = try await TestPlane.make(sm1Token: "sm1-token-0123456789")
        defer { test.close() }
        try await test.withClient { client in
            var statuses: [Int] = []
            for n in 0..<30 {
                let status = try await client.execute(uri: "/streammanager/api/4.0/admin/event/meta/live/show?accessToken=guess\(n)", method: .get) { response in
                    if response.status == .tooManyRequests {
                        #expect(Int(response.headers[.retryAfter] ?? "") ?? 0 >= 1)
                    }
                    return Int(response.status.code)
                }
                statuses.append(status)
            }
            #expect(statuses.prefix(10).allSatisfy { $0 == 401 } && statuses.dropFirst(10).allSatisfy { $0 == 429 }, "\(statuses)")
        }
    }
}
