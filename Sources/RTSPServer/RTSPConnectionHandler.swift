#if canImport(Glibc)
import Glibc
#endif
import DequeModule
import Logging
import NIOCore
import RTSP

/// One RTSP connection's socket: admits it, hands each framed request and interleaved frame to
/// its `RTSPServerConnection`, writes the answers, stops reading while the client does not read
/// them, and ends the connection's sessions when it closes. A malformed request gets an error
/// reply; the connection closes only when the byte stream cannot be resynchronised.
final class RTSPConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = RTSPInbound
    typealias OutboundOut = ByteBuffer

    private let server: RTSPService
    /// The requests' side of the connection, once admitted.
    private var connection: RTSPServerConnection?
    private var logger: Logger
    /// The address this connection was counted under, once admitted.
    private var admittedAddress: String?
    /// Reading stops while the client does not read our answers (the socket is not writable),
    /// so a client that only sends cannot make the node queue replies without bound. What was
    /// already framed from the last read waits here, in order (at most one read's worth).
    private var pausedForWritability = false
    private var waiting = Deque<RTSPInbound>()

    /// The connection's written bytes, which a TCP player's outbox lines up with its acknowledgements.
    private let counter: WrittenBytesCounter?

    init(server: RTSPService, counter: WrittenBytesCounter? = nil) {
        self.server = server
        self.counter = counter
        self.logger = server.logger
    }

    /// The handlers that serve one RTSP connection, in pipeline order: framing, then this.
    static func pipeline(server: RTSPService) -> [any ChannelHandler] {
        let counter = WrittenBytesCounter()
        return [counter, ByteToMessageHandler(RTSPFrameDecoder(limits: server.configuration.limits)), RTSPConnectionHandler(server: server, counter: counter)]
    }

    func channelActive(context: ChannelHandlerContext) {
        logger[metadataKey: "rtsp.peer"] = "\(context.remoteAddress?.description ?? "?")"
        let address = context.remoteAddress?.ipAddress ?? "?"
        guard server.admitConnection(from: address) else {
            server.refusals.log(logger, "connection refused: too many connections", kind: "connections", metadata: ["rtsp.address": "\(address)"])
            reply(context: context, RTSPResponse(status: 503, headers: ["Connection": "close"], body: Array("too many connections\n".utf8)), cseq: nil)
            context.close(promise: nil)
            return
        }
        admittedAddress = address
        connection = RTSPServerConnection(server: server, channel: context.channel, counter: counter, logger: logger)
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard admittedAddress != nil else { return }
        let item = unwrapInboundIn(data)
        guard !pausedForWritability else {
            waiting.append(item)
            return
        }
        process(item, context: context)
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if pausedForWritability, context.channel.isWritable {
            pausedForWritability = false
            while !pausedForWritability, let item = waiting.popFirst() { process(item, context: context) }
            if !pausedForWritability { context.channel.setOption(ChannelOptions.autoRead, value: true).whenFailure { _ in } }
        }
        context.fireChannelWritabilityChanged()
    }

    private func process(_ item: RTSPInbound, context: ChannelHandlerContext) {
        guard let connection else { return }
        switch item {
        case let .request(request):
            let response = connection.answer(request)
            reply(context: context, response.response, cseq: request.cseq.flatMap { RTSPServerConnection.isSequenceNumber($0) ? $0 : nil })
            response.after?()
            if !context.channel.isWritable {
                pausedForWritability = true
                context.channel.setOption(ChannelOptions.autoRead, value: false).whenFailure { _ in }
            }
        case let .interleaved(channel, payload):
            if connection.receiveInterleaved(channel: channel, payload: payload) != nil { context.close(promise: nil) }
        case .response:
            break  // answers to our own requests (none on the server side) are ignored
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        if let admittedAddress {
            server.releaseConnection(from: admittedAddress)
            self.admittedAddress = nil
        }
        connection?.endSessions()
        context.fireChannelInactive()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is IdleStateHandler.IdleStateEvent, connection?.hasLiveSessions != true {
            context.close(promise: nil)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        if let error = error as? RTSPParseError {
            // The framing gave up on the byte stream: say why, then close (it cannot be resynchronised).
            logger.info("closing connection after a malformed request: \(error)")
            if admittedAddress != nil {
                reply(context: context, RTSPResponse(status: error.status, headers: ["Connection": "close"], body: Array("\(error)\n".utf8)), cseq: nil)
            }
        } else if let error = error as? IOError, [ECONNRESET, EPIPE].contains(error.errnoCode) {
            // A peer that resets its connection is routine; anything else closing a session must be seen.
            logger.info("connection closed: \(error)")
        } else {
            logger.warning("connection closed after an error: \(error)")
        }
        context.close(promise: nil)
    }

    private func reply(context: ChannelHandlerContext, _ response: RTSPResponse, cseq: String?) {
        var response = response
        if let cseq { response.headers.set("CSeq", cseq) }
        response.headers.add("Server", "abr-worker")
        var out = context.channel.allocator.buffer(capacity: 256 + response.body.count)
        response.write(to: &out)
        context.writeAndFlush(wrapOutboundOut(out), promise: nil)
    }
}
