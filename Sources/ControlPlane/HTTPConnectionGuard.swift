import Dispatch
import Foundation
import Hummingbird
import HummingbirdAuth
import HummingbirdCore
import Ingest
import Logging
import NIOCore
import NIOHTTPTypes
import RTSPServer
import Synchronization

/// How many HTTP connections the node holds, in all and per IP address. Every connection is a
/// file descriptor, and RTSP, HLS files and the store need theirs: past either limit a new
/// connection is not served. Its request gets `503` with `Retry-After` and the connection is
/// closed, so a player knows why and when to come back; one that sends no request within 5 s
/// is closed unanswered, and past `Limits.refusing` such connections at once (two per
/// connection slot where descriptors allow) a new one is closed at once.
public final class HTTPConnectionLimiter: Sendable {
    public struct Limits: Sendable {
        public var total = 512
        public var perAddress = 64
        /// Seconds a request may take from its head to its last body byte.
        public var requestTimeout: Int64 = 30
        /// Connections over the limits held at once until their request is answered `503`; past
        /// it they are closed at once. Each holds a descriptor for up to a second, so the node
        /// sets it from what its descriptor budget has to spare (two per slot when it can).
        public var refusing = 1024
        /// Seconds a TLS handshake may take (`TLSHandshakeGuard`).
        public var tlsHandshakeTimeout: Int64 = 10
        /// Seconds an answer may wait for a client that reads none of it. Hummingbird's idle
        /// timeout spares a connection while a response is being written (a streamed body, an
        /// HTTP/2 stream out of window), so it alone does not free such a slot.
        public var writeStallTimeout: Int64 = 30
        public init() {}
    }

    public let limits: Limits
    let quota: ConnectionQuota
    /// TLS handshakes under way (`TLSHandshakeGuard`): as many as connections and refusals.
    let handshakes: ConnectionQuota
    /// Connections over the limits waiting for their request, to be answered `503`.
    let refusing = Atomic<Int>(0)
    /// Such connections at once, per connection slot, where descriptors allow (`Limits.refusing`).
    public static let refusalsPerSlot = 2
    /// Seconds a connection over the limits has to send its request before it is closed
    /// unanswered. Not less: a burst of a thousand connections can keep the event loop from
    /// reading their requests for a second or more on a busy machine (seen in CI), and those
    /// are to be answered. Their number is capped (`Limits.refusing`), not their wait.
    static let refusalWait: Int64 = 5
    let logger = Logger(label: "abr.http")
    /// At most one line a second, so a flood of connections cannot become a flood of log lines.
    private let refusals = RefusalLog()

    func logRefusal(from address: String, reason: String = "too many connections") {
        refusals.log(logger, "connection refused: \(reason)", metadata: [
            "http.address": "\(address)", "http.connections": "\(quota.open)", "http.refused": "\(quota.refused)"])
    }

    public init(limits: Limits) {
        self.limits = limits
        quota = ConnectionQuota(total: limits.total, perAddress: limits.perAddress)
        // A connection over the limits is answered 503 once its handshake is done, so the
        // handshakes it may hold are those of its refusals too.
        let handshakeSlots = limits.refusing > 0 ? 1 + Self.refusalsPerSlot : 1
        handshakes = ConnectionQuota(total: limits.total + limits.refusing, perAddress: limits.perAddress * handshakeSlots)
    }

    public var openConnections: Int { quota.open }
    public var tlsHandshakesUnderWay: Int { handshakes.open }
    public var refusedConnections: Int { quota.refused }
}

/// One HTTP connection's guard, after the HTTP decoder: counts the connection in (or answers its
/// request `503`, then closes it), closes one whose client stops reading an answer for
/// `writeStallTimeout`,
/// and closes a connection whose request does not arrive whole within the request timeout (a
/// body trickled a byte at a time). A connection with no request under way, or one whose head is
/// still arriving, is closed by Hummingbird's idle timeout.
final class HTTPConnectionGuard: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundOut = HTTPResponsePart

    private let limiter: HTTPConnectionLimiter
    private var admittedAddress: String?
    private var deadline: Scheduled<Void>?
    /// Set while the socket's buffer is full: the client is not reading what it asked for.
    private var writeStall: Scheduled<Void>?
    /// Over the limits: its request is answered `503` and the connection closed.
    private var refused = false

    init(limiter: HTTPConnectionLimiter) {
        self.limiter = limiter
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { admit(context: context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        admit(context: context)
        context.fireChannelActive()
    }

    private func admit(context: ChannelHandlerContext) {
        guard admittedAddress == nil else { return }
        let address = context.channel.remoteAddress?.ipAddress ?? "?"
        guard !refused else { return }
        guard limiter.quota.admit(address) else {
            limiter.logRefusal(from: address)
            let waiting = limiter.refusing.wrappingAdd(1, ordering: .relaxed).newValue
            refused = true
            guard waiting <= limiter.limits.refusing else {
                context.close(promise: nil)
                return
            }
            let channel = context.channel
            deadline = context.eventLoop.scheduleTask(in: .seconds(HTTPConnectionLimiter.refusalWait)) { channel.close(promise: nil) }
            return
        }
        admittedAddress = address
    }

    /// The request of a connection over the limits: `503`, then the connection closes.
    private func answerRefused(context: ChannelHandlerContext, request: HTTPRequestPart) {
        guard case .head = request else { return }
        deadline?.cancel()
        let body = ByteBuffer(string: "{\"error\":\"too many connections from this address or to this node; retry in a second\"}")
        var fields = HTTPFields()
        // No `Connection: close`: over HTTP/2 (where this is one stream) that field is malformed;
        // the close after the answer says it over HTTP/1.1.
        fields[.retryAfter] = "1"
        fields[.contentType] = "application/json"
        fields[.contentLength] = "\(body.readableBytes)"
        context.write(wrapOutboundOut(.head(HTTPResponse(status: .serviceUnavailable, headerFields: fields))), promise: nil)
        context.write(wrapOutboundOut(.body(body)), promise: nil)
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
    }

    func channelInactive(context: ChannelHandlerContext) {
        releaseSlot()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        releaseSlot()
    }

    private func releaseSlot() {
        deadline?.cancel()
        deadline = nil
        writeStall?.cancel()
        writeStall = nil
        if refused {
            refused = false
            limiter.refusing.wrappingSubtract(1, ordering: .relaxed)
        }
        if let address = admittedAddress {
            limiter.quota.release(address)
            admittedAddress = nil
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable {
            writeStall?.cancel()
            writeStall = nil
        } else if writeStall == nil {
            let channel = context.channel
            writeStall = context.eventLoop.scheduleTask(in: .seconds(limiter.limits.writeStallTimeout)) { channel.close(promise: nil) }
        }
        context.fireChannelWritabilityChanged()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if refused {
            answerRefused(context: context, request: unwrapInboundIn(data))
            return
        }
        switch unwrapInboundIn(data) {
        case .head:
            deadline?.cancel()
            let channel = context.channel
            deadline = context.eventLoop.scheduleTask(in: .seconds(limiter.limits.requestTimeout)) { channel.close(promise: nil) }
        case .end:
            deadline?.cancel()
            deadline = nil
        case .body:
            break
        }
        context.fireChannelRead(data)
    }
}

/// A request context that knows the client's address (for per-address limits).
public struct NodeRequestContext: AuthRequestContext, RemoteAddressRequestContext {
    public var coreContext: CoreRequestContextStorage
    public let remoteAddress: SocketAddress?
    /// Set by a route group's authenticator (`BearerTokenAuthenticator`, `StreamManager1AccessTokenAuthenticator`).
    public var identity: APIIdentity?

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
    }

    /// Errors thrown as `HTTPError` read like the API's own (`HTTPAPI.error`): paths in messages unescaped.
    public var responseEncoder: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }

    var clientAddress: String { remoteAddress?.ipAddress ?? "?" }
}

/// Things a client address may do only so often: a burst, then one more every `interval` seconds
/// (a leaky bucket per address). Failed logins, so a password cannot be guessed at the speed of
/// the network (a successful login costs nothing); new placements by open node requests, so one
/// address cannot reserve the fleet's room for streams nobody publishes.
final class AddressThrottle: Sendable {
    let burst: Double
    let interval: Double
    /// Addresses remembered at most; past it those that are back to a full burst are forgotten.
    static let maximumAddresses = 10_000

    private let state = Mutex<[String: (count: Double, at: Double)]>([:])

    init(burst: Double, interval: Double) {
        self.burst = burst
        self.interval = interval
    }

    /// Seconds to wait before the next one from `address`, or nil when it may go ahead now.
    func retryAfter(_ address: String, now: Double) -> Int? {
        state.withLock { state in
            guard let entry = state[address] else { return nil }
            let count = max(0, entry.count - (now - entry.at) / interval)
            guard count + 1 > burst else { return nil }
            return max(1, Int(((count + 1 - burst) * interval).rounded(.up)))
        }
    }

    func record(_ address: String, now: Double) {
        state.withLock { state in
            let previous = state[address].map { max(0, $0.count - (now - $0.at) / interval) } ?? 0
            state[address] = (min(previous + 1, burst * 2), now)
            if state.count > Self.maximumAddresses {
                state = state.filter { $0.value.count - (now - $0.value.at) / interval > 0 }
            }
            if state.count > Self.maximumAddresses {
                // Still full (that many addresses at once): keep half, arbitrarily.
                state = Dictionary(uniqueKeysWithValues: state.prefix(Self.maximumAddresses / 2).map { ($0.key, $0.value) })
            }
        }
    }
}
