import DequeModule
import Digests
import Foundation
import MediaCore
import NIOCore
import NIOPosix
import TLSTransport

/// Hands the server's messages to the requests waiting on the connection, in the order they were sent.
final class PostgresResponseHandler: ChannelInboundHandler {
    typealias InboundIn = PostgresBackendMessage

    struct Waiter {
        let promise: EventLoopPromise<[PostgresBackendMessage]>
        /// The message that completes the request (ReadyForQuery for a query).
        let isLast: @Sendable (PostgresBackendMessage) -> Bool
        var messages: [PostgresBackendMessage] = []
    }

    private var waiters = Deque<Waiter>()
    private var failure: PostgresFailure?
    let maximumMessagesPerRequest: Int
    private let onNotification: @Sendable (_ channel: String, _ payload: String) -> Void

    init(maximumMessagesPerRequest: Int = 200_000, onNotification: @escaping @Sendable (_ channel: String, _ payload: String) -> Void) {
        self.maximumMessagesPerRequest = maximumMessagesPerRequest
        self.onNotification = onNotification
    }

    func enqueue(_ promise: EventLoopPromise<[PostgresBackendMessage]>, isLast: @escaping @Sendable (PostgresBackendMessage) -> Bool) {
        if let failure { return promise.fail(failure) }
        waiters.append(Waiter(promise: promise, isLast: isLast))
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let message = unwrapInboundIn(data)
        if case let .notification(channel, payload) = message { return onNotification(channel, payload) }
        // ParameterStatus and NoticeResponse come between requests too; nobody waits for them.
        guard !waiters.isEmpty else { return }
        // The store's queries are bounded (LIMIT, or tables the node keeps small): a server that
        // answers one with more is refused rather than held in memory.
        guard waiters[0].messages.count < maximumMessagesPerRequest else {
            return errorCaught(context: context, error: PostgresFailure.protocolViolation("more than \(maximumMessagesPerRequest) messages in answer to one request"))
        }
        waiters[0].messages.append(message)
        if waiters[0].isLast(message) {
            let waiter = waiters.removeFirst()
            waiter.promise.succeed(waiter.messages)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        failAll(error as? PostgresFailure ?? .connection(String(describing: error)))
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        failAll(.connection("the server closed the connection"))
        context.fireChannelInactive()
    }

    private func failAll(_ error: PostgresFailure) {
        if failure == nil { failure = error }
        while let waiter = waiters.popFirst() { waiter.promise.fail(failure ?? error) }
    }
}

/// One connection to the server, started and authenticated (trust, cleartext, MD5 or
/// SCRAM-SHA-256), in TLS when the location asks for it. Requests on it are answered in order;
/// the pool gives a connection to one user at a time.
final class PostgresConnection: Sendable {
    let channel: Channel
    /// A request the server has not answered in this long fails, and the connection is closed.
    static let requestTimeout = TimeAmount.seconds(60)

    private init(channel: Channel) { self.channel = channel }

    var isActive: Bool { channel.isActive }

    static func connect(to location: StoreLocation.PostgresLocation, tls: TLSContext?,
                        onNotification: @escaping @Sendable (String, String) -> Void = { _, _ in }) async throws -> PostgresConnection {
        let asksForTLS = location.tls != .disable
        let channel: Channel
        do {
            channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connectTimeout(.seconds(5))
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(PostgresBackendDecoder(expectsSSLResponse: asksForTLS)))
                        try channel.pipeline.syncOperations.addHandler(PostgresResponseHandler(onNotification: onNotification))
                    }
                }
                .connect(host: location.host, port: location.port).get()
        } catch {
            throw PostgresFailure.connection("cannot reach \(location.host):\(location.port): \(error)")
        }
        let connection = PostgresConnection(channel: channel)
        do {
            try await connection.start(location, tls: tls)
        } catch {
            channel.close(promise: nil)
            throw error
        }
        return connection
    }

    /// TLS when asked for, the startup message, then each authentication step the server asks for, until it is ready.
    private func start(_ location: StoreLocation.PostgresLocation, tls: TLSContext?) async throws {
        if location.tls != .disable {
            let answer = try await exchange(PostgresFrontend.sslRequest(), timeout: .seconds(10)) {
                if case .sslResponse = $0 { true } else { false }
            }
            if answer.last == .sslResponse(accepted: true), let tls {
                let channel = self.channel
                // The certificate must name the host (or address) the URL names.
                try await channel.eventLoop.submit {
                    try channel.pipeline.syncOperations.addHandler(TLSHandler(context: tls, peerName: location.host), position: .first)
                }.get()
            } else if location.tls == .require {
                throw PostgresFailure.connection("\(location.host):\(location.port) does not offer TLS, and the URL says sslmode=require")
            }
        }
        var messages = try await exchange(PostgresFrontend.startup(user: location.user, database: location.database),
                                          timeout: .seconds(10), until: Self.endsAuthenticationStep)
        var scram: PostgresSCRAM?
        func password() throws -> String {
            guard let password = location.password else {
                throw PostgresFailure.authentication("the server asks user \(location.user) for a password, and the URL has none")
            }
            return password
        }
        while true {
            var reply: ByteBuffer?
            for message in messages {
                switch message {
                case let .error(error): throw PostgresFailure.server(error)
                case .readyForQuery: return
                case .authentication(.ok): break
                case .authentication(.cleartextPassword):
                    reply = PostgresFrontend.password(try password())
                case let .authentication(.md5Password(salt)):
                    // md5(md5(password + user) + salt), in lowercase hex, as PostgreSQL's md5 method has it.
                    let inner = lowercaseHex(Digest.hash(.md5, Array((try password() + location.user).utf8)))
                    reply = PostgresFrontend.password("md5" + lowercaseHex(Digest.hash(.md5, Array(inner.utf8) + salt)))
                case let .authentication(.sasl(mechanisms)):
                    guard mechanisms.contains(PostgresSCRAM.mechanism) else {
                        throw PostgresFailure.authentication("the server offers \(mechanisms.joined(separator: ", ")), not \(PostgresSCRAM.mechanism)")
                    }
                    let exchange = PostgresSCRAM(password: try password())
                    scram = exchange
                    reply = PostgresFrontend.saslInitialResponse(mechanism: PostgresSCRAM.mechanism, data: exchange.clientFirst)
                case let .authentication(.saslContinue(data)):
                    guard var exchange = scram else { throw PostgresFailure.protocolViolation("a SCRAM challenge before SCRAM began") }
                    reply = PostgresFrontend.saslResponse(try exchange.clientFinal(serverFirst: data))
                    scram = exchange
                case let .authentication(.saslFinal(data)):
                    guard let exchange = scram else { throw PostgresFailure.protocolViolation("a SCRAM outcome before SCRAM began") }
                    try exchange.verify(serverFinal: data)
                case let .authentication(.unsupported(code)):
                    throw PostgresFailure.authentication("the server asks for authentication method \(code) (the node speaks trust, password, md5 and \(PostgresSCRAM.mechanism))")
                default: break
                }
            }
            guard let reply else { throw PostgresFailure.protocolViolation("the server stopped answering the startup") }
            messages = try await exchange(reply, timeout: .seconds(10), until: Self.endsAuthenticationStep)
        }
    }

    /// A startup step ends at a request the client must answer, an error, or ReadyForQuery. An OK
    /// or SCRAM's outcome does not: the server goes on in the same breath.
    @Sendable static func endsAuthenticationStep(_ message: PostgresBackendMessage) -> Bool {
        switch message {
        case .error, .readyForQuery: true
        case .authentication(.ok), .authentication(.saslFinal): false
        case .authentication: true
        default: false
        }
    }

    /// Runs `query`, its rows in text. A statement without parameters goes as a simple query.
    @discardableResult
    func query(_ query: PostgresQuery) async throws -> [PostgresRow] {
        let bytes = query.binds.isEmpty ? PostgresFrontend.query(query.sql) : PostgresFrontend.extendedQuery(query.sql, binds: query.binds)
        let messages = try await exchange(bytes, timeout: Self.requestTimeout) { if case .readyForQuery = $0 { true } else { false } }
        var rows: [PostgresRow] = []
        for message in messages {
            switch message {
            case let .dataRow(columns): rows.append(PostgresRow(columns: columns))
            case let .error(error): throw PostgresFailure.server(error)
            default: break
            }
        }
        return rows
    }

    /// Sends `bytes` and collects the server's messages up to the one `isLast` picks.
    func exchange(_ bytes: ByteBuffer, timeout: TimeAmount,
                  until isLast: @escaping @Sendable (PostgresBackendMessage) -> Bool) async throws -> [PostgresBackendMessage] {
        let channel = self.channel
        let promise = channel.eventLoop.makePromise(of: [PostgresBackendMessage].self)
        channel.eventLoop.execute {
            guard let handler = try? channel.pipeline.syncOperations.handler(type: PostgresResponseHandler.self) else {
                return promise.fail(PostgresFailure.connection("the connection is closed"))
            }
            handler.enqueue(promise, isLast: isLast)
            channel.writeAndFlush(bytes, promise: nil)
            let deadline = channel.eventLoop.scheduleTask(in: timeout) {
                promise.fail(PostgresFailure.connection("no answer from the server in \(timeout.nanoseconds / 1_000_000_000) s"))
                channel.close(promise: nil)
            }
            promise.futureResult.whenComplete { _ in deadline.cancel() }
        }
        return try await promise.futureResult.get()
    }

    /// Terminate, then close.
    func close() {
        let channel = self.channel
        channel.eventLoop.execute {
            guard channel.isActive else { return }
            channel.writeAndFlush(PostgresFrontend.terminate()).whenComplete { _ in channel.close(promise: nil) }
        }
    }
}

/// Up to `maximumConnections` connections, opened as they are needed and kept while they live.
/// A user waits for one when all are busy; a broken one is dropped when it comes back.
actor PostgresConnectionPool {
    let location: StoreLocation.PostgresLocation
    let maximumConnections: Int
    let tls: TLSContext?
    private var idle: [PostgresConnection] = []
    private var open = 0
    /// Woken with a connection, or with nil to try again (one closed, or opening one failed).
    private var waiters = Deque<CheckedContinuation<PostgresConnection?, Never>>()
    private var closed = false

    init(location: StoreLocation.PostgresLocation, maximumConnections: Int) throws {
        self.location = location
        self.maximumConnections = maximumConnections
        do {
            tls = location.tls == .disable ? nil : try TLSContext.client(verifyingPeers: true, rootsPath: location.rootCertificates)
        } catch {
            throw PostgresFailure.connection("sslrootcert=\(location.rootCertificates ?? "(the system's)"): \(error.reason)")
        }
    }

    nonisolated func withConnection<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        let connection = try await lease()
        do {
            let result = try await body(connection)
            await release(connection)
            return result
        } catch {
            await release(connection)
            throw error
        }
    }

    @discardableResult
    nonisolated func query(_ query: PostgresQuery) async throws -> [PostgresRow] {
        try await withConnection { try await $0.query(query) }
    }

    /// `body` in one transaction: committed when it returns, rolled back when it throws (its error comes out as itself).
    nonisolated func withTransaction<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        try await withConnection { connection in
            try await connection.query("BEGIN")
            do {
                let result = try await body(connection)
                try await connection.query("COMMIT")
                return result
            } catch {
                _ = try? await connection.query("ROLLBACK")
                throw error
            }
        }
    }

    private func lease() async throws -> PostgresConnection {
        while true {
            guard !closed else { throw PostgresFailure.connection("the store is closed") }
            while let connection = idle.popLast() {
                if connection.isActive { return connection }
                open -= 1
            }
            if open < maximumConnections {
                open += 1
                do {
                    return try await PostgresConnection.connect(to: location, tls: tls)
                } catch {
                    open -= 1
                    waiters.popFirst()?.resume(returning: nil)
                    throw error
                }
            }
            if let connection = await withCheckedContinuation({ waiters.append($0) }) { return connection }
        }
    }

    private func release(_ connection: PostgresConnection) {
        guard connection.isActive, !closed else {
            if connection.isActive { connection.close() }
            open -= 1
            waiters.popFirst()?.resume(returning: nil)
            return
        }
        if let waiter = waiters.popFirst() {
            waiter.resume(returning: connection)
        } else {
            idle.append(connection)
        }
    }

    func close() {
        closed = true
        idle.forEach { $0.close() }
        open -= idle.count
        idle.removeAll()
        while let waiter = waiters.popFirst() { waiter.resume(returning: nil) }
    }
}
