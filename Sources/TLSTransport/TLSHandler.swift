import CTLS
import NIOCore
import NIOTLS

/// TLS on a SwiftNIO channel, through OpenSSL (`CTLS`): ciphertext from the socket goes into the
/// session and plaintext comes out to the next handler; plaintext written goes out encrypted.
/// When the handshake is done it announces `TLSUserEvent.handshakeCompleted` with the protocol
/// ALPN chose, as swift-nio-ssl's handlers do, so NIO's ALPN-based pipeline setup (HTTP/2 or
/// HTTP/1.1) works on it unchanged. Writes made before then wait for it.
///
/// The node's own because swift-nio-ssl builds BoringSSL from source on every fresh clone, while
/// Debian's OpenSSL is already linked for WebRTC's DTLS.
public final class TLSHandler: ChannelDuplexHandler, RemovableChannelHandler {
    public typealias InboundIn = ByteBuffer
    public typealias InboundOut = ByteBuffer
    public typealias OutboundIn = ByteBuffer
    public typealias OutboundOut = ByteBuffer

    private final class Session {
        let pointer: OpaquePointer
        init(_ pointer: OpaquePointer) { self.pointer = pointer }
        deinit { abr_tls_session_free(pointer) }
    }

    private enum State { case handshaking, open, closed }

    private let session: Session
    private let isServer: Bool
    private var state = State.handshaking
    private var started = false
    /// Plaintext written before the handshake finished, sent once it has.
    private var waitingWrites: [(ByteBuffer, EventLoopPromise<Void>?)] = []
    /// Decrypted bytes are taken in pieces of this size (a TLS record's largest plaintext).
    private static let readChunk = 16_384

    /// A session of `context`'s role. A client's `peerName` is the host name (sent as SNI, and
    /// the certificate must name it) or address it connects to.
    public init(context: TLSContext, peerName: String? = nil) throws(TLSFailure) {
        guard let made = abr_tls_session_create(context.pointer, peerName) else { throw TLSFailure(reason: "no memory for a TLS session") }
        session = Session(made)
        isServer = context.isServer
    }

    public func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { startAsClient(context: context) }
    }

    public func channelActive(context: ChannelHandlerContext) {
        startAsClient(context: context)
        context.fireChannelActive()
    }

    /// A client speaks first (its ClientHello); a server waits for it.
    private func startAsClient(context: ChannelHandlerContext) {
        guard !isServer, !started else { return }
        started = true
        advanceHandshake(context: context)
    }

    public func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard state != .closed else { return }
        let ciphertext = unwrapInboundIn(data)
        let fed = ciphertext.withUnsafeReadableBytes { bytes in
            abr_tls_session_feed(session.pointer, bytes.bindMemory(to: UInt8.self).baseAddress, bytes.count)
        }
        guard fed == 0 else { return fail(context: context, TLSFailure(reason: "no memory for received TLS bytes")) }
        if state == .handshaking { advanceHandshake(context: context) }
        if state == .open { readPlaintext(context: context) }
    }

    private func advanceHandshake(context: ChannelHandlerContext) {
        let result = abr_tls_session_handshake(session.pointer)
        // What the handshake wrote (a flight, or the alert that ends a failed one) goes out now.
        sendOutput(context: context, flush: true)
        switch result {
        case Int32(ABR_TLS_DONE):
            state = .open
            context.fireUserInboundEventTriggered(TLSUserEvent.handshakeCompleted(negotiatedProtocol: negotiatedProtocol()))
            let writes = waitingWrites
            waitingWrites.removeAll()
            for (plaintext, promise) in writes { encrypt(plaintext, context: context, promise: promise) }
            if !writes.isEmpty { context.flush() }
        case Int32(ABR_TLS_WANT_MORE):
            break
        default:
            fail(context: context, TLSFailure(reason: String(cString: abr_tls_session_error(session.pointer))))
        }
    }

    private func negotiatedProtocol() -> String? {
        var name = [UInt8](repeating: 0, count: 256)
        let length = name.withUnsafeMutableBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { abr_tls_session_alpn(session.pointer, $0.baseAddress, $0.count) }
        }
        return length > 0 ? String(decoding: name.prefix(length), as: UTF8.self) : nil
    }

    /// A buffer the last read found nothing for, kept for the next: every read ends with one
    /// that finds nothing, and allocating 16 KB for it each time is waste.
    private var unusedBuffer: ByteBuffer?

    private func readPlaintext(context: ChannelHandlerContext) {
        while state == .open {
            var plaintext = unusedBuffer ?? context.channel.allocator.buffer(capacity: Self.readChunk)
            unusedBuffer = nil
            var result = 0
            plaintext.writeWithUnsafeMutableBytes(minimumWritableBytes: Self.readChunk) { bytes in
                result = abr_tls_session_read(session.pointer, bytes.bindMemory(to: UInt8.self).baseAddress, bytes.count)
                return max(result, 0)
            }
            if result > 0 {
                context.fireChannelRead(wrapInboundOut(plaintext))
            } else if result == Int(ABR_TLS_WANT_MORE) {
                unusedBuffer = plaintext
                break
            } else if result == Int(ABR_TLS_CLOSED) {
                // The peer's close_notify: answer it and close.
                state = .closed
                abr_tls_session_close(session.pointer)
                sendOutput(context: context, flush: true)
                context.close(promise: nil)
            } else {
                fail(context: context, TLSFailure(reason: String(cString: abr_tls_session_error(session.pointer))))
            }
        }
        // TLS 1.3 writes after the handshake too (session tickets, key updates).
        sendOutput(context: context, flush: true)
    }

    public func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let plaintext = unwrapOutboundIn(data)
        switch state {
        case .handshaking: waitingWrites.append((plaintext, promise))
        case .open: encrypt(plaintext, context: context, promise: promise)
        case .closed: promise?.fail(ChannelError.ioOnClosedChannel)
        }
    }

    private func encrypt(_ plaintext: ByteBuffer, context: ChannelHandlerContext, promise: EventLoopPromise<Void>?) {
        let result = plaintext.withUnsafeReadableBytes { bytes in
            abr_tls_session_write(session.pointer, bytes.bindMemory(to: UInt8.self).baseAddress, bytes.count)
        }
        guard result == 0 else {
            promise?.fail(TLSFailure(reason: String(cString: abr_tls_session_error(session.pointer))))
            return fail(context: context, TLSFailure(reason: String(cString: abr_tls_session_error(session.pointer))))
        }
        if !sendOutput(context: context, flush: false, promise: promise) { promise?.succeed() }
    }

    /// Passes what the session wrote down the pipeline; false when there was nothing.
    @discardableResult
    private func sendOutput(context: ChannelHandlerContext, flush: Bool, promise: EventLoopPromise<Void>? = nil) -> Bool {
        let pending = abr_tls_session_pending_output(session.pointer)
        guard pending > 0 else { return false }
        var ciphertext = context.channel.allocator.buffer(capacity: pending)
        ciphertext.writeWithUnsafeMutableBytes(minimumWritableBytes: pending) { bytes in
            abr_tls_session_take_output(session.pointer, bytes.bindMemory(to: UInt8.self).baseAddress, bytes.count)
        }
        context.write(wrapOutboundOut(ciphertext), promise: promise)
        if flush { context.flush() }
        return true
    }

    public func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        // A close_notify first, so the peer knows the stream was not cut; the node does not wait for the peer's.
        if mode == .all, state == .open {
            state = .closed
            abr_tls_session_close(session.pointer)
            sendOutput(context: context, flush: true)
        }
        if mode == .all { failWaitingWrites(ChannelError.ioOnClosedChannel) }
        context.close(mode: mode, promise: promise)
    }

    public func channelInactive(context: ChannelHandlerContext) {
        state = .closed
        failWaitingWrites(ChannelError.eof)
        context.fireChannelInactive()
    }

    private func fail(context: ChannelHandlerContext, _ failure: TLSFailure) {
        guard state != .closed else { return }
        state = .closed
        failWaitingWrites(failure)
        context.fireErrorCaught(failure)
        context.close(promise: nil)
    }

    private func failWaitingWrites(_ error: Error) {
        let writes = waitingWrites
        waitingWrites.removeAll()
        for (_, promise) in writes { promise?.fail(error) }
    }
}
