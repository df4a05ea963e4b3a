import Foundation
import Logging
import NIOCore
import RTMP
import RTMPServer
import RTSPServer
import TestSupport
import Testing

/// Round three's RTMP attacks against a live RTMP listener, with ffmpeg publishing beside them:
/// no credentials are needed for any of these, so each must cost the node a small multiple of
/// what the attacker sends, end on its own, and leave the real publisher untouched.
@Suite(.serialized) struct RTMPAttackTests {
    final class Listener {
        let node: TestNode
        let rtmp: RTMPService
        let port: Int

        init() throws {
            node = try TestNode()
            var configuration = RTMPService.Configuration()
            configuration.port = 0
            configuration.idleTimeout = 3
            configuration.publishDeadline = 6
            var logger = Logger(label: "test.rtmp")
            logger.logLevel = .error
            rtmp = RTMPService(configuration: configuration, publishers: node.registry.publishers, policy: RelayEverything(registry: node.registry), logger: logger)
            port = try rtmp.start()
        }

        deinit { rtmp.shutdown() }
    }

    /// C0+C1 and C2 as a plain client sends them.
    static let handshake: [UInt8] = [3] + [UInt8](repeating: 0, count: 1536 * 2)

    static func wire(_ messages: [RTMPMessage]) -> [UInt8] {
        var encoder = RTMPChunkEncoder()
        var buffer = ByteBuffer()
        for message in messages { encoder.encode(message, into: &buffer) }
        return Array(buffer.readableBytesView)
    }

    /// Sends `bytes` without blocking for at most `seconds`; returns how many went out.
    static func push(_ client: RawRTSPClient, _ bytes: [UInt8], seconds: Double) -> Int {
        var sent = 0
        let deadline = Date().addingTimeInterval(seconds)
        while sent < bytes.count, Date() < deadline {
            let count = client.send(Array(bytes[sent..<min(sent + 65_536, bytes.count)]), nonBlocking: true)
            if count > 0 { sent += count } else { Thread.sleep(forTimeInterval: 0.005) }
        }
        return sent
    }

    static func residentBytes() -> Int {
        let fields = (try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8))?.split(separator: " ") ?? []
        return (fields.count > 1 ? Int(fields[1]) ?? 0 : 0) * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    /// 1-byte chunks of one large message (each once copied the whole message so far), a 1-byte
    /// acknowledgement window with 1-byte chunks and a peer that never reads (each chunk once
    /// queued an acknowledgement), and a peer that floods commands with answers and never reads
    /// (it once kept its slot for good): the real publisher's pictures keep coming, the node's
    /// memory stays near where it was, and every attacker is closed once it stops.
    @Test func chunkFloodsAndPeersThatNeverReadCostLittleAndAreClosed() throws {
        let listener = try Listener()
        let publisher = Process()
        publisher.executableURL = URL(fileURLWithPath: "/usr/bin/ffmpeg")
        publisher.arguments = ["-hide_banner", "-loglevel", "error", "-re", "-stream_loop", "-1", "-i", fixture("720p30-h264-aac.mp4"),
                               "-t", "40", "-c", "copy", "-f", "flv", "rtmp://127.0.0.1:\(listener.port)/live/legit_1"]
        publisher.standardInput = FileHandle.nullDevice
        publisher.standardOutput = FileHandle.nullDevice
        publisher.standardError = FileHandle.nullDevice
        try publisher.runDeliveringSignals()
        defer { if publisher.isRunning { publisher.terminate() } }
        try #require(listener.node.waitUntilPlayable("live/legit_1"), "ffmpeg's RTMP publish must start")
        let memoryBefore = Self.residentBytes()

        // The attackers, each with a tiny receive buffer, none of them ever reading.
        let large = 4 * 1024 * 1024
        var copyFlood = Self.handshake + Self.wire([.control(RTMPMessage.Kind.setChunkSize, 1)])
        copyFlood += [0x06, 0, 0, 0, UInt8(large >> 16), UInt8((large >> 8) & 0xFF), UInt8(large & 0xFF), 9, 1, 0, 0, 0, 0x17]
        copyFlood.reserveCapacity(copyFlood.count + 2 * 1_500_000)
        for index in 0..<1_500_000 { copyFlood += [0xC6, UInt8(truncatingIfNeeded: index)] }
        var acknowledgementFlood = Self.handshake + Self.wire([.control(RTMPMessage.Kind.windowAcknowledgementSize, 1),
                                                                .control(RTMPMessage.Kind.setChunkSize, 1)])
        acknowledgementFlood += Self.wire((0..<100_000).map { _ in RTMPMessage(typeID: RTMPMessage.Kind.audio, streamID: 1, payload: ByteBuffer(bytes: [0xAF, 1, 2, 3])) })
        let play = RTMPMessage.command([.string("play"), .number(0), .null, .string("x")], streamID: 1)
        let commandFlood = Self.handshake + Self.wire([RTMPMessage.command([.string("connect"), .number(1), .object([("app", .string("live"))])])]
            + Array(repeating: play, count: 40_000))

        let attackers = try (0..<3).map { _ in try RawRTSPClient(port: listener.port, receiveBuffer: 4096) }
        let framesBefore = listener.node.registry.existingStream("live/legit_1")?.framesWritten ?? 0
        let started = Date()
        let floods = [copyFlood, acknowledgementFlood, commandFlood]
        let group = DispatchGroup()
        let counts = SentCounts()
        // Each client is used by its one sending thread only.
        nonisolated(unsafe) let clients = attackers
        for (index, flood) in floods.enumerated() {
            DispatchQueue.global().async(group: group) {
                counts.set(index, Self.push(clients[index], flood, seconds: 5))
            }
        }
        // The kernel takes megabytes at once on loopback: the node works through them after the
        // sends return, so the publisher is watched over a few seconds from the attack's start.
        // A loop held by an attacker shows as a long stretch with no picture at all (0.6–1.1 s
        // when a connection could parse 256 KiB of 1-byte chunks in one turn; about 0.1 s since,
        // on two cores shared with busy neighbours). A busy machine only thins the pictures out,
        // and ffmpeg's -re makes up for what it could not write once its writes flow again.
        var longestStall = 0.0
        var lastCount = listener.node.registry.existingStream("live/legit_1")?.framesWritten ?? 0
        var lastChange = started
        let watchUntil = started.addingTimeInterval(4)
        while Date() < watchUntil {
            Thread.sleep(forTimeInterval: 0.01)
            let count = listener.node.registry.existingStream("live/legit_1")?.framesWritten ?? 0
            let now = Date()
            if count != lastCount { lastCount = count; lastChange = now }
            longestStall = max(longestStall, now.timeIntervalSince(lastChange))
        }
        group.wait()
        #expect(longestStall < 0.5, "the publisher's pictures stopped for \(longestStall) s beside the attack (sent \(counts.values))")
        // Then ffmpeg catches up with real time (-re sends what it is behind by as soon as its
        // writes flow): what the node took beside the attack was only delayed, never refused. Two
        // seconds after the watch on a quiet machine; the node's work through the attack's
        // megabytes takes longer on a slow one, so the count is read until 16 s from the start.
        // A refused picture is never sent again, so the shortfall allowed stays what it was at
        // 6 s (30 % of 180 pictures) however long the catching up takes.
        var elapsed = 0.0, framesDuring = 0
        let caughtUp = waitUntil(timeout: 12, every: 0.2) {
            elapsed = Date().timeIntervalSince(started)
            framesDuring = (listener.node.registry.existingStream("live/legit_1")?.framesWritten ?? 0) - framesBefore
            return elapsed >= 6 && Double(framesDuring) >= elapsed * 30 - 54
        }
        #expect(caughtUp, "\(framesDuring) pictures in \(elapsed) s from the attack's start (sent \(counts.values))")
        let grown = Self.residentBytes() - memoryBefore
        #expect(grown < 150 * 1024 * 1024, "the node grew \(grown / 1_048_576) MiB under \(counts.values.reduce(0, +) / 1_048_576) MiB of attack")

        // Once they stop sending, the idle timeout closes them even though they never read.
        #expect(waitUntil(timeout: 12) { listener.rtmp.connectionCount <= 1 }, "\(listener.rtmp.connectionCount) connections left")
        #expect(listener.node.registry.existingStream("live/legit_1")?.isPlayable == true)
        withExtendedLifetime(attackers) {}  // the attackers' sockets stay open until the node closes them
    }
}

/// Bytes each attacker sent, written from their sending threads.
final class SentCounts: @unchecked Sendable {
    // @unchecked: every access holds `lock`.
    private let lock = NSLock()
    private var storage = [0, 0, 0]
    func set(_ index: Int, _ value: Int) { lock.lock(); storage[index] = value; lock.unlock() }
    var values: [Int] { lock.lock(); defer { lock.unlock() }; return storage }
}
