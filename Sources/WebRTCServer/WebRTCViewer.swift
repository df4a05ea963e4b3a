import Dispatch
import Logging
import MediaCore
import NIOCore
import RTSP
import RTSPServer
import Synchronization
import WebRTC
import WebRTCTransport

/// One WHEP viewer: its ICE credentials, its DTLS association and SRTP, and the `PacketPlayer`
/// that feeds it its rung once DTLS is up. DTLS and SRTP are used under the viewer's lock:
/// datagrams arrive on the port's event loop, media from the stream's writer.
public final class WebRTCViewer: Sendable {
    public struct Status: Sendable {
        public var id: String
        public var path: String
        public var state: String
        public var peer: String?
        public var packetsSent: Int
        public var bytesSent: Int
        public var nacks: Int
        public var pictureLossIndications: Int
        public var receiverEstimate: UInt64?
        /// The rung it is on now, its moves, and the adaptation's estimate (bit/s).
        public var level: Int?
        public var switches: Int
        public var estimate: Double?
    }

    let id: String
    let path: String
    let pinned: Bool
    let credentials: ICELiteResponder.Credentials
    let remoteAddress: String
    private let service: WebRTCService
    private let channel: Channel
    private let answer: WHEPAnswer
    private let plan: WHEPAnswer.Plan
    private let logger: Logger
    private let state: Mutex<State>

    struct State {
        var dtls: DTLSSession
        var outbound: SRTPSession?
        var inbound: SRTPSession?
        var peer: SocketAddress?
        var nominated = false
        var player: PacketPlayer?
        var ended = false
        var created = DispatchTime.now().uptimeNanoseconds
        var lastHeard = DispatchTime.now().uptimeNanoseconds
        var transportSequence: UInt16 = 0
        var packetsSent = 0
        var bytesSent = 0
        var nacks = 0
        var pictureLossIndications = 0
        var receiverEstimate: UInt64?
        var phase = "ice"
        var retransmission: Scheduled<Void>?
        /// Transport-wide feedback turned into what the switching policy takes.
        var link = TransportFeedbackLink()
        var retransmissionSequence: UInt16 = UInt16.random(in: 0...UInt16.max)
        var paddingBytes = 0
    }

    init(service: WebRTCService, channel: Channel, path: String, pinned: Bool, plan: WHEPAnswer.Plan, answer: WHEPAnswer,
         remoteAddress: String) throws {
        var generator = SystemRandomNumberGenerator()
        id = WebRTCService.token(16, using: &generator)
        self.service = service
        self.channel = channel
        self.path = path
        self.pinned = pinned
        self.plan = plan
        self.answer = answer
        self.remoteAddress = remoteAddress
        credentials = .init(localUfrag: plan.iceUfrag, localPassword: plan.icePassword, remoteUfrag: answer.remoteUfrag)
        var logger = service.logger
        logger[metadataKey: "session"] = "\(id)"
        logger[metadataKey: "stream.guid"] = "\(path)"
        self.logger = logger
        state = Mutex(State(dtls: try DTLSSession(identity: service.identity)))
    }

    var peerAddress: SocketAddress? { state.withLock { $0.peer } }

    /// A binding request that checked out, from `address`: the first such address (or a
    /// nominated one) becomes the viewer's. Returns the address it replaces (`.some(nil)` for
    /// none) when the viewer's address changed.
    func consent(from address: SocketAddress, nominated: Bool) -> SocketAddress?? {
        state.withLock { state in
            state.lastHeard = DispatchTime.now().uptimeNanoseconds
            guard state.peer != address, state.peer == nil || (nominated && !state.nominated) else { return nil }
            let previous = state.peer
            state.peer = address
            state.nominated = state.nominated || nominated
            if state.phase == "ice" { state.phase = "dtls" }
            return .some(previous)
        }
    }

    func receiveDTLS(_ datagram: [UInt8]) {
        let (outputs, connected, peer) = state.withLock { state -> ([[UInt8]], Bool, SocketAddress?) in
            state.lastHeard = DispatchTime.now().uptimeNanoseconds
            let wasHandshaking = state.dtls.state == .handshaking
            let outputs = state.dtls.receive(datagram)
            return (outputs, wasHandshaking && state.dtls.state == .connected, state.peer)
        }
        if let peer { for output in outputs { service.send(output, to: peer) } }
        scheduleRetransmission()
        if connected { startMedia() }
        if case let .failed(reason) = state.withLock({ $0.dtls.state }) { end(reason: reason) }
    }

    /// The handshake's flights are resent on OpenSSL's timer until the browser answers.
    private func scheduleRetransmission() {
        let delay = state.withLock { $0.dtls.retransmissionDelay }
        guard let delay else { return }
        let task = channel.eventLoop.scheduleTask(in: .milliseconds(Int64(delay * 1000) + 1)) { [self] in
            let (outputs, peer) = state.withLock { state -> ([[UInt8]], SocketAddress?) in
                guard state.dtls.state == .handshaking, !state.ended else { return ([], nil) }
                return (state.dtls.retransmit(), state.peer)
            }
            if let peer { for output in outputs { service.send(output, to: peer) } }
            if !outputs.isEmpty { scheduleRetransmission() }
        }
        state.withLock {
            $0.retransmission?.cancel()
            $0.retransmission = task
        }
    }

    private func startMedia() {
        let keys: SRTPKeys
        do {
            keys = try state.withLock { try $0.dtls.srtpKeys(expectedPeerFingerprint: answer.remoteFingerprint.value) }
        } catch {
            end(reason: "\(error)")
            return
        }
        do {
            let outbound = try SRTPSession(profile: keys.profile, keyAndSalt: keys.keyAndSalt(ofClient: false), direction: .outbound)
            let inbound = try SRTPSession(profile: keys.profile, keyAndSalt: keys.keyAndSalt(ofClient: true), direction: .inbound)
            state.withLock {
                $0.outbound = outbound
                $0.inbound = inbound
                $0.phase = "playing"
            }
        } catch {
            end(reason: "\(error)")
            return
        }
        guard let stream = service.registry.existingStream(path), stream.isPlayable else {
            end(reason: "the stream ended before DTLS finished")
            return
        }
        let player = PacketPlayer(sink: ViewerSink(viewer: self), hasAudio: false, audioRate: 0) { [weak self] in
            self?.end(reason: "stream ended")
        }
        state.withLock { $0.player = player }
        // A rung of a ladder follows the viewer's link unless the viewer pinned it (`?abr=off`)
        // or sends no transport-wide feedback to judge it by.
        if !pinned, answer.transportSequenceExtension != nil, let ladder = stream.ladder, ladder.count > 1 {
            player.adapt(registry: service.registry, ladder: ladder, logger: logger) { [service, id, path] from, to, reason in
                service.viewerSwitched(id: id, requested: path, from: from, to: to, reason: reason, ladder: ladder)
            }
        }
        player.play(stream)
        logger.info("WebRTC viewer playing", metadata: ["srtp.profile": "\(keys.profile)", "webrtc.peer": "\(peerAddress.map { "\($0)" } ?? "?")"])
    }

    func receiveSRTP(_ packet: [UInt8]) {
        guard packet.count >= 4 else { return }
        // RTCP's packet types are 192–223 in the second byte (RFC 5761 §4); media from a viewer is not expected.
        guard packet[1] >= 192, packet[1] <= 223 else { return }
        let feedback: [RTCPFeedback]? = state.withLock { state in
            guard let inbound = state.inbound, let clear = try? inbound.unprotect(rtcp: packet) else { return nil }
            state.lastHeard = DispatchTime.now().uptimeNanoseconds
            return RTCPFeedback.parseCompound(clear)
        }
        guard let feedback else {
            service.refusals.log(logger, "SRTCP refused (forged, replayed or before DTLS)", kind: "srtcp")
            return
        }
        let now = DispatchTime.now().uptimeNanoseconds
        let (observations, player) = state.withLock { state -> ([LinkObservation], PacketPlayer?) in
            var observations: [LinkObservation] = []
            for item in feedback {
                switch item {
                case let .nack(_, sequences): state.nacks += sequences.count
                case .pictureLoss, .fullIntraRequest: state.pictureLossIndications += 1  // the rung's next grid IDR answers it
                case let .receiverEstimate(bitRate, _): state.receiverEstimate = bitRate
                case let .transportFeedback(report):
                    if let observation = state.link.receive(report, at: Double(now) / 1e9) { observations.append(observation) }
                default: break
                }
            }
            return (observations, state.player)
        }
        for observation in observations { player?.observe(observation) }
    }

    /// Media for the browser: the answered payload type and SSRC, the transport-wide sequence
    /// number where negotiated, then SRTP.
    func sendMedia(_ packets: [RTPPacket], track: Int) {
        guard track == 0 else { return }
        let (datagrams, peer) = state.withLock { state -> ([[UInt8]], SocketAddress?) in
            guard let outbound = state.outbound, let peer = state.peer, !state.ended else { return ([], nil) }
            var datagrams: [[UInt8]] = []
            datagrams.reserveCapacity(packets.count)
            for packet in packets {
                state.transportSequence &+= 1
                let clear = Self.serialize(packet, payloadType: answer.videoPayloadType, ssrc: plan.videoSSRC,
                                           transportSequence: answer.transportSequenceExtension.map { ($0, state.transportSequence) })
                guard let protected = try? outbound.protect(rtp: clear) else { continue }
                if answer.transportSequenceExtension != nil {
                    state.link.sent(sequence: state.transportSequence, bytes: protected.count, at: Double(DispatchTime.now().uptimeNanoseconds) / 1e9)
                }
                state.packetsSent += 1
                state.bytesSent += protected.count
                datagrams.append(protected)
            }
            return (datagrams, peer)
        }
        guard let peer else { return }
        for datagram in datagrams { service.send(datagram, to: peer) }
    }

    /// A probe's padding: RTP packets of padding only (RFC 3550 §5.1, at most 255 bytes each) on
    /// the retransmission SSRC, which browsers count in transport-wide feedback and discard.
    /// Without RTX negotiated there is no stream to carry them, and no probe.
    func sendPadding(bytes: Int) {
        guard let rtxType = answer.retransmissionPayloadType, let extensionID = answer.transportSequenceExtension else { return }
        let (datagrams, peer) = state.withLock { state -> ([(sequence: UInt16, bytes: [UInt8])], SocketAddress?) in
            guard let outbound = state.outbound, let peer = state.peer, !state.ended else { return ([], nil) }
            var datagrams: [(sequence: UInt16, bytes: [UInt8])] = []
            var left = bytes
            while left > 0, datagrams.count < 2000 {
                state.transportSequence &+= 1
                state.retransmissionSequence &+= 1
                let padding = min(255, max(1, left))
                var packet = Self.serialize(RTPPacket(marker: false, payloadType: rtxType, sequenceNumber: state.retransmissionSequence,
                                                      timestamp: 0, ssrc: plan.retransmissionSSRC, payload: ByteBuffer()),
                                            payloadType: rtxType, ssrc: plan.retransmissionSSRC, transportSequence: (extensionID, state.transportSequence))
                packet[0] |= 0x20  // P: the packet ends in padding, its last byte the count
                packet += [UInt8](repeating: 0, count: padding - 1) + [UInt8(padding)]
                guard let protected = try? outbound.protect(rtp: packet) else { break }
                state.paddingBytes += protected.count
                datagrams.append((state.transportSequence, protected))
                left -= protected.count
            }
            return (datagrams, peer)
        }
        guard let peer, !datagrams.isEmpty else { return }
        // Paced over the slice's 100 ms in ten steps: a probe sent at once overflows a short
        // bottleneck queue and reads as loss on a link that would have carried it.
        let steps = 10
        let perStep = (datagrams.count + steps - 1) / steps
        for step in 0..<steps {
            let part = Array(datagrams.dropFirst(step * perStep).prefix(perStep))
            guard !part.isEmpty else { break }
            // Each is noted when it really leaves: its delay then says nothing of the pacing.
            channel.eventLoop.scheduleTask(in: .milliseconds(Int64(step) * 10)) { [self] in
                let now = Double(DispatchTime.now().uptimeNanoseconds) / 1e9
                state.withLock { state in
                    for datagram in part { state.link.sent(sequence: datagram.sequence, bytes: datagram.bytes.count, at: now, padding: true) }
                }
                for datagram in part { service.send(datagram.bytes, to: peer) }
            }
        }
    }

    func sendControl(_ rtcp: RTCPPacket, track: Int) {
        guard track == 0 else { return }
        var rewritten = rtcp
        if case let .senderReport(_, ntp, rtp, count, octets) = rtcp {
            rewritten = .senderReport(ssrc: plan.videoSSRC, ntpTimestamp: ntp, rtpTimestamp: rtp, packetCount: count, octetCount: octets)
        } else if case .goodbye = rtcp {
            rewritten = .goodbye(ssrcs: [plan.videoSSRC])
        }
        var buffer = ByteBuffer()
        rewritten.write(to: &buffer)
        let (datagram, peer) = state.withLock { state -> ([UInt8]?, SocketAddress?) in
            (try? state.outbound?.protect(rtcp: Array(buffer.readableBytesView)), state.peer)
        }
        if let datagram, let peer { service.send(datagram, to: peer) }
    }

    /// RTP with a one-byte header extension (RFC 8285) carrying the transport-wide sequence number.
    static func serialize(_ packet: RTPPacket, payloadType: UInt8, ssrc: UInt32, transportSequence: (id: Int, value: UInt16)?) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(packet.payload.readableBytes + 24)
        bytes.append(transportSequence == nil ? 0x80 : 0x90)
        bytes.append((packet.marker ? 0x80 : 0) | (payloadType & 0x7F))
        bytes += [UInt8(packet.sequenceNumber >> 8), UInt8(packet.sequenceNumber & 0xFF)]
        for shift in [24, 16, 8, 0] { bytes.append(UInt8(truncatingIfNeeded: packet.timestamp >> UInt32(shift))) }
        for shift in [24, 16, 8, 0] { bytes.append(UInt8(truncatingIfNeeded: ssrc >> UInt32(shift))) }
        if let (id, value) = transportSequence {
            // 0xBEDE, one word: id and length-1 (1), the 16-bit sequence, one byte of padding.
            bytes += [0xBE, 0xDE, 0x00, 0x01, UInt8(id << 4 | 1), UInt8(value >> 8), UInt8(value & 0xFF), 0]
        }
        bytes += packet.payload.readableBytesView
        return bytes
    }

    func end(reason: String) {
        let (player, outputs, peer, retransmission) = state.withLock { state -> (PacketPlayer?, [[UInt8]], SocketAddress?, Scheduled<Void>?) in
            guard !state.ended else { return (nil, [], nil, nil) }
            state.ended = true
            state.phase = "ended"
            let outputs = state.dtls.state == .connected ? state.dtls.close() : []
            defer { state.player = nil }
            return (state.player, outputs, state.peer, state.retransmission)
        }
        retransmission?.cancel()
        player?.stop()
        if let peer { for output in outputs { service.send(output, to: peer) } }
        service.ended(self)
        logger.info("WebRTC viewer ended", metadata: ["reason": "\(reason)"])
    }

    func expiry(now: UInt64, setupTimeout: Double, silenceTimeout: Double) -> String? {
        state.withLock { state in
            if state.outbound == nil, Double(now &- state.created) / 1e9 > setupTimeout {
                return state.peer == nil ? "ICE did not finish within \(Int(setupTimeout)) s" : "DTLS did not finish within \(Int(setupTimeout)) s"
            }
            if Double(now &- state.lastHeard) / 1e9 > silenceTimeout { return "silent for \(Int(silenceTimeout)) s" }
            return nil
        }
    }

    public var status: Status {
        state.withLock { state in
            Status(id: id, path: path, state: state.phase, peer: state.peer.map { "\($0)" }, packetsSent: state.packetsSent,
                   bytesSent: state.bytesSent, nacks: state.nacks, pictureLossIndications: state.pictureLossIndications,
                   receiverEstimate: state.receiverEstimate, level: state.player?.level, switches: state.player?.switches ?? 0,
                   estimate: state.player?.estimate)
        }
    }
}

/// The viewer as its `PacketPlayer` sees it.
struct ViewerSink: PacketSink {
    let viewer: WebRTCViewer
    func send(_ packets: [RTPPacket], track: Int) { viewer.sendMedia(packets, track: track) }
    func send(_ rtcp: RTCPPacket, track: Int) { viewer.sendControl(rtcp, track: track) }
    var pendingBytes: Int { 0 }
    func close() {}
    func sendPadding(bytes: Int) { viewer.sendPadding(bytes: bytes) }
    var eventLoop: EventLoop { viewer.eventLoop }
}

extension WebRTCViewer {
    var eventLoop: EventLoop { channel.eventLoop }
}
