import Foundation
import MediaCore
import NIOCore
import NIOEmbedded
import RTSP
import RTSPServer

/// A `PacketPlayer`'s sink that keeps what it is given, for tests without a network: each
/// picture's timestamp (its first packet's), the audio packets, the RTCP with when it came (on
/// `clock`), the padding asked for; and a backlog the test sets (`hold`), as a full pacer holds one.
final class RecordingPacketSink: PacketSink, @unchecked Sendable {
    // @unchecked: every field is under `lock`.
    let eventLoop: EventLoop = EmbeddedEventLoop()
    private let clock: NodeClock
    private let lock = NSLock()
    private var pictureTimestamps: [UInt32] = []
    private var audioPackets: [RTPPacket] = []
    private var rtcp: [(at: UInt64, track: Int, packet: RTCPPacket)] = []
    private var paddingBytes: [Int] = []
    private var held = 0
    private var keepsKeyframe = false
    private var drops = 0

    init(clock: NodeClock = .system) {
        self.clock = clock
    }

    func send(_ packets: [RTPPacket], track: Int) {
        lock.withLock {
            if track == 1 { audioPackets += packets } else if let first = packets.first { pictureTimestamps.append(first.timestamp) }
        }
    }

    func send(_ rtcp: RTCPPacket, track: Int) {
        let now = clock.nanoseconds
        lock.withLock { self.rtcp.append((now, track, rtcp)) }
    }

    func close() {}
    func sendPadding(bytes: Int) { lock.withLock { paddingBytes.append(bytes) } }
    var pendingBytes: Int { lock.withLock { held } }
    func hold(_ bytes: Int) { lock.withLock { held = bytes } }
    /// Whether a skip finds a keyframe held (as a pacer whose newest keyframe waits behind a full window).
    func holdKeyframe(_ holds: Bool) { lock.withLock { keepsKeyframe = holds } }
    func dropQueuedVideo() { lock.withLock { drops += 1 } }
    func dropQueuedVideo(keepingKeyframeYoungerThan age: Double) -> Bool {
        lock.withLock {
            if !keepsKeyframe { drops += 1 }
            return keepsKeyframe
        }
    }
    /// How often everything held was dropped.
    var wholeDrops: Int { lock.withLock { drops } }

    var pictures: [UInt32] { lock.withLock { pictureTimestamps } }
    var audio: [RTPPacket] { lock.withLock { audioPackets } }
    var reports: [(at: UInt64, track: Int, packet: RTCPPacket)] { lock.withLock { rtcp } }
    var padding: [Int] { lock.withLock { paddingBytes } }
}
