import Foundation
import MediaCore
import NIOCore
import NIOEmbedded
import RTSP
@testable import RTSPServer
import Testing

/// A WebRTC viewer's pacer sends a new player's catch-up at its link's pace, not at eight times
/// real time: the catch-up is handed over as the sink drains, timed as it is handed over (a
/// browser fits its clock to arrivals, and a compressed catch-up that arrived slowly taught
/// Chromium that RTP time runs slow), and a move ends it without dating its IDR ahead.
@Suite struct PacedCatchUpTests {
    static let clock = Rational(1, 90000)

    static func write(_ stream: LiveStream, at ticks: Int64, keyframe: Bool) {
        let unit: [UInt8] = [keyframe ? 0x65 : 0x41] + [UInt8](repeating: 0x5A, count: 999)
        stream.writeVideo([unit], time: MediaTime(ticks: ticks, timeBase: clock), isKeyframe: keyframe)
    }

    /// A cached GOP of 2 s: an IDR and 59 pictures of 1 KB.
    static func gop(_ stream: LiveStream) {
        for index in 0..<60 { write(stream, at: Int64(index) * 3000, keyframe: index == 0) }
    }

    @Test func theCatchUpIsHandedOverAsTheSinkDrainsAndTimedAsItIs() {
        let stream = LiveStream(path: "live/q_1")
        Self.gop(stream)
        let time = ManualClock()
        let sink = RecordingPacketSink()
        let loop = sink.eventLoop as! EmbeddedEventLoop
        sink.hold(50_000)  // the pacer is full
        let player = PacketPlayer(sink: sink, opusAudio: false, pacedCatchUp: 4000, clock: time.clock, onEnd: {})
        player.play(stream)
        #expect(sink.pictures.count == 1, "the IDR at once")
        // A full sink takes nothing more, however long it stays full.
        time.advance(seconds: 0.5)
        loop.advanceTime(by: .milliseconds(500))
        #expect(sink.pictures.count == 1)
        #expect(player.catchUpLag > 1.9)
        // It drains: about 4 KB of pictures are handed over, then it is full again.
        sink.hold(0)
        time.advance(seconds: 0.1)
        loop.advanceTime(by: .milliseconds(4))
        sink.hold(50_000)
        let handed = sink.pictures
        #expect((5...6).contains(handed.count), "the IDR and about 4 KB more: \(handed.count) pictures")
        // Timed 0.6 s after the catch-up began, when they were handed over, and a tick apart;
        // at the catch-up's speed they would have been 375 ticks apart, 3000 / 8.
        #expect(handed[1] &- handed[0] == 54_000)
        #expect(zip(handed.dropFirst(), handed.dropFirst(2)).allSatisfy { $1 &- $0 == 1 })
        // Drained again 0.5 s later: the next pictures are 0.5 s on.
        loop.advanceTime(by: .milliseconds(100))
        sink.hold(0)
        time.advance(seconds: 0.5)
        loop.advanceTime(by: .milliseconds(4))
        let more = sink.pictures
        #expect(more.count > handed.count)
        #expect(more[handed.count] &- handed[1] == 45_000)
    }

    @Test func aMoveEndsThePacedCatchUpAndItsIDRIsTimedByTheWallClock() throws {
        let (high, low) = (LiveStream(path: "live/r_1"), LiveStream(path: "live/r_2"))
        Self.gop(high)
        let time = ManualClock()
        let sink = RecordingPacketSink()
        let loop = sink.eventLoop as! EmbeddedEventLoop
        let player = PacketPlayer(sink: sink, opusAudio: false, pacedCatchUp: 4000, clock: time.clock, onEnd: {})
        player.play(high)
        sink.hold(0)
        time.advance(seconds: 0.2)
        loop.advanceTime(by: .milliseconds(4))
        sink.hold(50_000)
        let before = sink.pictures
        #expect(before.count > 1 && player.catchUpLag > 1)
        // Moved down while 1.8 s of the top are still held back: allowed, and the target's IDR
        // (2 s of source after the GOP's start) ends the catch-up 0.3 s after the last picture went.
        try #require(player.switchTo(low, flush: true))
        time.advance(seconds: 0.3)
        Self.write(low, at: 180_000, keyframe: true)
        let after = sink.pictures
        #expect(after.count == before.count + 1, "the IDR, and nothing more of the top")
        #expect(after.last! &- before.last! == 27_000, "0.3 s after the last picture, not the 1.8 s of source skipped")
        #expect(player.catchUpLag == 0 && player.subscriber.switches == 1)
        // Live pictures go on at the source's pace from there.
        Self.write(low, at: 183_000, keyframe: false)
        #expect(sink.pictures.last! &- after.last! == 3000)
        loop.advanceTime(by: .milliseconds(100))
        #expect(sink.pictures.count == after.count + 1, "the catch-up sends nothing more")
    }
}
