import Foundation
import MediaCore
import NIOCore
import NIOEmbedded
import RTSP
@testable import RTSPServer
import Testing

/// A TCP player's outbox, on an embedded channel: what it lets out, what a skip can still drop,
/// and the lag it reports from what the kernel says was acknowledged.
@Suite struct PlayerOutboxTests {
    static func info(acked: UInt64, notSent: UInt32 = 0, appLimited: Bool = true, minimumRoundTrip: UInt32 = 0) -> TCPInfo {
        TCPInfo(deliveryRate: 0, deliveryRateAppLimited: appLimited, roundTripTime: 0, minimumRoundTripTime: minimumRoundTrip,
                notSentBytes: notSent, unackedSegments: 0, congestionWindow: 10, maximumSegmentSize: 1448, totalRetransmissions: 0,
                bytesAcked: acked)
    }

    static func channel() throws -> (EmbeddedChannel, WrittenBytesCounter) {
        let counter = WrittenBytesCounter()
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(counter)
        return (channel, counter)
    }

    static func writtenBytes(_ channel: EmbeddedChannel) throws -> Int {
        var total = 0
        while let buffer = try channel.readOutbound(as: ByteBuffer.self) { total += buffer.readableBytes }
        return total
    }

    /// The first look at a player that has acknowledged nothing yet: its lag is how long its
    /// oldest media has waited (a fraction of a second), not bytes over a rate of nothing.
    @Test func theLagIsRightFromTheFirstLook() throws {
        let (channel, counter) = try Self.channel()
        let time = ManualClock()
        let outbox = TCPPlayerOutbox(channel: channel, counter: counter, clock: time.clock)
        outbox.enqueue(ByteBuffer(repeating: 1, count: 60_000), isMedia: true, isVideo: true, startsPicture: true)
        time.advance(seconds: 0.05)
        let observation = outbox.observe(Self.info(acked: 0), at: time.clock.seconds)
        #expect(abs(observation.backlogSeconds - 0.05) < 1e-6, "\(observation)")
        // Once the player acknowledged it all, nothing waits: no lag.
        let after = outbox.observe(Self.info(acked: counter.value), at: time.clock.seconds)
        #expect(after.backlogSeconds == 0, "\(after)")
        var estimator = LinkEstimator()
        let sample = estimator.observe(observation)
        let rungs = [SwitchingPolicy.Rung(level: 1, bitRate: 2_000_000, upswitchAbove: 2_500_000, downswitchBelow: 2_105_264),
                     SwitchingPolicy.Rung(level: 2, bitRate: 1_000_000, upswitchAbove: 1_250_000, downswitchBelow: 1_052_632)]
        var policy = SwitchingPolicy(rungs: rungs, startingAt: 2)
        #expect(policy.observe(sample) == .stay)
        _ = try channel.finish()
    }

    /// Past the limit, media stays in the outbox, where a skip drops it; video then waits for a
    /// keyframe, and what was already written is counted, not lost.
    @Test func mediaPastTheLimitWaitsWhereASkipCanDropIt() throws {
        let (channel, counter) = try Self.channel()
        let outbox = TCPPlayerOutbox(channel: channel, counter: counter, clock: .system)
        outbox.setLimit(16 * 1024)
        for index in 0..<10 {
            outbox.enqueue(ByteBuffer(repeating: 2, count: 8 * 1024), isMedia: true, isVideo: true, startsPicture: index == 0)
        }
        #expect(try Self.writtenBytes(channel) == 16 * 1024)
        #expect(outbox.heldBytes == 8 * 8 * 1024)
        let waiting = outbox.observe(Self.info(acked: 0), at: NodeClock.system.seconds)
        #expect(waiting.senderWaiting)
        outbox.dropHeld()
        #expect(outbox.heldBytes == 0)
        // A picture that is not a keyframe is dropped until one comes; audio goes on.
        outbox.enqueue(ByteBuffer(repeating: 3, count: 100), isMedia: true, isVideo: true, startsPicture: false)
        outbox.enqueue(ByteBuffer(repeating: 4, count: 100), isMedia: true, isVideo: false, startsPicture: false)
        #expect(outbox.heldBytes == 100)
        // The player acknowledges what was written: the held audio goes out, then a keyframe.
        _ = outbox.observe(Self.info(acked: counter.value), at: NodeClock.system.seconds)
        outbox.enqueue(ByteBuffer(repeating: 5, count: 200), isMedia: true, isVideo: true, startsPicture: true)
        #expect(try Self.writtenBytes(channel) == 300)
        _ = try channel.finish()
    }

    /// A probe's padding waits behind media and goes when the probe ends early.
    @Test func aProbesPaddingIsDroppedAlone() throws {
        let (channel, counter) = try Self.channel()
        let outbox = TCPPlayerOutbox(channel: channel, counter: counter, clock: .system)
        outbox.setLimit(16 * 1024)
        outbox.enqueue(ByteBuffer(repeating: 0, count: 16 * 1024), isMedia: false, isVideo: false, startsPicture: false)
        outbox.enqueue(ByteBuffer(repeating: 0, count: 4096), isMedia: false, isVideo: false, startsPicture: false)
        outbox.enqueue(ByteBuffer(repeating: 1, count: 1000), isMedia: true, isVideo: true, startsPicture: true)
        #expect(outbox.heldBytes == 5096)
        outbox.dropHeld(paddingOnly: true)
        #expect(outbox.heldBytes == 1000)
        _ = try channel.finish()
    }
}
