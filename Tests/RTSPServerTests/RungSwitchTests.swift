import Foundation
import LiveNode
import MediaCore
import NIOCore
import RTSP
@testable import RTSPServer
import TestSupport
import Testing

/// A player moved between rungs of its ladder keeps one RTP session per track: the same SSRC,
/// sequence numbers without a gap, timestamps on the shared timeline, SPS/PPS in-band before the
/// target's IDR; and ffmpeg decodes across every switch, two rungs at a time included. Real
/// players moved by their links, GStreamer among them, are `ShapedLinkTests`'.
@Suite(.serialized) struct RungSwitchTests {
    /// What the switching thread reports, read by the test's thread.
    final class Outcomes: @unchecked Sendable {
        // @unchecked: `values` is only touched under `lock`.
        private let lock = NSLock()
        private var values: [Bool] = []
        func append(_ value: Bool) { lock.withLock { values.append(value) } }
        func set(_ all: [Bool]) { lock.withLock { values = all } }
        var all: [Bool] { lock.withLock { values } }
    }

    static func publishLadder() throws -> (LiveTestNode, FFmpegPublisher) {
        let node = try LiveTestNode()
        let publisher = try FFmpegPublisher(url: node.publishURL("live/stream1_1"), transport: "tcp", seconds: 40)
        try #require(node.waitUntilPlayable(["live/stream1_1", "live/stream1_2", "live/stream1_3"], timeout: 20), "\(publisher.errorText)")
        return (node, publisher)
    }

    /// Waits for the one player of `path` and switches it to each of `targets` in turn, `every` seconds apart.
    static func switchPlayer(_ node: LiveTestNode, of path: String, through targets: [String], every seconds: Double) -> [Bool] {
        var session: String?
        _ = waitUntil(timeout: 10) {
            session = node.service.playerSessions(of: path).first
            return session != nil
        }
        guard let session else { return [] }
        return targets.map { target in
            Thread.sleep(forTimeInterval: seconds)
            return node.service.switchPlayer(session: session, to: target)
        }
    }

    @Test func aSwitchedPlayerKeepsItsRTPSession() throws {
        let (node, publisher) = try Self.publishLadder()
        defer { publisher.stop() }
        // Pinned (`?abr=off`): only this test moves the player.
        let url = node.url("live/stream1_2")
        let client = try RawRTSPClient(port: node.port)
        client.send("SETUP \(url)/trackID=0?abr=off RTSP/1.0\r\nCSeq: 1\r\nTransport: RTP/AVP/TCP;unicast;interleaved=0-1\r\n\r\n")
        let setup = client.receiveResponse()
        let session = RawRTSPClient.sessionID(in: setup)
        client.send("PLAY \(url) RTSP/1.0\r\nCSeq: 2\r\nSession: \(session)\r\n\r\n")
        let switched = Outcomes()
        let switcher = Thread {
            Thread.sleep(forTimeInterval: 3)
            switched.append(node.service.switchPlayer(session: session, to: "live/stream1_3"))
            Thread.sleep(forTimeInterval: 3)
            switched.append(node.service.switchPlayer(session: session, to: "live/stream1_1"))
        }
        switcher.start()
        let bytes = client.receiveRaw(for: 10)
        #expect(switched.all == [true, true])

        var buffer = ByteBuffer(bytes: bytes)
        var parser = RTSPMessageParser()
        var packets: [RTPPacket] = []
        while let item = try? parser.parse(&buffer) {
            if case let .interleaved(0, payload) = item, let packet = try? RTPPacket(parsing: payload) { packets.append(packet) }
        }
        try #require(packets.count > 200, "\(packets.count) packets")
        #expect(Set(packets.map(\.ssrc)).count == 1, "one SSRC across the switches")
        let gaps = zip(packets, packets.dropFirst()).filter { $1.sequenceNumber != $0.sequenceNumber &+ 1 }
        #expect(gaps.isEmpty, "sequence gaps: \(gaps.prefix(3).map { ($0.0.sequenceNumber, $0.1.sequenceNumber) })")
        let backwards = zip(packets, packets.dropFirst()).filter { Int32(bitPattern: $1.timestamp &- $0.timestamp) < 0 }
        #expect(backwards.isEmpty, "timestamps going back: \(backwards.count)")
        // The parameter sets of each rung come in-band: three picture sizes, each SPS before an IDR.
        var depacketizer = H264Depacketizer()
        var sizes: [String] = []
        for packet in packets {
            for unit in depacketizer.push(packet) where unit.containsIDR {
                if let sps = unit.nalUnits.first(where: { ($0.first ?? 0) & 0x1F == 7 }), let parsed = H264SPS(sps) {
                    let size = "\(parsed.width)x\(parsed.height)"
                    if sizes.last != size { sizes.append(size) }
                }
            }
        }
        #expect(sizes == ["854x480", "640x360", "1280x720"], "\(sizes)")
    }

    /// ffmpeg records a player moved down two rungs and back up; every picture decodes.
    @Test func ffmpegDecodesAcrossEverySwitch() throws {
        let (node, publisher) = try Self.publishLadder()
        defer { publisher.stop() }
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("switch-\(UUID().uuidString.prefix(8)).mkv").path
        defer { try? FileManager.default.removeItem(atPath: file) }
        let switched = Outcomes()
        let switcher = Thread { switched.set(Self.switchPlayer(node, of: "live/stream1_1", through: ["live/stream1_3", "live/stream1_2", "live/stream1_1"], every: 3)) }
        switcher.start()
        let recorded = try runProcess("ffmpeg", ["-hide_banner", "-loglevel", "error", "-rtsp_transport", "tcp", "-i", node.url("live/stream1_1") + "?abr=off",
                                                 "-t", "12", "-c", "copy", "-y", file], timeout: 40)
        #expect(recorded.status == 0, "\(recorded.stderr)")
        _ = waitUntil(timeout: 5) { switched.all.count == 3 }
        #expect(switched.all == [true, true, true])
        // ffprobe decodes every picture and reports what it could not decode.
        let frames = try runProcess("ffprobe", ["-v", "error", "-select_streams", "v", "-show_entries", "frame=width,height", "-of", "csv=p=0", file])
        #expect(frames.status == 0 && frames.stderr.isEmpty, "decoder errors: \(frames.stderr.prefix(800))")
        let sizes = frames.stdout.split(separator: "\n").map { $0.split(separator: ",").prefix(2).joined(separator: "x") }
            .reduce(into: [String]()) { if $0.last != $1 { $0.append($1) } }
        #expect(sizes == ["1280x720", "640x360", "854x480", "1280x720"], "\(sizes)")
        #expect(frames.stdout.split(separator: "\n").count >= 300, "pictures decoded")
    }
}
