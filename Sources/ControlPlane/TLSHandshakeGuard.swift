import HummingbirdCore
import Ingest
import Logging
import NIOCore
import NIOTLS

/// Bounds TLS connections before they speak HTTP. `HTTPConnectionGuard` counts a connection once
/// its HTTP pipeline exists, which over TLS is after the handshake; until then a connection was
/// held only by the idle timeout, which every byte resets, so a peer that trickled its
/// ClientHello a byte at a time held a descriptor for as long as it liked, from as many
/// connections as it liked. Here each handshake must finish within `Limits.tlsHandshakeTimeout`,
/// and handshakes under way are capped in all and per address as connections are.
final class TLSHandshakeGuard: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny

    private let limiter: HTTPConnectionLimiter
    private var admittedAddress: String?
    private var deadline: Scheduled<Void>?
    private var finished = false
    /// This handler's context: it sits ahead of the TLS handler, so a close from here reaches the
    /// socket at once instead of starting a TLS shutdown that waits for the peer.
    private var context: ChannelHandlerContext?

    init(limiter: HTTPConnectionLimiter) {
        self.limiter = limiter
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        if context.channel.isActive { admit(context: context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        admit(context: context)
        context.fireChannelActive()
    }

    private func admit(context: ChannelHandlerContext) {
        guard admittedAddress == nil, deadline == nil, !finished else { return }
        let address = context.channel.remoteAddress?.ipAddress ?? "?"
        guard limiter.handshakes.admit(address) else {
            finished = true
            limiter.logRefusal(from: address, reason: "too many TLS handshakes under way")
            context.close(promise: nil)
            return
        }
        admittedAddress = address
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        deadline = context.eventLoop.scheduleTask(in: .seconds(limiter.limits.tlsHandshakeTimeout)) {
            handler.value.context?.close(promise: nil)
        }
    }

    /// The handshake finished (`HandshakeCompletionWatcher`): from here the HTTP guards count the
    /// connection (HTTP/1.1) or its streams (HTTP/2).
    func handshakeCompleted() {
        finished = true
        release()
    }

    func channelInactive(context: ChannelHandlerContext) {
        release()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        release()
        self.context = nil
    }

    private func release() {
        deadline?.cancel()
        deadline = nil
        if let address = admittedAddress {
            limiter.handshakes.release(address)
            admittedAddress = nil
        }
    }
}

/// Sits after the TLS handler, where the handshake's completion is announced, and tells the guard.
final class HandshakeCompletionWatcher: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny
    private let handshakeGuard: TLSHandshakeGuard

    init(_ handshakeGuard: TLSHandshakeGuard) {
        self.handshakeGuard = handshakeGuard
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        context.fireUserInboundEventTriggered(event)
        if case .handshakeCompleted = event as? TLSUserEvent {
            handshakeGuard.handshakeCompleted()
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
        }
    }
}
