import Foundation
import Logging
import MediaCore
import NIOCore
import NIOEmbedded
import RTSP
@testable import RTSPServer
import Synchronization
import Testing

/// A player whose link no longer carries its rung asks the lower rung's encoder for an IDR and
/// stops taking the old rung past what it has had, instead of waiting up to a keyframe interval
/// for the grid's next IDR (WebRTC viewers froze 12–14 s per two minutes of harsh links so).
@Suite struct UrgentSwitchTests {
    static let clock = Rational(1, 90000)
    static let idr: [[UInt8]] = [[0x65, 0x88, 0x84, 0x00]]
    static let slice: [[UInt8]] = [[0x41, 0x9A, 0x02]]

    static func write(_ stream: LiveStream, at ticks: Int64, keyframe: Bool) {
        stream.writeVideo(keyframe ? idr : slice, time: MediaTime(ticks: ticks, timeBase: clock), isKeyframe: keyframe)
    }

    /// A registry holding `base`_1, `base`_2, … with these rates from the top, each with narrow
    /// thresholds (up above 10/9 of its rate, down below 20/19).
    static func ladder(_ base: String, rates: [Int]) -> StreamRegistry {
        let registry = StreamRegistry()
        for (index, rate) in rates.enumerated() {
            registry.stream("\(base)_\(index + 1)").setRung(.init(level: index + 1, bitRate: rate, upswitchAbove: rate * 10 / 9 + 1,
                                                                 downswitchBelow: rate * 20 / 19 + 1))
        }
        return registry
    }

    @Test func anUrgentMoveAsksTheTargetForAnIDRAndTakesIt() {
        let (high, low) = (LiveStream(path: "live/s_1"), LiveStream(path: "live/s_2"))
        let requests = Mutex<[Int64]>([])
        low.setKeyframeSource { after in requests.withLock { $0.append(after.ticks(in: Self.clock)) } }
        let sink = RecordingPacketSink()
        let player = PacketPlayer(sink: sink, opusAudio: false, onEnd: {})
        player.play(high)
        for (index, ticks) in stride(from: Int64(0), through: 6000, by: 3000).enumerated() {
            Self.write(high, at: ticks, keyframe: index == 0)
            Self.write(low, at: ticks, keyframe: index == 0)
        }
        #expect(sink.pictures.count == 3)

        #expect(player.switchTo(low, urgent: true))
        #expect(requests.withLock { $0 } == [6000], "the encoder is asked for an IDR after the last picture sent")
        // The old rung's next pictures are held back; the target's are not yet decodable.
        Self.write(high, at: 9000, keyframe: false)
        Self.write(low, at: 9000, keyframe: false)
        #expect(sink.pictures.count == 3, "a picture past the hold went out")
        // The forced IDR: the player is on the lower rung from it, with no gap in its timeline.
        Self.write(low, at: 12000, keyframe: true)
        Self.write(high, at: 12000, keyframe: false)
        Self.write(low, at: 15000, keyframe: false)
        #expect(sink.pictures.count == 5)
        #expect(player.subscriber.switches == 1)
    }

    /// A rung nothing encodes (a passed-through top) cannot make an IDR: the move waits for the
    /// grid's, and the old rung flows until then, as before.
    @Test func withoutAnEncoderTheMoveWaitsForTheGrid() {
        let (high, low) = (LiveStream(path: "live/s_1"), LiveStream(path: "live/s_2"))
        let sink = RecordingPacketSink()
        let player = PacketPlayer(sink: sink, opusAudio: false, onEnd: {})
        player.play(high)
        Self.write(high, at: 0, keyframe: true)
        Self.write(low, at: 0, keyframe: true)
        #expect(player.switchTo(low, urgent: true))
        Self.write(high, at: 3000, keyframe: false)
        Self.write(low, at: 3000, keyframe: false)
        #expect(sink.pictures.count == 2, "the old rung goes on while no IDR was asked for")
        Self.write(low, at: 180_000, keyframe: true)
        #expect(player.subscriber.switches == 1)
    }

    /// A viewer whose link carries its audio beside the video moves to the rung the link carries
    /// with that audio: 568 kbit/s with 90 kbit/s of it audio is no link for a 500 kbit/s rung.
    @Test func aMoveDownCountsWhatTheLinkCarriesBesideTheVideo() {
        final class CostlySink: PacketSink, @unchecked Sendable {
            let eventLoop: EventLoop = EmbeddedEventLoop()
            let linkCost: SwitchingPolicy.LinkCost
            init(_ cost: SwitchingPolicy.LinkCost) { linkCost = cost }
            var pendingBytes: Int { 0 }
            func send(_ packets: [RTPPacket], track: Int) {}
            func send(_ rtcp: RTCPPacket, track: Int) {}
            func close() {}
            func sendPadding(bytes: Int) {}
        }
        func landing(_ cost: SwitchingPolicy.LinkCost) -> Int? {
            let registry = Self.ladder("live/c", rates: [1_000_000, 500_000, 250_000])
            let time = ManualClock()
            let player = PacketPlayer(sink: CostlySink(cost), opusAudio: false, clock: time.clock, onEnd: {})
            player.play(registry.stream("live/c_1"))
            for index in 1...3 { Self.write(registry.stream("live/c_\(index)"), at: 0, keyframe: true) }
            let moves = Mutex<[Int]>([])
            player.adapt(registry: registry, ladder: [1: "live/c_1", 2: "live/c_2", 3: "live/c_3"], logger: Logger(label: "test")) { _, to, _ in
                moves.withLock { $0.append(to) }
            }
            var delivered: UInt64 = 0
            for tick in 0..<30 where moves.withLock({ $0.isEmpty }) {
                time.advance(seconds: 0.1)
                delivered += 568_000 / 8 / 10
                player.observe(LinkObservation(time: 0, deliveredBytes: delivered, senderWaiting: true, backlogSeconds: 0.2 + Double(tick) * 0.02))
            }
            return moves.withLock { $0.first }
        }
        #expect(landing(.none) == 2, "video alone: the 500 kbit/s rung fits in 568")
        #expect(landing(.init(videoFactor: 1.04, besides: 90_000)) == 3, "with its audio, only the lowest rung fits")
    }

    /// A WebRTC viewer with transport-wide feedback moved down keeps its old rung until the
    /// target's IDR (its congestion window holds what the path cannot take, in the node), unless
    /// the policy asks for a flush; a paced viewer judged on receiver reports has no such window,
    /// and every move down stops its old rung at once.
    @Test func onlyAPacedViewerWithoutAWindowFlushesEveryMoveDown() {
        #expect(AdaptationProfile(evidence: .receiverReports, paced: true).flushesEveryMoveDown)
        #expect(!AdaptationProfile(evidence: .transportFeedback, paced: true).flushesEveryMoveDown)
        #expect(!AdaptationProfile(evidence: .receiverReports, paced: false).flushesEveryMoveDown)
        #expect(!AdaptationProfile(evidence: .tcpInfo, paced: false).flushesEveryMoveDown)

        // A link read full at 700 kbit/s under a 1 Mbit/s rung, a quarter second queued: the move to the
        // 500 kbit/s rung is not the policy's flush, and the old rung's pictures go on until the target's IDR.
        let registry = Self.ladder("live/f", rates: [1_000_000, 500_000])
        let (high, low) = (registry.stream("live/f_1"), registry.stream("live/f_2"))
        let time = ManualClock()
        let sink = RecordingPacketSink(clock: time.clock)
        let player = PacketPlayer(sink: sink, opusAudio: false, clock: time.clock, onEnd: {})
        player.play(high)
        Self.write(high, at: 0, keyframe: true)
        Self.write(low, at: 0, keyframe: true)
        let moves = Mutex<[Int]>([])
        player.adapt(registry: registry, ladder: [1: "live/f_1", 2: "live/f_2"], logger: Logger(label: "test")) { _, to, _ in
            moves.withLock { $0.append(to) }
        }
        var delivered: UInt64 = 0
        for _ in 0..<30 where moves.withLock({ $0.isEmpty }) {
            time.advance(seconds: 0.1)
            delivered += 700_000 / 8 / 10
            player.observe(LinkObservation(time: 0, deliveredBytes: delivered, senderWaiting: true, backlogSeconds: 0.25))
        }
        #expect(moves.withLock { $0 } == [2])
        #expect(sink.wholeDrops == 0, "the pacer's video was dropped")
        let before = sink.pictures.count
        Self.write(high, at: 3000, keyframe: false)
        #expect(sink.pictures.count == before + 1, "the old rung stopped before the target's IDR")
        Self.write(low, at: 6000, keyframe: true)
        #expect(player.subscriber.switches == 1)
    }

    /// A player judged on its receiver reports keeps its probe's padding flowing until the report
    /// that judges the probe (up to one report interval past its end); players judged on their
    /// transport's own feedback stop at the probe's end, where the policy judges them.
    @Test func aReportJudgedProbePadsUntilItsJudgingReport() {
        let reports = AdaptationProfile(evidence: .receiverReports, paced: false)
        #expect(reports.paddingSeconds(probe: 8, reportInterval: 6) == 14)
        #expect(reports.paddingSeconds(probe: 8, reportInterval: 60) == 18, "a report interval counts at most 10 s")
        #expect(AdaptationProfile(evidence: .tcpInfo, paced: false).paddingSeconds(probe: 3, reportInterval: 6) == 3)
        #expect(AdaptationProfile(evidence: .transportFeedback, paced: true).paddingSeconds(probe: 4, reportInterval: 6) == 4)
    }

    /// A WebRTC viewer's probe holds the bottleneck's queue short: a slice of padding waits while
    /// the latest feedback says more than `AdaptationProfile.probeQueueLimit` is queued, so a link that cannot carry
    /// the probe fills without overflowing (a probe that ran on until 0.3 s queued overflowed a
    /// 100-packet queue at 2.3 Mbit/s every time, and the media it took froze Chromium).
    @Test func aDatagramProbeHoldsItsPaddingWhileTheQueueIsLong() {
        let registry = StreamRegistry()
        let (high, low) = (registry.stream("live/p_1"), registry.stream("live/p_2"))
        high.setRung(.init(level: 1, bitRate: 2_000_000, upswitchAbove: 2_500_000, downswitchBelow: 2_105_264))
        low.setRung(.init(level: 2, bitRate: 1_000_000, upswitchAbove: 1_250_000, downswitchBelow: 1_052_632))
        let time = ManualClock()
        let sink = RecordingPacketSink()
        let loop = sink.eventLoop as! EmbeddedEventLoop
        let player = PacketPlayer(sink: sink, opusAudio: false, clock: time.clock, onEnd: {})
        player.play(low)
        Self.write(low, at: 0, keyframe: true)
        player.adapt(registry: registry, ladder: [1: "live/p_1", 2: "live/p_2"], logger: Logger(label: "test")) { _, _, _ in }
        var delivered: UInt64 = 0
        func feedback(backlog: Double) {
            time.advance(seconds: 0.1)
            delivered += 1_050_000 / 8 / 10
            player.observe(LinkObservation(time: 0, deliveredBytes: delivered, senderWaiting: false, backlogSeconds: backlog))
        }
        // The rung's own rate, clean, until the policy probes the next one.
        for _ in 0..<200 where sink.padding.count == 0 {
            feedback(backlog: 0)
            loop.run()
        }
        #expect(sink.padding.count == 1, "no probe began in 20 s of a clean link")
        // A queue of 0.2 s: the next slices wait, the probe goes on.
        feedback(backlog: 0.2)
        loop.advanceTime(by: .milliseconds(100))
        feedback(backlog: 0.2)
        loop.advanceTime(by: .milliseconds(100))
        #expect(sink.padding.count == 1, "padding was sent over a 0.2 s queue")
        // Drained: the padding resumes, a slice every 10 ms.
        feedback(backlog: 0.01)
        loop.advanceTime(by: .milliseconds(100))
        #expect(sink.padding.count == 11)
        // A queue seen between two slices stops the very next one.
        feedback(backlog: 0.2)
        loop.advanceTime(by: .milliseconds(10))
        #expect(sink.padding.count == 11, "a slice went out over a 0.2 s queue")
        // The slices ramp up over the probe's first second, each at most 10 ms of the probe's whole rate.
        let slices = sink.padding
        #expect(slices.count == 11 && slices.last! > slices.first! && slices.allSatisfy { $0 <= 3_125_000 / 8 / 100 })
        _ = high
    }
}

/// A player too far behind live skips ahead from the newest keyframe its transport still holds
/// (a WebRTC viewer's pacer, with the IDR of the rung it was just moved to waiting behind a full
/// path), not from the next one the encoder makes: dropping that IDR froze viewers until the
/// grid's next (3 s, runs CB and CD).
@Suite struct SkipToLiveEdgeTests {
    static func write(_ stream: LiveStream, at ticks: Int64, keyframe: Bool) { UrgentSwitchTests.write(stream, at: ticks, keyframe: keyframe) }

    /// A started player on `stream`, past its catch-up, with the sink it writes to.
    static func settledPlayer(_ stream: LiveStream) -> (PacketPlayer, RecordingPacketSink) {
        let sink = RecordingPacketSink()
        let player = PacketPlayer(sink: sink, opusAudio: false, onEnd: {})
        player.play(stream)
        write(stream, at: 0, keyframe: true)
        write(stream, at: 3000, keyframe: false)
        return (player, sink)
    }

    @Test func aHeldKeyframeIsWhereThePlayerGoesOn() {
        let stream = LiveStream(path: "live/k_1")
        let (player, sink) = Self.settledPlayer(stream)
        sink.holdKeyframe(true)
        #expect(player.subscriber.skipToLiveEdge(keepingKeyframeYoungerThan: 2))
        // The pictures after the kept keyframe reference it: they still go out.
        Self.write(stream, at: 6000, keyframe: false)
        Self.write(stream, at: 9000, keyframe: false)
        #expect(sink.pictures.count == 4, "the player dropped pictures after the keyframe it kept")
        #expect(sink.wholeDrops == 0)
    }

    @Test func withNoKeyframeHeldThePlayerWaitsForTheNextIDR() {
        let stream = LiveStream(path: "live/k_1")
        let (player, sink) = Self.settledPlayer(stream)
        #expect(!player.subscriber.skipToLiveEdge(keepingKeyframeYoungerThan: 2))
        Self.write(stream, at: 6000, keyframe: false)
        #expect(sink.pictures.count == 2, "a picture whose references were dropped went out")
        Self.write(stream, at: 9000, keyframe: true)
        Self.write(stream, at: 12000, keyframe: false)
        #expect(sink.pictures.count == 4)
        #expect(sink.wholeDrops == 1)
    }

    /// Before its first picture a player has nothing to go on from, whatever the transport holds.
    @Test func aPlayerNotYetStartedDropsEverything() {
        let stream = LiveStream(path: "live/k_1")
        let sink = RecordingPacketSink()
        sink.holdKeyframe(true)
        let player = PacketPlayer(sink: sink, opusAudio: false, onEnd: {})
        player.play(stream)
        #expect(!player.subscriber.skipToLiveEdge(keepingKeyframeYoungerThan: 2))
        #expect(sink.wholeDrops == 1)
        Self.write(stream, at: 0, keyframe: false)
        #expect(sink.pictures.isEmpty)
        Self.write(stream, at: 3000, keyframe: true)
        #expect(sink.pictures.count == 1)
    }
}
