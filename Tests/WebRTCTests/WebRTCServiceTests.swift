import Dispatch
#if canImport(Glibc)
import Glibc
#endif
import MediaCore
import NIOCore
import NIOPosix
import RTSP
import RTSPServer
import Synchronization
import Testing
import WebRTC
import WebRTCTransport
@testable import WebRTCServer

/// The node's WebRTC port against a peer made of the same kept libraries a browser uses (OpenSSL's
/// DTLS client, libsrtp2), over real UDP on loopback: a session that plays, and everything a
/// hostile or broken peer can send it. Nothing it sends may end the session, stall its media or
/// cost more than it bounds.
@Suite(.serialized) struct WebRTCServiceTests {
    /// A Constrained Baseline SPS and PPS of x264 (320×240), and a keyframe's worth of slice bytes.
    static let sps: [UInt8] = [0x67, 0x42, 0xc0, 0x0d, 0xd9, 0x01, 0x41, 0xfb, 0x01, 0x10, 0x00, 0x00, 0x03, 0x00, 0x10, 0x00,
                               0x00, 0x03, 0x03, 0xc0, 0xf1, 0x42, 0xa4, 0x80]
    static let pps: [UInt8] = [0x68, 0xcb, 0x83, 0xcb, 0x20]

    /// x264's High SPS with `-bf 2` (320×240): its VUI allows two reordered pictures.
    static let bFrameSPS: [UInt8] = [0x67, 0x64, 0x00, 0x0d, 0xac, 0xd9, 0x41, 0x41, 0xfb, 0x01, 0x10, 0x00, 0x00, 0x03, 0x00, 0x10,
                                     0x00, 0x00, 0x03, 0x03, 0xc0, 0xf1, 0x42, 0x99, 0x60]

    /// A rung with B-frames (a passed-through top from OBS) is not sent over WebRTC: an adaptive
    /// viewer asking for it starts on the best rung WebRTC carries, a pinned one is told why and
    /// what it could watch. Both signs count: the SPS's reorder figure, and pictures that arrive
    /// out of presentation order when the SPS is silent.
    @Test func aRungWithBFramesIsNotOfferedAndAPinnedViewerIsToldWhy() throws {
        #expect(H264SPS(Self.bFrameSPS)?.maxNumReorderFrames == 2)
        let registry = StreamRegistry()
        let ladder = [1: "live/b_1", 2: "live/b_2", 3: "live/b_3"]
        for path in ladder.values {
            let stream = registry.stream(path)
            stream.setFormats(video: VideoFormat(sps: path == "live/b_1" ? Self.bFrameSPS : Self.sps, pps: Self.pps, frameRate: 30), audio: nil)
            stream.setLadder(ladder)
        }
        let top = try #require(registry.existingStream("live/b_1"))
        let second = try #require(registry.existingStream("live/b_2"))
        #expect(top.webRTCRefusal?.contains("B-frames") == true)
        #expect(second.webRTCRefusal == nil)
        let adaptive = try WebRTCService.webRTCRung(for: top, path: "live/b_1", pinned: false, registry: registry)
        #expect(adaptive.path == "live/b_2")
        #expect(try WebRTCService.webRTCRung(for: second, path: "live/b_2", pinned: true, registry: registry).path == "live/b_2")
        do {
            _ = try WebRTCService.webRTCRung(for: top, path: "live/b_1", pinned: true, registry: registry)
            Issue.record("a pinned viewer of a B-frame rung was accepted")
        } catch {
            #expect(error.status == 406)
            #expect(error.reason.contains("live/b_1 cannot be sent over WebRTC") && error.reason.contains("B-frames")
                && error.reason.contains("live/b_2, live/b_3"), "\(error.reason)")
        }
        // An SPS that does not say: the pictures do. Decode order I P B B, shown 0 3 1 2.
        let clock = Rational(1, 90_000)
        for (index, shown) in [0, 3, 1, 2].enumerated() {
            second.writeVideo([[index == 0 ? 0x65 : 0x41, 0x88, 0x80]], time: MediaTime(ticks: Int64(shown * 3000), timeBase: clock), isKeyframe: index == 0)
        }
        #expect(second.webRTCRefusal?.contains("out of order") == true)
        #expect(try WebRTCService.webRTCRung(for: top, path: "live/b_1", pinned: false, registry: registry).path == "live/b_3")
        // The publisher came back with another encoder: a new SPS, and pictures in order.
        let third = try #require(registry.existingStream("live/b_3"))
        for index in 0..<4 {
            third.writeVideo([[index == 0 ? 0x65 : 0x41, 0x88, 0x80]], time: MediaTime(ticks: Int64(index * 3000), timeBase: clock), isKeyframe: index == 0)
        }
        #expect(third.webRTCRefusal == nil)
        var otherLevel = Self.sps
        otherLevel[3] = 0x1e
        second.setFormats(video: VideoFormat(sps: otherLevel, pps: Self.pps, frameRate: 30), audio: nil)
        #expect(second.video?.sps == otherLevel)
        #expect(second.webRTCRefusal == nil)
    }

    /// The candidates a viewer is offered: the operator's, else the listening address; on a
    /// wildcard every IPv4 address of the node's interfaces, loopback last, each once.
    @Test func aWildcardListenerOffersTheNodesInterfacesLoopbackLast() throws {
        #expect(WebRTCService.announcedHosts(candidates: ["203.0.113.7"], host: "0.0.0.0", interfaceAddresses: ["10.0.0.5"]) == ["203.0.113.7"])
        #expect(WebRTCService.announcedHosts(candidates: [], host: "10.0.0.5", interfaceAddresses: ["10.0.0.5", "127.0.0.1"]) == ["10.0.0.5"])
        #expect(WebRTCService.announcedHosts(candidates: [], host: "0.0.0.0", interfaceAddresses: ["127.0.0.1", "10.0.0.5", "172.17.0.1", "10.0.0.5"])
            == ["10.0.0.5", "172.17.0.1", "127.0.0.1"])
        #expect(WebRTCService.announcedHosts(candidates: [], host: "0.0.0.0", interfaceAddresses: []) == ["127.0.0.1"])
        // A real service on the wildcard: this machine's own interfaces.
        var configuration = WebRTCService.Configuration()
        configuration.host = "0.0.0.0"
        configuration.port = 0
        let service = try WebRTCService(configuration: configuration, registry: StreamRegistry())
        _ = try service.start()
        defer { service.shutdown() }
        let interfaces = try System.enumerateDevices().compactMap { device -> String? in
            guard case .v4 = device.address else { return nil }
            return device.address?.ipAddress
        }
        #expect(Set(service.announcedCandidates) == Set(interfaces), "\(service.announcedCandidates) against \(interfaces)")
        #expect(service.announcedCandidates.last?.hasPrefix("127.") == true)
    }

    /// On a wildcard, a reply leaves from the address the peer reached, as ICE requires (a
    /// response from another address fails that candidate pair): STUN answers and refusals, and
    /// once ICE is done the DTLS handshake. The wildcard socket alone replied to a peer on
    /// 127.0.0.1 from 127.0.0.1, whichever of the node's addresses it had reached.
    @Test func aWildcardListenerRepliesFromTheAddressReached() throws {
        let registry = StreamRegistry()
        registry.stream("live/where_1").setFormats(video: VideoFormat(sps: Self.sps, pps: Self.pps, frameRate: 30), audio: nil)
        var configuration = WebRTCService.Configuration()
        configuration.host = "0.0.0.0"
        configuration.port = 0
        let service = try WebRTCService(configuration: configuration, registry: registry)
        let port = try service.start()
        defer { service.shutdown() }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        defer { try? group.syncShutdownGracefully() }

        /// A socket on 127.0.0.1 that keeps each datagram's source.
        final class Recorder: ChannelInboundHandler, Sendable {
            typealias InboundIn = AddressedEnvelope<ByteBuffer>
            let received = Mutex<[(from: SocketAddress, bytes: [UInt8])]>([])
            func channelRead(context: ChannelHandlerContext, data: NIOAny) {
                let envelope = unwrapInboundIn(data)
                received.withLock { $0.append((envelope.remoteAddress, Array(envelope.data.readableBytesView))) }
            }
            func collect(seconds: Double, until condition: ([(from: SocketAddress, bytes: [UInt8])]) -> Bool) -> [(from: SocketAddress, bytes: [UInt8])] {
                let end = DispatchTime.now().uptimeNanoseconds + UInt64(seconds * 1e9)
                while DispatchTime.now().uptimeNanoseconds < end, !condition(received.withLock { $0 }) { usleep(10_000) }
                return received.withLock { items in
                    defer { items = [] }
                    return items
                }
            }
        }
        let recorder = Recorder()
        let client = try DatagramBootstrap(group: group)
            .channelInitializer { channel in channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(recorder) } }
            .bind(host: "127.0.0.1", port: 0).wait()
        defer { try? client.close().wait() }
        func send(_ bytes: [UInt8], to host: String) {
            client.writeAndFlush(AddressedEnvelope(remoteAddress: try! SocketAddress(ipAddress: host, port: port), data: ByteBuffer(bytes: bytes)),
                                 promise: nil)
        }

        // A binding for no session, to each address the node announces: refused from that address.
        for host in service.announcedCandidates {
            send(Self.binding(username: "nobody:here", key: "not-a-session-password"), to: host)
            let replies = recorder.collect(seconds: 2) { !$0.isEmpty }
            #expect(replies.count == 1 && replies.allSatisfy { $0.from.ipAddress == host && $0.from.port == port },
                    "to \(host): \(replies.map { "\($0.from)" })")
        }

        // A session over the first address that is not loopback, where this machine has one.
        guard let host = service.announcedCandidates.first(where: { !$0.hasPrefix("127.") }) else { return }
        let browser = try DTLSIdentity()
        let (_, answer) = try service.offer(Self.offer(ufrag: "away", password: "browser-password-0123456789", fingerprint: browser.fingerprint),
                                            path: "live/where_1", pinned: false, from: "127.0.0.1")
        let nodeUfrag = try #require(Self.line("a=ice-ufrag:", in: answer))
        let nodePassword = try #require(Self.line("a=ice-pwd:", in: answer))
        send(Self.binding(username: "\(nodeUfrag):away", key: nodePassword), to: host)
        let answered = recorder.collect(seconds: 2) { !$0.isEmpty }
        #expect(answered.contains { (try? STUNMessage.parse($0.bytes).message.messageClass) == .successResponse && $0.from.ipAddress == host },
                "\(answered.map { "\($0.from)" })")
        let dtls = try DTLSSession(identity: browser, client: true)
        for datagram in dtls.start() { send(datagram, to: host) }
        let flight = recorder.collect(seconds: 3) { $0.contains { (20...63).contains($0.bytes.first ?? 0) } }
        let handshake = flight.filter { (20...63).contains($0.bytes.first ?? 0) }
        #expect(!handshake.isEmpty && handshake.allSatisfy { $0.from.ipAddress == host }, "\(flight.map { "\($0.from)" })")
    }

    /// Only the kernel's refusal to segment turns segmented sends off; a send that failed for
    /// its own reasons (a socket buffer full for a moment) changes nothing.
    @Test func onlyTheKernelsRefusalTurnsSegmentedSendsOff() throws {
        guard System.supportsUDPSegmentationOffload else { return }
        let service = try WebRTCService(configuration: .init(), registry: StreamRegistry())
        #expect(service.segmentationOffload)
        service.segmentedSendFailed(IOError(errnoCode: ENOBUFS, reason: "sendmmsg"))
        service.segmentedSendFailed(ChannelError.ioOnClosedChannel)
        #expect(service.segmentationOffload)
        service.segmentedSendFailed(IOError(errnoCode: EIO, reason: "sendmmsg"))
        #expect(!service.segmentationOffload)
        var off = WebRTCService.Configuration()
        off.segmentationOffload = false
        #expect(try !WebRTCService(configuration: off, registry: StreamRegistry()).segmentationOffload)
    }

    /// A UDP socket on loopback that keeps what it receives.
    final class Peer: Sendable {
        final class Inbox: ChannelInboundHandler, Sendable {
            typealias InboundIn = AddressedEnvelope<ByteBuffer>
            let datagrams = Mutex<[[UInt8]]>([])
            func channelRead(context: ChannelHandlerContext, data: NIOAny) {
                let bytes = Array(unwrapInboundIn(data).data.readableBytesView)
                datagrams.withLock { $0.append(bytes) }
            }
        }

        let channel: Channel
        let inbox = Inbox()
        let port: Int

        init(group: EventLoopGroup, port: Int) throws {
            self.port = port
            channel = try DatagramBootstrap(group: group)
                .channelInitializer { [inbox] channel in channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(inbox) } }
                .bind(host: "127.0.0.1", port: 0).wait()
        }

        func send(_ bytes: [UInt8]) {
            let address = try! SocketAddress(ipAddress: "127.0.0.1", port: port)
            channel.writeAndFlush(AddressedEnvelope(remoteAddress: address, data: ByteBuffer(bytes: bytes)), promise: nil)
        }

        /// Everything received so far, emptied.
        func take() -> [[UInt8]] {
            inbox.datagrams.withLock { items in
                defer { items = [] }
                return items
            }
        }

        /// Waits (bounded) until `condition` holds of what arrived meanwhile; gives it all back.
        func collect(seconds: Double, until condition: ([[UInt8]]) -> Bool) -> [[UInt8]] {
            var all: [[UInt8]] = []
            let end = DispatchTime.now().uptimeNanoseconds + UInt64(seconds * 1e9)
            while DispatchTime.now().uptimeNanoseconds < end {
                all += take()
                if condition(all) { break }
                usleep(10_000)
            }
            return all
        }
    }

    static func offer(ufrag: String, password: String, fingerprint: String) -> String {
        """
        v=0\r
        o=- 1 2 IN IP4 127.0.0.1\r
        s=-\r
        t=0 0\r
        a=group:BUNDLE 0\r
        m=video 9 UDP/TLS/RTP/SAVPF 102 103\r
        c=IN IP4 0.0.0.0\r
        a=ice-ufrag:\(ufrag)\r
        a=ice-pwd:\(password)\r
        a=fingerprint:sha-256 \(fingerprint)\r
        a=setup:actpass\r
        a=mid:0\r
        a=extmap:3 http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01\r
        a=recvonly\r
        a=rtcp-mux\r
        a=rtpmap:102 H264/90000\r
        a=rtcp-fb:102 transport-cc\r
        a=rtcp-fb:102 nack\r
        a=rtcp-fb:102 nack pli\r
        a=rtcp-fb:102 goog-remb\r
        a=fmtp:102 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f\r
        a=rtpmap:103 rtx/90000\r
        a=fmtp:103 apt=102\r

        """
    }

    static func line(_ prefix: String, in sdp: String) -> String? {
        sdp.split(separator: "\r\n").first { $0.hasPrefix(prefix) }.map { String($0.dropFirst(prefix.count)) }
    }

    static func binding(username: String, key: String, nominate: Bool = true) -> [UInt8] {
        var attributes: [STUNMessage.Attribute] = [.init(type: STUNMessage.AttributeType.username, value: Array(username.utf8)),
                                                   .init(type: STUNMessage.AttributeType.priority, value: [0x6E, 0, 1, 0xFF]),
                                                   .init(type: STUNMessage.AttributeType.iceControlling, value: [1, 2, 3, 4, 5, 6, 7, 8])]
        if nominate { attributes.append(.init(type: STUNMessage.AttributeType.useCandidate, value: [])) }
        var generator = SystemRandomNumberGenerator()
        return STUNMessage(messageClass: .request, method: STUNMessage.bindingMethod, transactionID: (0..<12).map { _ in UInt8.random(in: 0...255, using: &generator) },
                           attributes: attributes).encoded(integrityKey: Array(key.utf8))
    }

    /// RTCP feedback (RFC 4585 §6.1) from the viewer's SSRC 1 about `media`.
    static func feedback(type: UInt8, format: UInt8, media: UInt32, _ body: [UInt8]) -> [UInt8] {
        let words = 2 + body.count / 4
        return [0x80 | format, type, UInt8(words >> 8), UInt8(words & 0xFF), 0, 0, 0, 1,
                UInt8(media >> 24), UInt8(media >> 16 & 0xFF), UInt8(media >> 8 & 0xFF), UInt8(media & 0xFF)] + body
    }

    /// Transport-wide feedback (RTCP 205/15) saying that the packets of `packets` carrying a
    /// transport-wide number arrived, 250 µs apart: one run-length chunk of small deltas.
    static func transportFeedback(media: UInt32, acknowledging packets: [[UInt8]]) -> [UInt8]? {
        let numbers = packets.compactMap { packet -> UInt16? in
            guard packet.count > 20, packet[0] & 0x10 != 0, packet[12] == 0xBE, packet[13] == 0xDE else { return nil }
            return UInt16(packet[17]) << 8 | UInt16(packet[18])
        }
        guard let base = numbers.min(), let last = numbers.max(), last - base < 8191 else { return nil }
        let span = Int(last - base) + 1
        // Base, status count, reference time (1 × 64 ms), feedback count; then the chunk and a delta each.
        var body: [UInt8] = [UInt8(base >> 8), UInt8(base & 0xFF), UInt8(span >> 8), UInt8(span & 0xFF), 0, 0, 1, 0]
        body += [UInt8(0x20 | span >> 8), UInt8(span & 0xFF)] + [UInt8](repeating: 1, count: span)
        while body.count % 4 != 0 { body.append(0) }
        return feedback(type: 205, format: 15, media: media, body)
    }

    static func isRTP(_ datagram: [UInt8]) -> Bool { datagram.count > 12 && datagram[0] >= 128 && datagram[0] <= 191 && !(192...223).contains(datagram[1]) }

    @Test func aSessionPlaysAndNothingAPeerSendsBreaksIt() throws {
        let registry = StreamRegistry()
        let stream = registry.stream("live/attack_1")
        stream.setFormats(video: VideoFormat(sps: Self.sps, pps: Self.pps, frameRate: 30), audio: nil)
        var configuration = WebRTCService.Configuration()
        configuration.port = 0
        configuration.maximumSessions = 6
        configuration.maximumSessionsPerAddress = 4
        configuration.setupTimeout = 2
        let service = try WebRTCService(configuration: configuration, registry: registry)
        let port = try service.start()
        defer { service.shutdown() }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        defer { try? group.syncShutdownGracefully() }
        // Pictures keep coming, as a live rung's do: an IDR every 30.
        let writer = DispatchQueue(label: "pictures")
        let writing = Atomic<Bool>(true)
        writer.async {
            var index: Int64 = 0
            while writing.load(ordering: .relaxed) {
                let keyframe = index % 30 == 0
                let slice: [UInt8] = [keyframe ? 0x65 : 0x41] + [UInt8](repeating: 0x5A, count: keyframe ? 6000 : 1500)
                stream.writeVideo([slice], time: MediaTime(ticks: index * 3000, timeBase: Rational(1, 90000)), isKeyframe: keyframe)
                index += 1
                usleep(33_000)
            }
        }
        defer { writing.store(false, ordering: .relaxed) }
        usleep(100_000)

        let browser = try DTLSIdentity()
        let (id, answer) = try service.offer(Self.offer(ufrag: "brws", password: "browser-password-0123456789", fingerprint: browser.fingerprint),
                                             path: "live/attack_1", pinned: false, from: "127.0.0.1")
        let nodeUfrag = try #require(Self.line("a=ice-ufrag:", in: answer))
        let nodePassword = try #require(Self.line("a=ice-pwd:", in: answer))
        let nodeFingerprint = try #require(Self.line("a=fingerprint:sha-256 ", in: answer))
        let videoSSRC = try #require(Self.line("a=ssrc:", in: answer)?.split(separator: " ").first.flatMap { UInt32($0) })
        let peer = try Peer(group: group, port: port)

        // STUN with the wrong key: a 401, and the session does not take the address.
        peer.send(Self.binding(username: "\(nodeUfrag):brws", key: "not-the-password-at-all!"))
        let refused = peer.collect(seconds: 2) { !$0.isEmpty }
        #expect(refused.first.flatMap { try? STUNMessage.parse($0).message.messageClass } == .errorResponse)
        #expect(service.viewers.first { $0.id == id }?.peer == nil)
        // DTLS before ICE: dropped, not answered.
        let earlyClient = try DTLSSession(identity: browser, client: true)
        for datagram in earlyClient.start() { peer.send(datagram) }
        #expect(peer.collect(seconds: 0.3) { !$0.isEmpty }.isEmpty)

        // ICE, then a real DTLS handshake.
        peer.send(Self.binding(username: "\(nodeUfrag):brws", key: nodePassword))
        #expect(peer.collect(seconds: 2) { !$0.isEmpty }.contains { (try? STUNMessage.parse($0).message.messageClass) == .successResponse })
        // Garbage that looks like DTLS, first: the handshake still succeeds after it.
        peer.send([22, 0xFE, 0xFD] + [UInt8](repeating: 0xEE, count: 60))
        let client = try DTLSSession(identity: browser, client: true)
        for datagram in client.start() { peer.send(datagram) }
        var early: [[UInt8]] = []
        let handshakeEnd = DispatchTime.now().uptimeNanoseconds + 5_000_000_000
        while client.state == .handshaking, DispatchTime.now().uptimeNanoseconds < handshakeEnd {
            for datagram in peer.take() {
                if datagram[0] >= 20, datagram[0] <= 63 { for reply in client.receive(datagram) { peer.send(reply) } } else { early.append(datagram) }
            }
            usleep(5_000)
        }
        #expect(client.state == .connected)
        let keys = try client.srtpKeys(expectedPeerFingerprint: nodeFingerprint)
        let inbound = try SRTPSession(profile: keys.profile, keyAndSalt: keys.keyAndSalt(ofClient: false), direction: .inbound)
        let outbound = try SRTPSession(profile: keys.profile, keyAndSalt: keys.keyAndSalt(ofClient: true), direction: .outbound)

        /// Media that decrypts, on the answered SSRC and payload type; each batch is acknowledged
        /// with transport-wide feedback, as a browser does (the node's congestion window holds
        /// media that feedback never names).
        func media(seconds: Double = 2) -> [[UInt8]] {
            var clear: [[UInt8]] = []
            var arrived = early
            early = []
            let end = DispatchTime.now().uptimeNanoseconds + UInt64(seconds * 1e9)
            repeat {
                let batch = arrived.filter(Self.isRTP).compactMap { try? inbound.unprotect(rtp: $0) }
                clear += batch
                if let acknowledgement = Self.transportFeedback(media: videoSSRC, acknowledging: batch) {
                    peer.send(try! outbound.protect(rtcp: acknowledgement))
                }
                if clear.count >= 20 { break }
                usleep(10_000)
                arrived = peer.take()
            } while DispatchTime.now().uptimeNanoseconds < end
            return clear
        }
        let first = media()
        #expect(first.count >= 20, "SRTP media after the handshake")
        let ssrcs = Set(first.map { UInt32($0[8]) << 24 | UInt32($0[9]) << 16 | UInt32($0[10]) << 8 | UInt32($0[11]) })
        #expect(ssrcs == [videoSSRC] && first.allSatisfy { $0[1] & 0x7F == 102 })
        // The keyframes' packets left in segmented sends (one size, the kernel cutting them), and
        // arrived as the datagrams above.
        if System.supportsUDPSegmentationOffload {
            #expect(service.segmentationOffload && service.segmentedDatagrams > 0)
        }
        func status() -> WebRTCViewer.Status? { service.viewers.first { $0.id == id } }
        #expect(status()?.state == "playing")

        // A NACK for packets it had: they come back on the RTX stream (103), once counted.
        let sequences = first.suffix(3).map { UInt16($0[2]) << 8 | UInt16($0[3]) }
        let nack = try outbound.protect(rtcp: Self.feedback(type: 205, format: 1, media: videoSSRC,
                                                            sequences.flatMap { [UInt8($0 >> 8), UInt8($0 & 0xFF), 0, 0] }))
        peer.send(nack)
        // (The RTP header is in the clear under SRTP: a datagram is decrypted once, as replays are refused.)
        let resent = peer.collect(seconds: 2) { $0.contains { Self.isRTP($0) && $0[1] & 0x7F == 103 } }
        let retransmission = resent.filter { Self.isRTP($0) && $0[1] & 0x7F == 103 }.compactMap { try? inbound.unprotect(rtp: $0) }
        #expect(!retransmission.isEmpty, "\(resent.count) datagrams")
        // RFC 4588: the original sequence number first, then the original payload.
        if let first = retransmission.first { #expect(sequences.contains(UInt16(first[20]) << 8 | UInt16(first[21])), "\(first.prefix(24))") }
        #expect(status()?.nacks == 3)
        // Resends are counted as they leave the pacer, which may spread the three over ticks
        // (the first one arriving ends the wait above): wait up to a second for the rest.
        var retransmitted = status()?.retransmissions ?? 0
        for _ in 0..<100 where retransmitted < 3 {
            usleep(10_000)
            retransmitted = status()?.retransmissions ?? 0
        }
        #expect(retransmitted == 3)
        // The same SRTCP again (a replay), and SRTCP that was never protected (a forgery): refused, not counted.
        peer.send(nack)
        var forged = Self.feedback(type: 205, format: 1, media: videoSSRC, [0, 1, 0xFF, 0xFF])
        forged += [0x80, 0, 0, 1] + [UInt8](repeating: 0xAB, count: 10)
        peer.send(forged)
        usleep(300_000)
        #expect(status()?.nacks == 3)

        // Feedback that lies: a NACK for every sequence number there is, a REMB of exabits,
        // transport-wide feedback that says nothing ever arrived.
        for start in stride(from: 0, to: 65536, by: 17 * 250) {
            var fci: [UInt8] = []
            for pid in stride(from: start, to: min(65536, start + 17 * 250), by: 17) { fci += [UInt8(pid >> 8), UInt8(pid & 0xFF), 0xFF, 0xFF] }
            peer.send(try outbound.protect(rtcp: Self.feedback(type: 205, format: 1, media: videoSSRC, fci)))
        }
        let remb: [UInt8] = Array("REMB".utf8) + [1, 0xFF, 0xFF, 0xFF] + [UInt8(videoSSRC >> 24), UInt8(videoSSRC >> 16 & 0xFF), UInt8(videoSSRC >> 8 & 0xFF), UInt8(videoSSRC & 0xFF)]
        peer.send(try outbound.protect(rtcp: Self.feedback(type: 206, format: 15, media: 0, remb)))
        // Base sequence 1, 200 packets, reference time 0, feedback count 1; one run-length chunk "not received" × 200.
        let lossReport: [UInt8] = [0, 1, 0, 200, 0, 0, 0, 1, 0x00, 0xC8, 0, 0]
        peer.send(try outbound.protect(rtcp: Self.feedback(type: 205, format: 15, media: videoSSRC, lossReport)))
        usleep(500_000)
        let lied = try #require(status())
        #expect(lied.retransmissions - retransmitted <= RetransmissionHistory.capacity * RetransmissionHistory.maximumResends,
                "a NACK for everything resends at most the history: \(lied.retransmissions)")
        #expect((lied.receiverEstimate ?? 0) <= RTCPFeedback.maximumBitRate)

        // A DTLS handshake flood from the viewer's own address, and datagrams from strangers.
        let stranger = try Peer(group: group, port: port)
        for _ in 0..<200 {
            for datagram in try DTLSSession(identity: browser, client: true).start() { peer.send(datagram); stranger.send(datagram) }
            stranger.send([0x80, 96] + [UInt8](repeating: 0, count: 100))
        }
        #expect(stranger.collect(seconds: 0.5) { !$0.isEmpty }.isEmpty, "strangers get no answer")
        _ = peer.take()
        // The session still plays: media goes on arriving and decrypting.
        early = []
        let after = media(seconds: 3)
        #expect(after.count >= 20, "media after the attacks: \(after.count) packets")
        #expect(status()?.state == "playing")

        // Caps: 4 sessions from one address, 6 in all.
        var extra: [(id: String, answer: String)] = []
        for index in 0..<3 {
            extra.append(try service.offer(Self.offer(ufrag: "x\(index)xx", password: "browser-password-0123456789", fingerprint: browser.fingerprint),
                                           path: "live/attack_1", pinned: false, from: "127.0.0.1"))
        }
        #expect(throws: WebRTCService.Refusal.self) {
            _ = try service.offer(Self.offer(ufrag: "over", password: "browser-password-0123456789", fingerprint: browser.fingerprint),
                                  path: "live/attack_1", pinned: false, from: "127.0.0.1")
        }
        // One of them finishes ICE and never DTLS; the others never finish ICE: all end after the setup timeout.
        let iceOnly = try Peer(group: group, port: port)
        let iceUfrag = try #require(Self.line("a=ice-ufrag:", in: extra[0].answer))
        let icePassword = try #require(Self.line("a=ice-pwd:", in: extra[0].answer))
        iceOnly.send(Self.binding(username: "\(iceUfrag):x0xx", key: icePassword))
        #expect(iceOnly.collect(seconds: 2) { !$0.isEmpty }.contains { (try? STUNMessage.parse($0).message.messageClass) == .successResponse })
        // (The answer leaves before the session notes the address: wait a moment for it.)
        var phase: String?
        for _ in 0..<100 where phase != "dtls" {
            phase = service.viewers.first { $0.id == extra[0].id }?.state
            usleep(10_000)
        }
        #expect(phase == "dtls")
        #expect(service.viewers.count == 4)
        let ended = DispatchTime.now().uptimeNanoseconds + 6_000_000_000
        while service.viewers.count > 1, DispatchTime.now().uptimeNanoseconds < ended {
            // The playing viewer keeps its consent fresh, as a browser does.
            peer.send(Self.binding(username: "\(nodeUfrag):brws", key: nodePassword, nominate: false))
            usleep(200_000)
        }
        #expect(service.viewers.map(\.id) == [id], "sessions that never finished ICE or DTLS ended")
        // Their room is free again.
        #expect(throws: Never.self) {
            _ = try service.offer(Self.offer(ufrag: "again", password: "browser-password-0123456789", fingerprint: browser.fingerprint),
                                  path: "live/attack_1", pinned: false, from: "127.0.0.1")
        }
    }
}
