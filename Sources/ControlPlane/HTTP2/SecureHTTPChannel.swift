import HTTPTypes
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP2
import NIOHTTPTypesHTTP2
import NIOTLS
import TLSTransport

/// HTTPS: TLS through OpenSSL (`TLSHandler`), then HTTP/2 or HTTP/1.1 as ALPN chose (HTTP/1.1 when
/// the client named neither). The handshake is bounded first (`TLSHandshakeGuard`, ahead of the
/// TLS handler, and its `HandshakeCompletionWatcher` after it); from then on each HTTP/1.1
/// connection, or each HTTP/2 stream, passes the same `HTTPConnectionGuard` plain HTTP does.
///
/// What HummingbirdHTTP2's `HTTP2UpgradeChannel` does on swift-nio-ssl, on the node's TLS instead.
struct SecureHTTPChannel: HTTPChannelHandler {
    struct Value: ServerChildChannelValue {
        let negotiated: EventLoopFuture<NIONegotiatedHTTPVersion<HTTP1Channel.Value, HTTP2Connection.Value>>
        let channel: any Channel
    }

    let tls: TLSContext
    let limiter: HTTPConnectionLimiter
    let http1: HTTP1Channel
    let http2: HTTP2Connection
    var responder: Responder { http1.responder }

    init(tls: TLSContext, limiter: HTTPConnectionLimiter, idleTimeout: Duration, streamConfiguration: HTTP1Channel.Configuration,
         responder: @escaping Responder) {
        self.tls = tls
        self.limiter = limiter
        http1 = HTTP1Channel(responder: responder, configuration: streamConfiguration)
        http2 = HTTP2Connection(responder: responder, idleTimeout: idleTimeout, streamConfiguration: streamConfiguration)
    }

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        do {
            let handshakeGuard = TLSHandshakeGuard(limiter: limiter)
            try channel.pipeline.syncOperations.addHandler(handshakeGuard)
            try channel.pipeline.syncOperations.addHandler(TLSHandler(context: tls))
            try channel.pipeline.syncOperations.addHandler(HandshakeCompletionWatcher(handshakeGuard))
            let http1 = self.http1, http2 = self.http2
            let negotiation = NIOTypedApplicationProtocolNegotiationHandler<NIONegotiatedHTTPVersion<HTTP1Channel.Value, HTTP2Connection.Value>> { result in
                switch result {
                case .negotiated("h2"):
                    return http2.setup(channel: channel, logger: logger).map { .http2($0) }
                case .negotiated("http/1.1"), .fallback:
                    return http1.setup(channel: channel, logger: logger).map { .http1_1($0) }
                case .negotiated:
                    // The server offers only these two, so anything else is a broken client.
                    return channel.close().flatMap { channel.eventLoop.makeFailedFuture(NIOHTTP2Errors.invalidALPNToken()) }
                }
            }
            try channel.pipeline.syncOperations.addHandler(negotiation)
            return channel.eventLoop.makeSucceededFuture(Value(negotiated: negotiation.protocolNegotiationResult, channel: channel))
        } catch {
            channel.close(promise: nil)
            return channel.eventLoop.makeFailedFuture(error)
        }
    }

    func handle(value: Value, logger: Logger) async {
        do {
            switch try await value.negotiated.get() {
            case let .http1_1(connection): await http1.handle(value: connection, logger: logger)
            case let .http2(connection): await http2.handle(value: connection, logger: logger)
            }
        } catch {
            logger.debug("HTTPS connection ended before HTTP began: \(error)")
        }
    }
}

/// One HTTP/2 connection: NIO's multiplexer with Hummingbird's connection manager (idle timeout,
/// graceful close on shutdown, vendored), each stream served as an HTTP/1.1 exchange of its own.
struct HTTP2Connection: Sendable {
    typealias Multiplexer = NIOHTTP2Handler.AsyncStreamMultiplexer<HTTP1Channel.Value>
    struct Value: Sendable {
        let multiplexer: Multiplexer
    }

    let streams: HTTP2Stream
    let idleTimeout: Duration

    init(responder: @escaping HTTPChannelHandler.Responder, idleTimeout: Duration, streamConfiguration: HTTP1Channel.Configuration) {
        streams = HTTP2Stream(responder: responder, configuration: streamConfiguration)
        self.idleTimeout = idleTimeout
    }

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            let manager = HTTP2ServerConnectionManager(eventLoop: channel.eventLoop, idleTimeout: idleTimeout, maxAgeTimeout: nil, gracefulCloseTimeout: nil)
            let streams = self.streams
            let multiplexer: Multiplexer = try channel.pipeline.syncOperations.configureAsyncHTTP2Pipeline(
                mode: .server, streamDelegate: manager.streamDelegate, configuration: .init()
            ) { stream in
                streams.setup(channel: stream, logger: logger)
            }
            try channel.pipeline.syncOperations.addHandler(manager)
            return Value(multiplexer: multiplexer)
        }
    }

    func handle(value: Value, logger: Logger) async {
        do {
            try await withThrowingDiscardingTaskGroup { group in
                for try await stream in value.multiplexer.inbound {
                    group.addTask { await streams.handle(value: stream, logger: logger) }
                }
            }
        } catch {
            logger.debug("HTTP/2 connection ended: \(error)")
        }
    }
}

/// An HTTP/2 stream as HTTP/1.1-shaped request parts, with the stream configuration's handlers
/// (the node's `HTTPConnectionGuard`), answered by the router through Hummingbird's `handleHTTP`.
struct HTTP2Stream: HTTPChannelHandler {
    typealias Value = HTTP1Channel.Value
    let responder: Responder
    let configuration: HTTP1Channel.Configuration

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandler(HTTP2FramePayloadToHTTPServerCodec())
            try channel.pipeline.syncOperations.addHandlers(configuration.additionalChannelHandlers())
            try channel.pipeline.syncOperations.addHandler(HTTPConnectionStateHandler(idleTimeout: configuration.idleTimeout.map { .init($0) }, logger: logger))
            return try HTTP1Channel.Value(wrappingChannelSynchronously: channel)
        }
    }

    func handle(value: Value, logger: Logger) async {
        await handleHTTP(asyncChannel: value, logger: logger)
    }
}
