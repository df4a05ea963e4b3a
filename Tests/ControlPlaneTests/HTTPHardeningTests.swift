import ControlPlane
import Digests
import Foundation
import HTTPTypes
import Hummingbird
import LiveNode
import NIOCore
import TLSTransport
import RTSPServer
import Store
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The HTTP side of issue 22: descriptors, logins and tokens against an attacker.
@Suite struct HTTPHardeningTests {
    /// A control plane on its own store in `directory`, its limits set by `configure`.
    static func plane(directory: URL, _ configure: (inout ControlPlane.Configuration) -> Void) async throws -> ControlPlane {
        var configuration = ControlPlane.Configuration(credentials: NodeCredentials(adminUser: "admin", adminPassword: "pw", jwtSecret: TestPlane.secret))
        configure(&configuration)
        return await ControlPlane(configuration: configuration, nodeConfiguration: LiveNode.Configuration(dataDirectory: directory),
                                  registry: StreamRegistry(), store: try SQLiteStore(directory: directory))
    }

    static func shutDown(_ plane: ControlPlane) {
        plane.drain()
        try? (plane.store as? SQLiteStore)?.closeNow()
    }

    /// A raw TCP connection from a chosen loopback address.
    final class Connection {
        let descriptor: Int32

        /// `receiveBuffer`: the socket's receive buffer in bytes (a client that reads nothing fills it soon).
        /// `readTimeout`: seconds `read()` waits for the server.
        init(port: Int, from source: String = "127.0.0.1", receiveBuffer: Int32? = nil, readTimeout: Int = 5) throws {
            descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var timeout = timeval(tv_sec: readTimeout, tv_usec: 0)
            setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            if var size = receiveBuffer { setsockopt(descriptor, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size)) }
            var local = sockaddr_in()
            local.sin_family = sa_family_t(AF_INET)
            local.sin_addr.s_addr = inet_addr(source)
            _ = withUnsafePointer(to: &local) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
            var remote = sockaddr_in()
            remote.sin_family = sa_family_t(AF_INET)
            remote.sin_port = in_port_t(UInt16(port).bigEndian)
            remote.sin_addr.s_addr = inet_addr("127.0.0.1")
            let result = withUnsafePointer(to: &remote) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
            guard result == 0 else { throw POSIXError(.ECONNREFUSED) }
        }

        deinit { close(descriptor) }

        func send(_ text: String) { sendBytes(Array(text.utf8)) }

        func sendBytes(_ bytes: [UInt8]) { _ = bytes.withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } }

        /// What arrives before the server closes the connection or `readTimeout` passes; `closed` when it closed (or reset it).
        func read() -> (text: String, closed: Bool) {
            var data = [UInt8]()
            var chunk = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = recv(descriptor, &chunk, chunk.count, 0)
                if count == 0 { return (String(decoding: data, as: UTF8.self), true) }
                // Reset: the server closed with our bytes unread (as it does to a refused handshake).
                if count < 0 { return (String(decoding: data, as: UTF8.self), errno == ECONNRESET) }
                data += chunk[0..<count]
                if String(decoding: data, as: UTF8.self).contains("\r\n\r\n") { return (String(decoding: data, as: UTF8.self), false) }
            }
        }
    }


    /// 20 000 half-open connections took every descriptor the process had. Now connections are
    /// capped in all and per address (a request past the cap is answered 503), and one that sends
    /// nothing (or a header that never ends) is closed after the idle timeout; another client is
    /// served throughout.
    @Test func excessAndIdleConnectionsAreClosedAndOthersAreServed() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("abr-http-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: directory) }
        let plane = try await Self.plane(directory: directory) { configuration in
            configuration.httpConnections.total = 12
            configuration.httpConnections.perAddress = 6
            configuration.httpIdleTimeout = 2
        }
        defer { Self.shutDown(plane) }
        try await withLiveAPI(plane) { client in
            let port = try #require(client.port)
            let limiter = plane.httpConnections
            // Six connections from one address: one sends nothing, the others a header that never ends.
            var hogs: [Connection] = []
            for index in 0..<6 {
                let hog = try Connection(port: port)
                if index > 0 { hog.send("GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ") }
                hogs.append(hog)
            }
            #expect(waitUntil(timeout: 3) { limiter.openConnections == 6 })
            // Past the per-address limit a request is answered 503 with Retry-After, and its connection closed.
            let seventh = try Connection(port: port)
            seventh.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            let refusal = seventh.read()
            #expect(refusal.text.hasPrefix("HTTP/1.1 503") && refusal.text.lowercased().contains("retry-after: 1"), "\(refusal)")
            #expect(refusal.closed || seventh.read().closed)
            // One that sends nothing is closed unanswered after 5 s.
            let silent = try Connection(port: port, readTimeout: 10)
            let started = Date()
            let silence = silent.read()
            #expect(silence.closed && silence.text.isEmpty && Date().timeIntervalSince(started) < 8, "\(silence)")
            // Another address is served meanwhile.
            let other = try Connection(port: port, from: "127.0.0.2")
            other.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            let answer = other.read()
            #expect(answer.text.hasPrefix("HTTP/1.1 200"), "\(answer) open \(limiter.openConnections) refused \(limiter.refusedConnections)")
            // The idle and the slow ones are closed by the timeout, and their slots come back.
            for hog in hogs { #expect(hog.read().closed) }
            #expect(waitUntil(timeout: 3) { limiter.openConnections <= 1 }, "\(limiter.openConnections) still open")
            #expect(limiter.refusedConnections >= 1)
        }
    }

    /// Clients that ask for something large and read none of it: a connection whose answer has not
    /// moved for `writeStallTimeout` is closed, and its slot comes back (Hummingbird's idle timeout
    /// spares a connection while a response is being written, so it alone does not always).
    @Test func clientsThatNeverReadTheirAnswerLoseTheirConnections() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("abr-stall-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        // Something large to ask for: 8 MB as the player script.
        let script = directory.appendingPathComponent("hls.mjs")
        try Data(repeating: 0x20, count: 8 << 20).write(to: script)
        let plane = try await Self.plane(directory: directory) { configuration in
            configuration.httpConnections.total = 12
            configuration.httpConnections.perAddress = 6
            configuration.httpConnections.writeStallTimeout = 2
            // Long, so only the stall can close them within the test.
            configuration.httpIdleTimeout = 60
            configuration.hlsPlayerScript = script
        }
        defer { Self.shutDown(plane) }
        try await withLiveAPI(plane) { client in
            let port = try #require(client.port)
            let limiter = plane.httpConnections
            let readers = try (0..<6).map { _ in try Connection(port: port, receiveBuffer: 4096) }
            for reader in readers { reader.send("GET /assets/hls.mjs HTTP/1.1\r\nHost: x\r\n\r\n") }
            #expect(waitUntil(timeout: 3) { limiter.openConnections == 6 })
            // Their answers do not move for 2 s: every slot comes back.
            #expect(waitUntil(timeout: 6) { limiter.openConnections == 0 }, "\(limiter.openConnections) still open")
            let other = try Connection(port: port)
            other.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(other.read().text.hasPrefix("HTTP/1.1 200"))
        }
    }

    /// Over HTTPS a connection was counted only once its handshake was done, and every byte reset
    /// its idle timeout: a peer trickling its ClientHello a byte at a time held a descriptor as
    /// long as it liked, from as many connections as it liked. Now handshakes are capped per
    /// address and must finish in time, however busy the peer keeps them; a client from another
    /// address completes its handshake and is served meanwhile.
    @Test func tlsHandshakesTrickledAByteAtATimeAreCappedAndTimedOut() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("abr-tls-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let certificate = directory.appendingPathComponent("cert.pem").path, key = directory.appendingPathComponent("key.pem").path
        let made = try runProcess("/usr/bin/openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                                                       "-keyout", key, "-out", certificate, "-days", "1", "-subj", "/CN=127.0.0.1"], timeout: 30)
        #expect(made.status == 0, "\(made.stderr)")
        let plane = try await Self.plane(directory: directory) { configuration in
            configuration.httpConnections.total = 12
            configuration.httpConnections.perAddress = 6
            configuration.httpConnections.tlsHandshakeTimeout = 2
            // No 503 refusals (as under a low descriptor limit): handshakes are capped at the connections'.
            configuration.httpConnections.refusing = 0
            configuration.httpIdleTimeout = 30
        }
        defer { Self.shutDown(plane) }
        let tls = try HTTPAPI.tlsContext(certificate: certificate, key: key)
        try await withLiveAPI(plane, tls: tls) { client in
            let port = try #require(client.port)
            let limiter = plane.httpConnections
            // Plain HTTP, and bytes that are no TLS at all, to the HTTPS port: refused by the handshake, closed at once.
            for notTLS in [Array("GET /health HTTP/1.1\r\nHost: x\r\n\r\n".utf8), [UInt8](repeating: 0xFF, count: 300)] {
                let stranger = try Connection(port: port)
                stranger.sendBytes(notTLS)
                #expect(stranger.read().closed, "bytes that are not TLS end the connection")
            }
            #expect(waitUntil(timeout: 3) { limiter.tlsHandshakesUnderWay == 0 })
            // A TLS record header and the first bytes of a ClientHello, then one byte at a time.
            let hogs = try (0..<6).map { _ in try Connection(port: port) }
            for hog in hogs { hog.sendBytes([0x16, 0x03, 0x01, 0x02, 0x00, 0x01]) }
            #expect(waitUntil(timeout: 3) { limiter.tlsHandshakesUnderWay == 6 })
            // A seventh handshake from the same address is closed at once.
            let seventh = try Connection(port: port)
            seventh.sendBytes([0x16, 0x03, 0x01])
            #expect(seventh.read().closed, "past the per-address cap a handshake is closed at once")
            // Another address completes its handshake and is served while the hogs trickle.
            let other = try runProcess("/usr/bin/curl", ["-sk", "--interface", "127.0.0.2", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}",
                                                         "https://127.0.0.1:\(port)/health"], timeout: 20)
            #expect(other.stdout == "200", "\(other.stdout) \(other.stderr)")
            // A byte every quarter second for 3 s (the idle timeout would never fire), then each hog is found closed.
            let started = Date()
            while Date().timeIntervalSince(started) < 3 {
                for hog in hogs { hog.sendBytes([0x00]) }
                try await Task.sleep(for: .milliseconds(250))
            }
            for hog in hogs { #expect(hog.read().closed, "a handshake still under way after its 2 s is closed") }
            #expect(waitUntil(timeout: 3) { plane.httpConnections.openConnections == 0 })
        }
    }

    /// `PUT /as/v1/auth/login` had no limit: a password could be guessed at network speed.
    @Test func failedLoginsAreThrottledWith429AndRetryAfter() async throws {
        let plane = try await TestPlane.make()
        defer { plane.close() }
        try await plane.withClient { client in
            let wrong: HTTPFields = [.authorization: "Basic " + Data("admin:guess".utf8).base64EncodedString()]
            // A burst of 10 failures, then one every few seconds: within a few more the guesser waits.
            var attempts = 0
            var throttled: HTTPResponse?
            while throttled == nil, attempts < 20 {
                attempts += 1
                try await client.execute(uri: "/as/v1/auth/login", method: .put, headers: wrong) { response in
                    if response.status == .tooManyRequests { throttled = response.head } else { #expect(response.status == .unauthorized) }
                }
            }
            let refusal = try #require(throttled, "no 429 after \(attempts) wrong passwords")
            #expect(attempts > 10, "the first 10 are answered")
            #expect(Int(refusal.headerFields[.retryAfter] ?? "") ?? 0 >= 1)
            // The right password waits too: the throttle does not tell a guesser when it was right.
            let right: HTTPFields = [.authorization: "Basic " + Data("\(TestPlane.user):\(TestPlane.password)".utf8).base64EncodedString()]
            try await client.execute(uri: "/as/v1/auth/login", method: .put, headers: right) { #expect($0.status == .tooManyRequests) }
        }
    }

    /// A token whose header names HS384 but that is signed HS256 with the node's secret was
    /// accepted: the header's `alg` is now held to the one the node uses.
    @Test func aTokenLabelledWithAnotherAlgorithmIsRefused() async throws {
        let plane = try await TestPlane.make()
        defer { plane.close() }
        let now = Int(Date().timeIntervalSince1970)
        @Sendable func token(alg: String) -> String {
            handSignedToken(header: "{\"alg\":\"\(alg)\",\"typ\":\"JWT\"}", claims: "{\"sub\":\"admin\",\"iat\":\(now),\"exp\":\(now + 600)}")
        }
        try await plane.withClient { client in
            try await client.execute(uri: "/as/v1/streams/provision/default", method: .get, headers: bearer(token(alg: "HS256"))) {
                #expect($0.status == .ok, "the control: a well-formed HS256 token")
            }
            for alg in ["HS384", "HS512", "none", "RS256"] {
                try await client.execute(uri: "/as/v1/streams/provision/default", method: .get, headers: bearer(token(alg: alg))) { response in
                    #expect(response.status == .unauthorized, "\(alg)")
                }
            }
        }
    }
}
