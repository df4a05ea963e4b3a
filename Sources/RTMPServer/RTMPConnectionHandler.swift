import Dispatch
import Ingest
import Logging
import MediaCore
import NIOCore
import RTMP

/// One RTMP connection: answers the handshake, runs the publisher's `RTMPPublishSession`, asks
/// the node whether it may publish, and writes its media into the sink the node gave. Its
/// connection closing ends the publish (the job's grace starts, as for RTSP).
final class RTMPConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = RTMPInbound
    typealias OutboundOut = ByteBuffer

    private let service: RTMPService
    private var logger: Logger
    private var session = RTMPPublishSession()
    private var encoder = RTMPChunkEncoder()
    private var admittedAddress: String?
    private var remote = "?"
    private let id = "rtmp-" + String(UInt64.random(in: 0...UInt64.max) & 0x7FFF_FFFF_FFFF_FFFF, radix: 16, uppercase: true)
    private var sink: (any MediaSink)?
    private var claimedPath: String?
    private var ended = false
    private let lastMedia: PublisherActivity
    /// The latest acknowledgement owed while the peer was not reading (acknowledgements are
    /// cumulative: only the latest matters, so at most one waits).
    private var owedAcknowledgement: UInt32?

    init(service: RTMPService) {
        lastMedia = PublisherActivity(clock: service.configuration.clock)
        self.service = service
        logger = service.logger
    }

    func channelActive(context: ChannelHandlerContext) {
        remote = context.remoteAddress?.description ?? "?"
        logger[metadataKey: "rtmp.peer"] = "\(remote)"
        let address = context.remoteAddress?.ipAddress ?? "?"
        guard service.connections.admit(address) else {
            service.refusals.log(logger, "connection refused: too many connections", kind: "connections", metadata: ["rtmp.address": "\(address)"])
            context.close(promise: nil)
            return
        }
        admittedAddress = address
        service.opened(context.channel)
        // A connection that has not started publishing by the deadline holds a slot for nothing.
        context.eventLoop.scheduleTask(in: .seconds(service.configuration.publishDeadline)) { [self] in
            guard !session.isPublishing, !ended else { return }
            logger.info("connection closed: no publish within \(service.configuration.publishDeadline) s")
            finish(context: context, reason: "no publish within the deadline")
        }
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard admittedAddress != nil, !ended else { return }
        switch unwrapInboundIn(data) {
        case let .handshake(answer):
            context.writeAndFlush(wrapOutboundOut(answer), promise: nil)
        case let .acknowledge(sequence):
            // A peer that does not read gets no queue of acknowledgements: the latest waits for it.
            guard context.channel.isWritable else {
                owedAcknowledgement = sequence
                return
            }
            send([.control(RTMPMessage.Kind.acknowledgement, sequence)], context: context)
        case let .message(message):
            perform(session.receive(message), context: context)
        }
    }

    private func perform(_ actions: [RTMPPublishSession.Action], context: ChannelHandlerContext) {
        for action in actions {
            guard !ended else { return }
            switch action {
            case let .send(messages):
                send(messages, context: context)
            case let .decide(intent):
                perform(decide(intent, context: context), context: context)
            case let .media(event):
                receive(event, context: context)
            case let .end(reason, closeConnection):
                if closeConnection {
                    finish(context: context, reason: reason)
                } else {
                    endPublish(reason: reason)
                }
            }
        }
    }

    private func send(_ messages: [RTMPMessage], context: ChannelHandlerContext) {
        var buffer = context.channel.allocator.buffer(capacity: 256)
        for message in messages { encoder.encode(message, into: &buffer) }
        context.writeAndFlush(wrapOutboundOut(buffer), promise: nil)
    }

    private func receive(_ event: MediaSinkEvent, context: ChannelHandlerContext) {
        guard let sink else { return }
        if case let .formats(video?, _) = event {
            if let refusal = PublishAdmission.refusal(of: video, maximumPixels: service.configuration.maximumPublishPixels, sink: sink) {
                logger.warning("publish stopped: \(refusal)", metadata: ["stream.guid": "\(claimedPath ?? "?")"])
                perform(session.stop(refusal), context: context)
                return
            }
        }
        lastMedia.touch()
        event.deliver(to: sink)
    }

    /// Authentication, the node's policy, then the path's publisher slot (`PublishGate`).
    private func decide(_ intent: RTMPPublishIntent, context: ChannelHandlerContext) -> [RTMPPublishSession.Action] {
        let path = intent.path
        let channel = context.channel
        let logger = self.logger
        let claim = PublishGate.Claim(session: id, revoke: { reason in
            logger.notice("publish revoked: \(reason)", metadata: ["stream.guid": "\(path)"])
            channel.close(promise: nil)
        }, silence: { [lastMedia] in lastMedia.silence })
        let request = PublishRequest(path: path, remoteAddress: remote, transport: RTMPService.ingestProtocol.scheme, sps: nil)
        switch service.gate.admit(request, credentials: .presented(user: intent.username, password: intent.password), claim: claim) {
        case .refused(.credentials):
            service.refusals.log(logger, "authentication failed", kind: "authentication", metadata: ["stream.guid": "\(path)", "rtmp.address": "\(remote)"])
            return session.refuse(code: "NetConnection.Connect.Rejected",
                                  description: "\(path) needs the provision's credentials (?user=…&password=… on the stream key or the URL)")
        case let .refused(.policy(status, reason)):
            logger.info("publish refused", metadata: ["stream.guid": "\(path)", "status": "\(status)", "reason": "\(reason)"])
            return session.refuse(code: [403, 404].contains(status) ? "NetStream.Publish.BadName" : "NetStream.Publish.Rejected", description: reason)
        case .refused(.alreadyPublished):
            return session.refuse(code: "NetStream.Publish.BadName", description: "\(path) already has a publisher")
        case let .admitted(sink, tookOver):
            if tookOver { logger.info("publisher takes over a silent session", metadata: ["stream.guid": "\(path)"]) }
            self.sink = sink
            claimedPath = path
            lastMedia.touch()
            logger.info("publisher started", metadata: ["stream.guid": "\(path)", "protocol": "rtmp"])
            return session.accept()
        }
    }

    /// The publish is over (the connection may stay for a little while, as clients close it).
    private func endPublish(reason: String) {
        if let path = claimedPath {
            service.publishers.releasePublisher(path, session: id)
            claimedPath = nil
            logger.info("publisher ended: \(reason)", metadata: ["stream.guid": "\(path)"])
        }
        sink?.end(reason: reason)
        sink = nil
    }

    /// Ends the publish and closes the connection once what was written is out, or after
    /// `closeWait` seconds whatever is still unsent: a peer that never reads cannot keep its slot.
    private func finish(context: ChannelHandlerContext, reason: String) {
        guard !ended else { return }
        ended = true
        endPublish(reason: reason)
        let channel = context.channel
        let forced = context.eventLoop.scheduleTask(in: RTMPService.closeWait) { channel.close(promise: nil) }
        context.writeAndFlush(wrapOutboundOut(context.channel.allocator.buffer(capacity: 0))).whenComplete { _ in
            forced.cancel()
            channel.close(promise: nil)
        }
    }

    /// The node writes little to a publisher (answers and acknowledgements), so output piling up
    /// means the peer does not read: stop reading its input until it does, so what it sends cannot
    /// make more output queue. Its idle timeout then closes it if it never reads again.
    func channelWritabilityChanged(context: ChannelHandlerContext) {
        let writable = context.channel.isWritable
        context.channel.setOption(.autoRead, value: writable).whenSuccess {
            if writable { context.read() }
        }
        if writable, let sequence = owedAcknowledgement, !ended {
            owedAcknowledgement = nil
            send([.control(RTMPMessage.Kind.acknowledgement, sequence)], context: context)
        }
        context.fireChannelWritabilityChanged()
    }

    func channelInactive(context: ChannelHandlerContext) {
        ended = true
        endPublish(reason: "connection closed")
        if let admittedAddress {
            service.connections.release(admittedAddress)
            self.admittedAddress = nil
            service.closed(context.channel)
        }
        context.fireChannelInactive()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is IdleStateHandler.IdleStateEvent {
            logger.info("connection closed: nothing received for \(service.configuration.idleTimeout) s")
            finish(context: context, reason: "the publisher sent nothing for \(service.configuration.idleTimeout) s")
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        if let error = error as? RTMPProtocolError {
            logger.warning("closing connection: \(error)", metadata: ["stream.guid": "\(claimedPath ?? "-")"])
        } else if let error = error as? IOError, [ECONNRESET, EPIPE].contains(error.errnoCode) {
            logger.info("connection closed: \(error)")
        } else {
            logger.warning("connection closed after an error: \(error)")
        }
        ended = true
        endPublish(reason: "\(error)")
        context.close(promise: nil)
    }
}

import Synchronization
#if canImport(Glibc)
import Glibc
#endif
