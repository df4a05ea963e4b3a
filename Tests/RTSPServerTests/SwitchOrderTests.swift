import Foundation
import MediaCore
import NIOCore
import NIOEmbedded
import RTSP
@testable import RTSPServer
import Testing

/// During a switch two streams' writers deliver to one player from two threads. What is numbered
/// first leaves first: a target's IDR that overtook the current rung's last picture on its way to
/// the transport made a player see sequence numbers and timestamps go back (CI, `RungSwitchTests`).
@Suite struct SwitchOrderTests {
    /// Records each packet's sequence number; its `blockedCall`th picture waits in `send` until
    /// released, as a busy transport or a descheduled thread would.
    final class SlowSink: PacketSink, @unchecked Sendable {
        let eventLoop: EventLoop = EmbeddedEventLoop()
        let blockedCall: Int
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        private let lock = NSLock()
        private var calls = 0
        private var sequence: [UInt16] = []
        init(blockedCall: Int) { self.blockedCall = blockedCall }
        var pendingBytes: Int { 0 }
        func send(_ packets: [RTPPacket], track: Int) {
            guard track == 0 else { return }
            let call = lock.withLock { () -> Int in
                calls += 1
                return calls
            }
            if call == blockedCall {
                entered.signal()
                release.wait()
            }
            lock.withLock { sequence += packets.map(\.sequenceNumber) }
        }
        func send(_ rtcp: RTCPPacket, track: Int) {}
        func close() {}
        func sendPadding(bytes: Int) {}
        var received: [UInt16] { lock.withLock { sequence } }
    }

    static let clock = Rational(1, 90000)
    static let idr: [[UInt8]] = [[0x65, 0x88, 0x84, 0x00]]
    static let slice: [[UInt8]] = [[0x41, 0x9A, 0x02]]

    static func write(_ stream: LiveStream, at ticks: Int64, keyframe: Bool) {
        stream.writeVideo(keyframe ? idr : slice, time: MediaTime(ticks: ticks, timeBase: clock), isKeyframe: keyframe)
    }

    @Test func theTargetsIDRWaitsForTheCurrentRungsPictureInFlight() throws {
        let (high, low) = (LiveStream(path: "live/s_1"), LiveStream(path: "live/s_2"))
        let sink = SlowSink(blockedCall: 2)
        let player = PacketPlayer(sink: sink, opusAudio: false, onEnd: {})
        player.play(high)
        Self.write(high, at: 0, keyframe: true)
        Self.write(low, at: 0, keyframe: true)
        try #require(player.switchTo(low))

        // The current rung's next picture is numbered, then waits in the transport…
        let currentDone = DispatchSemaphore(value: 0)
        Thread { Self.write(high, at: 3000, keyframe: false); currentDone.signal() }.start()
        try #require(sink.entered.wait(timeout: .now() + 10) == .success)
        // …while the target's IDR, the switch, comes on the target's writer.
        let targetDone = DispatchSemaphore(value: 0)
        Thread { Self.write(low, at: 6000, keyframe: true); targetDone.signal() }.start()
        Thread.sleep(forTimeInterval: 0.3)
        sink.release.signal()
        #expect(currentDone.wait(timeout: .now() + 10) == .success)
        #expect(targetDone.wait(timeout: .now() + 10) == .success)

        #expect(player.subscriber.switches == 1)
        let received = sink.received
        #expect(received.count == 3)
        let steps = zip(received, received.dropFirst()).map { $1 &- $0 }
        #expect(steps.allSatisfy { $0 == 1 }, "sequence numbers in the order sent: \(received)")
    }
}
