import Foundation
import Synchronization
import NIOCore
import RTSP
@testable import RTSPServer
import TestSupport
import Testing

/// What players send back (or do not) can move only themselves. Beside an honest adaptive player
/// on a clean link: a UDP player that floods forged receiver reports (100 % loss, an LSR the node
/// never sent, sequence numbers never sent, a report every millisecond), a UDP player that sends
/// no RTCP at all, and a TCP player that never reads. The honest player is never moved; the
/// forger goes down once per rung and stays; the silent one stays where it asked to be; the one
/// that does not read ends on the lowest rung, and what the node holds for it stays bounded.
@Suite(.serialized) struct PlayerFeedbackTests {
    /// SETUP over UDP to `peer`'s ports and PLAY; returns the session and the server's RTCP port.
    static func playOverUDP(_ node: LiveTestNode, _ path: String, peer: UDPPeer) throws -> (client: RawRTSPClient, session: String, serverRTCP: Int) {
        let client = try RawRTSPClient(port: node.port)
        let url = node.url(path)
        client.send("SETUP \(url)/trackID=0 RTSP/1.0\r\nCSeq: 1\r\nTransport: RTP/AVP;unicast;client_port=\(peer.rtpPort)-\(peer.rtpPort + 1)\r\n\r\n")
        let setup = client.receiveResponse()
        let session = RawRTSPClient.sessionID(in: setup)
        let ports = try #require(setup.firstMatch(of: /server_port=(\d+)-(\d+)/), "\(setup)")
        client.send("PLAY \(url) RTSP/1.0\r\nCSeq: 2\r\nSession: \(session)\r\n\r\n")
        _ = client.receiveResponse()
        return (client, session, Int(ports.output.2)!)
    }

    /// Reads everything a player gets, on its own thread, until stopped.
    final class Reading: @unchecked Sendable {
        // @unchecked: the client is only used by the thread; `stopped` is atomic.
        private let client: RawRTSPClient
        private let stopped = Atomic<Bool>(false)

        init(_ client: RawRTSPClient) {
            self.client = client
            Thread { [self] in
                while !stopped.load(ordering: .relaxed) { _ = self.client.receiveRaw(for: 0.1) }
            }.start()
        }

        func stop() { stopped.store(true, ordering: .relaxed) }
    }

    static func player(_ node: LiveTestNode, _ session: String) -> PlayerStatus? {
        node.service.players().first { $0.session == session }
    }

    @Test func forgedSilentAndStalledPlayersMoveOnlyThemselves() throws {
        let (node, publisher) = try RungSwitchTests.publishLadder()
        defer { publisher.stop() }

        // The honest player: TCP, reading everything.
        let honest = try RawRTSPClient(port: node.port)
        honest.send("SETUP \(node.url("live/stream1_1"))/trackID=0 RTSP/1.0\r\nCSeq: 1\r\nTransport: RTP/AVP/TCP;unicast;interleaved=0-1\r\n\r\n")
        let honestSession = RawRTSPClient.sessionID(in: honest.receiveResponse())
        honest.send("PLAY \(node.url("live/stream1_1")) RTSP/1.0\r\nCSeq: 2\r\nSession: \(honestSession)\r\n\r\n")
        let reading = Reading(honest)
        defer { reading.stop() }

        // The one that never reads, with a small receive buffer so the node's queue fills.
        let stalled = try RawRTSPClient(port: node.port, receiveBuffer: 16 * 1024)
        stalled.send("SETUP \(node.url("live/stream1_1"))/trackID=0 RTSP/1.0\r\nCSeq: 1\r\nTransport: RTP/AVP/TCP;unicast;interleaved=0-1\r\n\r\n")
        let stalledSession = RawRTSPClient.sessionID(in: stalled.receiveResponse())
        stalled.send("PLAY \(node.url("live/stream1_1")) RTSP/1.0\r\nCSeq: 2\r\nSession: \(stalledSession)\r\n\r\n")

        let silentPeer = try UDPPeer()
        let silent = try Self.playOverUDP(node, "live/stream1_1", peer: silentPeer)
        let forgerPeer = try UDPPeer()
        let forger = try Self.playOverUDP(node, "live/stream1_1", peer: forgerPeer)
        let first = try #require(forgerPeer.receiveRTP(timeout: 10), "no RTP to the UDP player")
        let ssrc = UInt32(first[8]) << 24 | UInt32(first[9]) << 16 | UInt32(first[10]) << 8 | UInt32(first[11])

        // Eight seconds: the honest player reads all the while, the forger reports every millisecond.
        let deadline = Date().addingTimeInterval(8)
        var generator = SystemRandomNumberGenerator()
        var sent = 0
        while Date() < deadline {
            var highest = UInt32(first[2]) << 8 | UInt32(first[3])
            while let packet = forgerPeer.receiveRTP(timeout: 0) { highest = UInt32(packet[2]) << 8 | UInt32(packet[3]) }
            _ = silentPeer.receiveRTP(timeout: 0)
            let lie = sent % 3 == 0 ? UInt32.random(in: 0...UInt32.max, using: &generator) : highest
            var report = ByteBuffer()
            RTCPPacket.receiverReport(ssrc: 0xBAD, blocks: [.init(ssrc: ssrc, fractionLost: 255, cumulativeLost: UInt32(sent) & 0xFF_FFFF,
                                                                 highestSequence: lie, jitter: .max, lastSenderReport: 0xDEAD_BEEF,
                                                                 delaySinceLastSenderReport: 1)]).write(to: &report)
            forgerPeer.sendRTCP(Array(report.readableBytesView), toPort: forger.serverRTCP)
            sent += 1
            Thread.sleep(forTimeInterval: 0.001)
        }
        #expect(sent > 2000)
        _ = waitUntil(timeout: 2) { false }

        let honestNow = try #require(Self.player(node, honestSession))
        #expect(honestNow.level == 1 && honestNow.switches == 0, "the honest player was moved: \(honestNow)")
        let forgerNow = try #require(Self.player(node, forger.session))
        #expect(forgerNow.level == 3 && forgerNow.switches <= 2, "the forger: \(forgerNow)")
        let silentNow = try #require(Self.player(node, silent.session))
        #expect(silentNow.level == 1 && silentNow.switches == 0 && silentNow.transport == "udp", "the silent player: \(silentNow)")
        let stalledNow = try #require(Self.player(node, stalledSession))
        #expect(stalledNow.level == 3, "the player that does not read: \(stalledNow)")
        // What the node holds for the stalled player: its backlog limit and a picture at most, however long it stalls.
        let held = try #require(node.service.sessions.session(stalledSession)?.state.withLock { $0.subscriber?.heldBytes })
        #expect(held <= node.service.configuration.playerBacklogLimit + 512 * 1024, "held \(held) bytes")
        withExtendedLifetime((silent.client, forger.client, stalled)) {}
    }
}
