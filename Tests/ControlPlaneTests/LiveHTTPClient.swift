import ControlPlane
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import TLSTransport
import ServiceLifecycle
import Synchronization

/// An answer as the tests read it.
struct TestResponse: Sendable {
    var head: HTTPResponse
    var body: ByteBuffer
    var status: HTTPResponse.Status { head.status }
    var headers: HTTPFields { head.headerFields }
}

/// A client of a node's HTTP API running for real on a loopback port: every request is a new
/// HTTP/1.1 connection (SwiftNIO's client codec), as curl or a stream manager would make.
protocol TestClientProtocol: Sendable {
    var port: Int? { get }
    func execute<Value: Sendable>(uri: String, method: HTTPRequest.Method, headers: HTTPFields, body: ByteBuffer?,
                                  _ check: (TestResponse) async throws -> Value) async throws -> Value
}

extension TestClientProtocol {
    @discardableResult
    func execute<Value: Sendable>(uri: String, method: HTTPRequest.Method, headers: HTTPFields = [:], body: ByteBuffer? = nil,
                                  _ check: (TestResponse) async throws -> Value) async throws -> Value {
        try await execute(uri: uri, method: method, headers: headers, body: body, check)
    }
}

struct LiveHTTPClient: TestClientProtocol {
    let port: Int?
    /// The server's connection limiter, when the test holds it: a failed request then says what
    /// the server's guard had seen (a connection closed at once may have been refused).
    var limiter: HTTPConnectionLimiter? = nil

    func execute<Value: Sendable>(uri: String, method: HTTPRequest.Method, headers: HTTPFields, body: ByteBuffer?,
                                  _ check: (TestResponse) async throws -> Value) async throws -> Value {
        let response: TestResponse
        do {
            response = try await send(uri: uri, method: method, headers: headers, body: body)
        } catch {
            let server = limiter.map { " (server's guard: \($0.openConnections) open, \($0.refusedConnections) refused)" } ?? ""
            throw HTTPTestError.failed("\(method) \(uri)\(server)", error)
        }
        return try await check(response)
    }

    private func send(uri: String, method: HTTPRequest.Method, headers: HTTPFields, body: ByteBuffer?) async throws -> TestResponse {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: "127.0.0.1", port: port ?? 0) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    return try NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>(wrappingChannelSynchronously: channel)
                }
            }
        var fields = HTTPHeaders()
        for field in headers { fields.add(name: field.name.rawName, value: field.value) }
        fields.replaceOrAdd(name: "Host", value: "127.0.0.1")
        fields.replaceOrAdd(name: "Connection", value: "close")
        fields.replaceOrAdd(name: "Content-Length", value: String(body?.readableBytes ?? 0))
        return try await channel.executeThenClose { inbound, outbound in
            // One write of the whole request: a server that answers on the head and closes (as it
            // may with `Connection: close`) would otherwise fail a later `.end` write with "I/O on
            // closed channel" although its answer arrived.
            var request: [HTTPClientRequestPart] = [.head(HTTPRequestHead(version: .http1_1, method: HTTPMethod(rawValue: method.rawValue), uri: uri, headers: fields))]
            if let body { request.append(.body(.byteBuffer(body))) }
            request.append(.end(nil))
            try await outbound.write(contentsOf: request)
            var head: HTTPResponse?
            var received = ByteBuffer()
            for try await part in inbound {
                switch part {
                case let .head(response):
                    var answer = HTTPResponse(status: .init(code: Int(response.status.code), reasonPhrase: response.status.reasonPhrase))
                    for (name, value) in response.headers { if let field = HTTPField.Name(name) { answer.headerFields.append(HTTPField(name: field, value: value)) } }
                    head = answer
                case var .body(chunk):
                    received.writeBuffer(&chunk)
                case .end:
                    guard let head else { throw HTTPTestError.noResponse(uri) }
                    return TestResponse(head: head, body: received)
                }
            }
            throw HTTPTestError.noResponse(uri)
        }
    }
}

enum HTTPTestError: Error {
    case noResponse(String)
    case failed(String, any Error)
}

/// Runs the node's HTTP API on a free loopback port for the length of `body`, then shuts it down gracefully.
/// With `tls`, the port is HTTPS (HTTP/2 and HTTP/1.1), as `--tls-cert` makes it.
func withLiveAPI<Value: Sendable>(_ plane: ControlPlane, tls: TLSContext? = nil,
                                  _ body: @Sendable (LiveHTTPClient) async throws -> Value) async throws -> Value {
    let (ports, portSink) = AsyncStream.makeStream(of: Int.self)
    let app = try HTTPAPI.makeApplication(plane, host: "127.0.0.1", port: 0, tls: tls) { port in portSink.yield(port) }
    var logger = Logger(label: "test.http")
    logger.logLevel = .warning
    let group = ServiceGroup(configuration: .init(services: [app], gracefulShutdownSignals: [], logger: logger))
    return try await withThrowingTaskGroup(of: Void.self) { tasks in
        tasks.addTask { try await group.run() }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next() else { throw HTTPTestError.noResponse("the server never listened") }
        do {
            let value = try await body(LiveHTTPClient(port: port, limiter: plane.httpConnections))
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
            return value
        } catch {
            await group.triggerGracefulShutdown()
            try? await tasks.waitForAll()
            throw error
        }
    }
}
