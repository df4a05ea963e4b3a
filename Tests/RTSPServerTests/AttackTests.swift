import Foundation
import LiveNode
import MediaCore
import NIOCore
import RTSP
@testable import RTSPServer
import TestSupport
import Testing

/// The node against an attacker and against what ordinary encoders do every day (issue 22): each
/// test runs the attack on loopback, with bounded loops, while checking that a legitimate publish
/// or play goes on and that sessions, connections and descriptors come back afterwards.
@Suite(.serialized) struct AttackTests {
    static let credentials = RawRTSPClient.basic("user", "pass")


    // MARK: 1. UDP for everyone

    /// A player's `client_port=0-1` made the first send fail, which closed the node's one shared
    /// RTP socket: every UDP publisher and player lost UDP until a restart. Nonsense ports are now
    /// refused at SETUP, and should the shared socket close anyway, it is bound again.
    @Test func nonsenseClientPortsAreRefusedAndTheSharedUDPSocketOutlivesAClose() throws {
        let node = try TestNode()
        let clip = try H264Clip(width: 320, height: 240, seconds: 2, keyframeInterval: 15)
        let peer = try UDPPeer()
        let publisher = try RawRTSPClient(port: node.port)
        let started = publisher.startPublishingOverUDP(node.url("live/udp_1"), sdp: clip.sdp, peer: peer)
        #expect(started.statuses == [200, 200, 200] && started.serverPort > 0)
        let streamer = RTPStreamer.datagrams(peer, serverPort: started.serverPort)
        streamer.stream(clip, count: 30)
        try #require(node.waitUntilPlayable("live/udp_1"))

        for ports in ["0-1", "1-2", "80-81", "5001-5002", "5000-5003"] {
            let attacker = try RawRTSPClient(port: node.port)
            attacker.send("SETUP \(node.url("live/udp_1"))/trackID=0 RTSP/1.0\r\nCSeq: 1\r\nTransport: RTP/AVP;unicast;client_port=\(ports)\r\n\r\n")
            let answer = attacker.receiveResponse()
            #expect(answer.hasPrefix("RTSP/1.0 461"), "client_port=\(ports): \(answer)")
        }
        // Whatever closes the shared socket (a firewall's EPERM on one send), UDP comes back on the same ports.
        let before = try #require(node.service.udpChannels)
        try before.rtp.close().wait()
        #expect(waitUntil(timeout: 10) { node.service.udpChannels.map { $0.rtp !== before.rtp && $0.rtp.isActive } ?? false })
        let written = node.registry.existingStream("live/udp_1")?.framesWritten ?? 0
        streamer.stream(clip, from: 30, count: 30)
        #expect(waitUntil(timeout: 3) { (node.registry.existingStream("live/udp_1")?.framesWritten ?? 0) > written + 20 },
                "the UDP publish must go on after the socket was bound again")
        #expect(publisher.keepAlive(node.url("live/udp_1"), session: started.session) == 200)
    }

    // MARK: 2. Forged datagrams

    /// A datagram from the publisher's address with an SSRC it never used, carrying an oversized
    /// SPS, stopped the publish. Now only the publisher's SSRC in sequence gets through, and one
    /// refused packet even with its SSRC does not end a session its peer goes on feeding.
    @Test func forgedDatagramsDoNotStopAUDPPublish() throws {
        let node = try TestNode(configure: { $0.maximumPublishPixels = 640 * 480 })
        let clip = try H264Clip(width: 320, height: 240, seconds: 2, keyframeInterval: 15)
        let big = try AuthenticationAndLimitsTests.oversizedParameterSets()
        let peer = try UDPPeer()
        let publisher = try RawRTSPClient(port: node.port)
        let started = publisher.startPublishingOverUDP(node.url("live/forged_1"), sdp: clip.sdp, peer: peer)
        try #require(started.statuses == [200, 200, 200])
        let streamer = RTPStreamer.datagrams(peer, serverPort: started.serverPort, ssrc: 0x1111)
        streamer.stream(clip, count: 20)
        try #require(node.waitUntilPlayable("live/forged_1"))

        let idr: [UInt8] = [0x65, 0x88, 0x84, 0x00]
        // Another SSRC, then the right SSRC far out of sequence, then one in sequence.
        let foreign = RTPStreamer.datagrams(peer, serverPort: started.serverPort, ssrc: 0x2222)
        for _ in 0..<5 { foreign.sendPicture([big.sps, big.pps, idr], timestamp: 1) }
        var outOfSequence = H264Packetizer(ssrc: 0x1111, initialSequence: streamer.sequence &+ 20_000)
        for packet in outOfSequence.packetize([big.sps[...], big.pps[...], idr[...]], timestamp: 2) {
            var buffer = ByteBuffer()
            packet.write(to: &buffer)
            peer.send(Array(buffer.readableBytesView), toPort: started.serverPort)
        }
        streamer.sendPicture([big.sps, big.pps, idr], timestamp: streamer.timestampBase &+ 20 * 3000)
        let written = node.registry.existingStream("live/forged_1")?.framesWritten ?? 0
        streamer.stream(clip, from: 30, count: 45)
        #expect(publisher.keepAlive(node.url("live/forged_1"), session: started.session) == 200, "the publish must go on")
        #expect((node.registry.existingStream("live/forged_1")?.framesWritten ?? 0) > written + 30)
        #expect(node.registry.existingStream("live/forged_1")?.video?.width == 320)
    }

    // MARK: 3. Session quotas

    /// 300 SETUPs on one connection took every player slot. Now one connection holds at most a
    /// few sessions and one address a share; a player elsewhere is still served.
    @Test func oneConnectionOrAddressCannotHoldEveryPlayerSession() throws {
        let node = try TestNode(configure: {
            $0.maximumSessions = 16
            $0.maximumSessionsPerAddress = 8
        })
        let publisher = try FFmpegPublisher(url: node.url("live/quota_1"), transport: "tcp", seconds: 30)
        try #require(node.waitUntilPlayable("live/quota_1"), "\(publisher.errorText)")
        let setup = "SETUP \(node.url("live/quota_1"))/trackID=0 RTSP/1.0\r\nTransport: RTP/AVP/TCP;unicast;interleaved=0-1\r\n"

        var hogs: [RawRTSPClient] = []
        var statuses: [Int?] = []
        for connection in 0..<4 {
            let hog = try RawRTSPClient(port: node.port)
            for request in 0..<(connection == 0 ? 300 : 10) {
                hog.send(setup + "CSeq: \(request + 1)\r\n\r\n")
                statuses.append(hog.status())
            }
            hogs.append(hog)
        }
        // The publisher (ffmpeg, on this address too) holds one of the address's 8.
        #expect(statuses.filter { $0 == 200 }.count == 7, "one address holds at most 8 sessions")
        #expect(node.service.sessionCount == 8)
        // Another client (another address on loopback) plays.
        let viewer = try RawRTSPClient(port: node.port, sourceAddress: "127.0.0.2")
        viewer.send(setup + "CSeq: 1\r\n\r\n")
        #expect(viewer.status() == 200)
        hogs.removeAll()
        #expect(waitUntil(timeout: 10) { node.service.sessionCount == 2 }, "closed connections release their sessions")
    }

    // MARK: 4. Slots released on every end

    /// A UDP publish refused for an oversized in-band SPS ended but stayed in the session table;
    /// 64 of them locked every publisher out. With one publisher slot, two refused publishes in a
    /// row are followed by one that gets in.
    @Test func refusedUDPPublishesReleaseTheirSlots() throws {
        let node = try TestNode(configure: {
            $0.maximumPublishers = 1
            $0.maximumPublishPixels = 640 * 480
        })
        let clip = try H264Clip(width: 320, height: 240, seconds: 1, keyframeInterval: 15)
        let big = try AuthenticationAndLimitsTests.oversizedParameterSets()
        for attempt in 0..<2 {
            let peer = try UDPPeer()
            let publisher = try RawRTSPClient(port: node.port)
            let started = publisher.startPublishingOverUDP(node.url("live/refused_\(attempt)"), sdp: clip.sdp, peer: peer)
            try #require(started.statuses == [200, 200, 200], "attempt \(attempt)")
            let streamer = RTPStreamer.datagrams(peer, serverPort: started.serverPort)
            // The publisher really switched: it keeps sending the refused picture size.
            for index in 0..<30 where node.service.sessionCount > 0 {
                streamer.sendPicture([big.sps, big.pps, [0x65, 0x88, 0x84, 0x00]], timestamp: UInt32(index * 9000))
                Thread.sleep(forTimeInterval: 0.1)
            }
            #expect(waitUntil(timeout: 10) { node.service.sessionCount == 0 }, "attempt \(attempt) must leave the table")
        }
        let next = try RawRTSPClient(port: node.port)
        #expect(next.startPublishing(node.url("live/accepted_1")).statuses == [200, 200, 200])
    }

    // MARK: 5. Publishers that pause

    /// A publisher that sent nothing for longer than the media timeout (a covered camera, a
    /// backgrounded app) and then sent again on the same session fed a detached source; a
    /// reconnect got 403. Now it resumes the job on its session, and a new connection with the
    /// same credentials may take over from its own silent session.
    @Test func aPublisherThatPausesResumesOnItsSessionOrTakesItOver() throws {
        let node = try LiveTestNode()
        let clip = try H264Clip(width: 1280, height: 720, seconds: 2, keyframeInterval: 30)
        let first = try RawRTSPClient(port: node.port)
        let started = first.startPublishing(node.url("live/stream1_1"), authorization: Self.credentials)
        try #require(started.statuses == [200, 200, 200])
        let streamer = RTPStreamer.interleaved(first)
        streamer.stream(clip, count: 60)
        try #require(node.waitUntilPlayable(["live/stream1_1", "live/stream1_3"]))
        let job = try #require(node.node.job("live/stream1"))

        // Silent past the media timeout, session kept.
        #expect(waitUntil(timeout: 9) { job.state == .interrupted })
        #expect(first.keepAlive(node.url("live/stream1_1"), session: started.session) == 200)
        let written = node.registry.existingStream("live/stream1_3")?.framesWritten ?? 0
        streamer.stream(clip, from: 60, count: 60)
        #expect(job.state == .running, "sending again on the same session resumes the job")
        #expect(job.events.contains { $0.kind == "resumed" })
        #expect(waitUntil(timeout: 5) { (node.registry.existingStream("live/stream1_3")?.framesWritten ?? 0) > written + 20 })

        // Silent again; the app reconnects on a new connection before the old session times out.
        #expect(waitUntil(timeout: 9) { job.state == .interrupted })
        let second = try RawRTSPClient(port: node.port)
        #expect(second.startPublishing(node.url("live/stream1_1"), authorization: Self.credentials).statuses == [200, 200, 200])
        RTPStreamer.interleaved(second, ssrc: 0x5555).stream(clip, count: 45)
        #expect(job.state == .running)
        #expect(first.status() == nil, "the stale session's connection is closed")
        // Someone without the credentials takes nothing over.
        let intruder = try RawRTSPClient(port: node.port)
        #expect(intruder.announce(node.url("live/stream1_1")).hasPrefix("RTSP/1.0 401"))
    }

    // MARK: 6. Credentials rotation

    /// Deleting a provision left its publisher connected with the old password; posting it again
    /// with a new one refused the new publisher. Now deleting ends the publisher and players and
    /// frees the streams, and only the new password publishes.
    @Test func deletingAProvisionEndsItsPublisherAndFreesItsStreams() throws {
        let node = try LiveTestNode()
        let ladder = try #require(node.node.ladder("live/stream1"))
        let clip = try H264Clip(width: 1280, height: 720, seconds: 2, keyframeInterval: 30)
        let publisher = try RawRTSPClient(port: node.port)
        try #require(publisher.startPublishing(node.url("live/stream1_1"), authorization: Self.credentials).statuses == [200, 200, 200])
        RTPStreamer.interleaved(publisher).stream(clip, count: 45)
        try #require(node.waitUntilPlayable(["live/stream1_3"]))

        try node.node.removeProvision("live/stream1")
        #expect(publisher.status() == nil, "the old publisher's connection is closed")
        for variant in ladder.variants { #expect(node.registry.existingStream(variant.streamGuid) == nil, "\(variant.streamGuid)") }
        #expect(node.service.sessionCount == 0)

        var rotated = ladder
        rotated.publisherCredentials = StreamCredentials(username: "user", password: "rotated")
        try node.node.provision(rotated)
        #expect(try RawRTSPClient(port: node.port).announce(node.url("live/stream1_1"), authorization: Self.credentials).hasPrefix("RTSP/1.0 401"))
        let renewed = try RawRTSPClient(port: node.port)
        #expect(renewed.startPublishing(node.url("live/stream1_1"), authorization: RawRTSPClient.basic("user", "rotated")).statuses == [200, 200, 200])
    }

    // MARK: 7. Timestamp jumps

    /// An encoder restarted with a new timestamp base (a jump backwards) froze live HLS and grew
    /// memory for as long as the timestamps stayed behind. Now the jump starts a new timeline: the
    /// variants' playlists mark a discontinuity and go on growing.
    @Test func aBackwardsTimestampJumpStartsANewTimelineAndHLSGoesOn() throws {
        let node = try LiveTestNode()
        let clip = try H264Clip(width: 1280, height: 720, seconds: 2, keyframeInterval: 30)
        let publisher = try RawRTSPClient(port: node.port)
        try #require(publisher.startPublishing(node.url("live/stream1_1"), authorization: Self.credentials).statuses == [200, 200, 200])
        let streamer = RTPStreamer.interleaved(publisher)
        streamer.stream(clip, count: 150)
        let playlist = node.hls("stream1_3/index.m3u8")
        func segments() -> Int { ((try? String(contentsOf: playlist, encoding: .utf8)) ?? "").components(separatedBy: "#EXTINF").count - 1 }
        let before = segments()
        try #require(before >= 1, "HLS before the jump")
        streamer.timestampBase &-= 90000 * 600  // ten minutes back
        streamer.stream(clip, from: 150, count: 180)
        #expect(waitUntil(timeout: 5) { segments() >= before + 2 }, "HLS must go on after the jump (had \(before), now \(segments()))")
        let text = (try? String(contentsOf: playlist, encoding: .utf8)) ?? ""
        #expect(text.contains("#EXT-X-DISCONTINUITY"), "\(text)")
        #expect(node.node.job("live/stream1")?.state == .running)
    }

    // MARK: 9. Relays

    /// With `--allow-unprovisioned`, every publish to a new path left its stream and GOP cache in
    /// the registry for good. Ended relays now leave it.
    @Test func endedRelaysLeaveTheRegistry() throws {
        let node = try LiveTestNode(allowUnprovisioned: true)
        let baseline = node.registry.count
        let clip = try H264Clip(width: 320, height: 240, seconds: 1, keyframeInterval: 15)
        for index in 0..<5 {
            let publisher = try RawRTSPClient(port: node.port)
            let started = publisher.startPublishing(node.url("relay/path\(index)"))
            try #require(started.statuses == [200, 200, 200])
            RTPStreamer.interleaved(publisher).stream(clip, count: 16, pace: false)
            #expect(waitUntil(timeout: 3) { node.registry.existingStream("relay/path\(index)")?.framesWritten ?? 0 > 0 })
            publisher.send("TEARDOWN \(node.url("relay/path\(index)")) RTSP/1.0\r\nCSeq: 9\r\nSession: \(started.session)\r\n\r\n")
            #expect(publisher.status() == 200)
        }
        #expect(waitUntil(timeout: 10) { node.registry.count == baseline }, "\(node.registry.paths)")
    }

    // MARK: Descriptors

    /// After connections of every kind come and go, the node holds no more descriptors than before.
    @Test func descriptorsComeBackAfterConnectionsClose() throws {
        let node = try TestNode()
        let baseline = openDescriptorCount()
        var clients: [RawRTSPClient] = []
        for _ in 0..<50 { clients.append(try RawRTSPClient(port: node.port)) }
        for client in clients { client.send("OPTIONS * RTSP/1.0\r\nCSeq: 1\r\n\r\n") }
        for client in clients { #expect(client.status() == 200) }
        clients.removeAll()
        #expect(waitUntil(timeout: 10) { node.service.connectionCount == 0 && openDescriptorCount() <= baseline })
    }

    // MARK: Round three

    /// A publisher of another stream named a live UDP publisher's client ports in its SETUP: its
    /// route replaced the victim's, whose media then went out as the attacker's stream, and never
    /// came back after the attacker's TEARDOWN. Now that SETUP is refused (461), repeated SETUPs
    /// add no routes, and the victim's publish goes on throughout.
    @Test func aPublisherCannotTakeAnotherSessionsUDPRoute() throws {
        let node = try TestNode()
        let clip = try H264Clip(width: 320, height: 240, seconds: 2, keyframeInterval: 15)
        let peer = try UDPPeer()
        let victim = try RawRTSPClient(port: node.port)
        let started = victim.startPublishingOverUDP(node.url("live/victim_1"), sdp: clip.sdp, peer: peer)
        try #require(started.statuses == [200, 200, 200])
        let streamer = RTPStreamer.datagrams(peer, serverPort: started.serverPort)
        streamer.stream(clip, count: 20)
        try #require(node.waitUntilPlayable("live/victim_1"))

        let attacker = try RawRTSPClient(port: node.port)
        let announced = attacker.announce(node.url("live/attacker_1"), sdp: clip.sdp)
        #expect(announced.hasPrefix("RTSP/1.0 200"), "\(announced)")
        let session = RawRTSPClient.sessionID(in: announced)
        for cseq in 2..<6 {
            attacker.send("SETUP \(node.url("live/attacker_1"))/streamid=0 RTSP/1.0\r\nCSeq: \(cseq)\r\nSession: \(session)\r\n"
                          + "Transport: RTP/AVP;unicast;client_port=\(peer.rtpPort)-\(peer.rtpPort + 1);mode=record\r\n\r\n")
            let answer = attacker.receiveResponse()
            #expect(answer.hasPrefix("RTSP/1.0 461") && answer.contains("in use by another session"), "\(answer)")
        }
        attacker.send("RECORD \(node.url("live/attacker_1")) RTSP/1.0\r\nCSeq: 9\r\nSession: \(session)\r\n\r\n")
        _ = attacker.receiveResponse()
        let written = node.registry.existingStream("live/victim_1")?.framesWritten ?? 0
        streamer.stream(clip, from: 20, count: 20)
        #expect(waitUntil(timeout: 5) { (node.registry.existingStream("live/victim_1")?.framesWritten ?? 0) >= written + 15 },
                "the victim's media must go on into its own stream")
        #expect((node.registry.existingStream("live/attacker_1")?.framesWritten ?? 0) == 0, "nothing of the victim's may reach the attacker's stream")
        attacker.send("TEARDOWN \(node.url("live/attacker_1")) RTSP/1.0\r\nCSeq: 10\r\nSession: \(session)\r\n\r\n")
        _ = attacker.receiveResponse()
        let after = node.registry.existingStream("live/victim_1")?.framesWritten ?? 0
        streamer.stream(clip, from: 40, count: 20)
        #expect(waitUntil(timeout: 5) { (node.registry.existingStream("live/victim_1")?.framesWritten ?? 0) >= after + 15 },
                "the victim goes on after the attacker's TEARDOWN")
        #expect(victim.keepAlive(node.url("live/victim_1"), session: started.session) == 200)
    }
}
