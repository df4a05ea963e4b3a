import NIOCore
import RTSP
import Testing
@testable import WebRTC

/// The pacer and the NACK history on made-up clocks and packets (no sockets, no sleeping).
@Suite struct MediaPacerTests {
    static func datagram(_ size: Int = 1200) -> MediaPacer.Item { .init(bytes: [UInt8](repeating: 0, count: size), carriesTransportSequence: false, isVideo: true) }
    static func audio(_ size: Int = 120) -> MediaPacer.Item { .init(bytes: [UInt8](repeating: 1, count: size), carriesTransportSequence: true, isVideo: false) }

    @Test func aKeyframeIsSpreadAtTwoAndAHalfTimesTheMediaRate() {
        var pacer = MediaPacer()
        // Two seconds of 4 Mbit/s media: 30 pictures a second, released every 5 ms.
        var time = 0.0
        for picture in 0..<60 {
            for _ in 0..<14 { pacer.enqueue(Self.datagram(), at: Double(picture) / 30) }
            for step in 0..<6 {
                time = Double(picture) / 30 + Double(step) * 0.005
                _ = pacer.release(at: time)
            }
        }
        let rate = pacer.rate
        #expect(rate > 8_000_000 && rate < 12_000_000, "2.5 × about 4 Mbit/s, got \(rate) at \(time)")
        while !pacer.isEmpty { time += 0.005; _ = pacer.release(at: time) }
        let start = 2.05
        for _ in 0..<75 { pacer.enqueue(Self.datagram(), at: start) }
        #expect(pacer.queuedBytes == 75 * 1200)
        var sentAt: [Double] = []
        var now = start
        while !pacer.isEmpty, now < start + 2 {
            for _ in pacer.release(at: now) { sentAt.append(now) }
            now += 0.005
        }
        #expect(sentAt.count == 75)
        let span = sentAt.last! - sentAt.first!
        let expected = 75.0 * 1200 * 8 / rate
        #expect(abs(span - expected) < 0.03, "90 KB over \(span) s, expected about \(expected) s")
        // No 10 ms holds more than the rate's share plus one packet.
        for window in stride(from: start, to: sentAt.last!, by: 0.01) {
            let inWindow = sentAt.filter { $0 >= window && $0 < window + 0.01 }.count
            #expect(Double(inWindow * 1200) <= rate / 8 * 0.02 + 1500)
        }
    }

    /// With the link's estimate known, bursts leave no faster than it carries with a quarter's
    /// headroom, and never slower than the media comes in.
    @Test func burstsAreHeldToTheLinksEstimateButNeverBelowTheMedia() {
        var pacer = MediaPacer()
        // A second of 1 Mbit/s media: 2.5× would be 2.5 Mbit/s, the floor 3 Mbit/s.
        for _ in 0..<104 { pacer.enqueue(Self.datagram(), at: 0.5) }
        #expect(pacer.rate == MediaPacer.minimumRate)
        pacer.linkRate = 1_200_000
        #expect(abs(pacer.rate - 1_500_000) < 1, "1.25 × the link's 1.2 Mbit/s, got \(pacer.rate)")
        // A link estimated under the media: the media's own rate (and a little), not the estimate.
        pacer.linkRate = 500_000
        #expect(abs(pacer.rate - 104 * 1200 * 8 * 1.05) < 1, "got \(pacer.rate)")
        // A link wider than the burst changes nothing.
        pacer.linkRate = 50_000_000
        #expect(pacer.rate == MediaPacer.minimumRate)
    }

    /// Audio queued behind a keyframe leaves at the next release, ahead of the keyframe's rest,
    /// and what it took is taken from the video's pace, which goes on as before.
    @Test func audioLeavesAheadOfTheVideoWaitingAndCountsAgainstItsPace() {
        var pacer = MediaPacer()
        pacer.linkRate = 1_200_000  // 1.25 × = 1.5 Mbit/s: 60 KB take 0.32 s
        for _ in 0..<50 { pacer.enqueue(Self.datagram(), at: 0) }
        var now = 0.0
        var videoSent = 0
        var audioSentAt: [(queued: Double, left: Double)] = []
        var audioQueuedAt: [Double] = []
        while !pacer.isEmpty, now < 1 {
            // An Opus packet every 20 ms while the keyframe leaves.
            if Int((now * 1000).rounded()) % 20 == 0, now < 0.3 {
                pacer.enqueue(Self.audio(), at: now)
                audioQueuedAt.append(now)
            }
            for item in pacer.release(at: now) {
                if item.isVideo { videoSent += 1 } else { audioSentAt.append((audioQueuedAt.removeFirst(), now)) }
            }
            now += 0.005
        }
        #expect(videoSent == 50 && audioSentAt.count == 15)
        for (queued, left) in audioSentAt { #expect(left - queued < 0.001, "audio queued at \(queued) left at \(left)") }
        // The keyframe and the audio together at the pace: 60 KB + 1.8 KB at 1.5 Mbit/s.
        #expect(abs(now - (50 * 1200 + 15 * 120) * 8 / 1_500_000.0) < 0.03, "the last video left at \(now)")
        // After a pause too the audio leads (the budget then lets this picture go whole).
        pacer.enqueue(Self.datagram(), at: 1)
        pacer.enqueue(Self.datagram(), at: 1)
        pacer.enqueue(Self.audio(), at: 1)
        #expect(pacer.release(at: 1).map(\.isVideo) == [false, true, true])
    }

    /// Released only when it says something may leave (and no more often than every 5 ms, as the
    /// service's timer does), a keyframe leaves as it does released every 5 ms; between pictures
    /// only the audio's due times wake the caller, and nothing once all has left.
    @Test func itSaysWhenItMayReleaseNext() {
        // A 60 KB keyframe over a 1.2 Mbit/s estimate; the caller looks every 5 ms, or only when due.
        func keyframe(wakingWhenDue: Bool) -> (lastLeft: Double, wakes: Int, pacer: MediaPacer) {
            var pacer = MediaPacer()
            pacer.linkRate = 1_200_000
            for _ in 0..<50 { pacer.enqueue(Self.datagram(), at: 0) }
            var now = 0.0, lastLeft = 0.0, wakes = 0
            while !pacer.isEmpty, now < 2 {
                wakes += 1
                if !pacer.release(at: now).isEmpty { lastLeft = now }
                now = wakingWhenDue ? max(now + 0.005, pacer.nextRelease(at: now) ?? 2) : now + 0.005
            }
            return (lastLeft, wakes, pacer)
        }
        let polled = keyframe(wakingWhenDue: false), woken = keyframe(wakingWhenDue: true)
        #expect(woken.pacer.isEmpty && abs(woken.lastLeft - polled.lastLeft) <= 0.005,
                "the keyframe's last packet left at \(woken.lastLeft), polled \(polled.lastLeft)")
        #expect(woken.wakes <= polled.wakes)
        #expect(woken.pacer.nextRelease(at: 2) == nil, "nothing waits")

        // Audio due later: that is the next release, not the next tick.
        var audio = MediaPacer()
        audio.enqueue(Self.audio(), at: 10)
        _ = audio.release(at: 10)
        audio.enqueue(Self.audio(), at: 10.001)
        let next = audio.nextRelease(at: 10.001)
        #expect(next != nil && next! >= 10.001, "\(String(describing: next))")

        // A full window: the caller keeps looking (feedback may open it at any moment).
        var blocked = MediaPacer()
        for _ in 0..<4 { blocked.enqueue(Self.datagram(), at: 0) }
        _ = blocked.release(at: 0, window: 1000)
        #expect(blocked.windowBlocked && blocked.nextRelease(at: 0.002) == 0.002)
    }

    @Test func anIdlePacerLetsASmallPictureGoAtOnceAndClears() {
        var pacer = MediaPacer()
        pacer.enqueue(Self.datagram(), at: 0)
        pacer.enqueue(Self.datagram(), at: 0)
        #expect(pacer.release(at: 0).count == 2, "at the 3 Mbit/s floor a 10 ms burst is 3750 bytes plus a packet")
        for _ in 0..<10 { pacer.enqueue(Self.datagram(), at: 0.1) }
        pacer.clear()
        #expect(pacer.isEmpty && pacer.queuedBytes == 0)
    }

    /// A move down drops the old rung's video still queued, keeps the audio, and resends nothing
    /// sent before it: the new rung's IDR is the next video the link carries.
    @Test func aMoveDownDropsQueuedVideoKeepsAudioAndForgetsTheHistory() {
        var pacer = MediaPacer()
        for index in 0..<6 {
            pacer.enqueue(.init(bytes: [UInt8](repeating: 0, count: 1000 + index), carriesTransportSequence: true, isVideo: index % 3 != 0), at: 0)
        }
        pacer.dropVideo()
        #expect(pacer.queuedBytes == 1000 + 1003)
        #expect(pacer.release(at: 1).map(\.bytes.count) == [1000, 1003])
        var history = RetransmissionHistory()
        for sequence in UInt16(0)...UInt16(9) { history.keep(Self.packet(sequence)) }
        history.forget()
        #expect(history.resend([3, 9], at: 0).isEmpty && history.recent(bytes: 100).isEmpty)
        history.keep(Self.packet(10))
        #expect(history.resend([10], at: 0).map(\.sequenceNumber) == [10])
    }

    static func packet(_ sequence: UInt16) -> RTPPacket {
        RTPPacket(marker: false, payloadType: 96, sequenceNumber: sequence, timestamp: 9000, ssrc: 1, payload: ByteBuffer(bytes: [1, 2, 3]))
    }

    @Test func nacksAreAnsweredFromTheHistoryAndLiesCostLittle() {
        var history = RetransmissionHistory()
        for sequence in UInt16(65000)...UInt16(65535) { history.keep(Self.packet(sequence)) }
        for sequence in UInt16(0)...UInt16(99) { history.keep(Self.packet(sequence)) }
        // Held packets come back in the order asked, across the wrap.
        #expect(history.resend([65535, 0, 5], at: 0).map(\.sequenceNumber) == [65535, 0, 5])
        // Gone from the history (overwritten), or never sent: nothing.
        #expect(history.resend([65000, 200], at: 0).isEmpty)
        // Not again before its last resend could have arrived; then again, up to `maximumResends` times in all.
        #expect(history.resend([5], at: 0.01).isEmpty)
        var time = 0.0
        for _ in 1..<RetransmissionHistory.maximumResends {
            time += 2 * RetransmissionHistory.resendInterval
            #expect(history.resend([5], at: time).count == 1)
        }
        #expect(history.resend([5], at: time + 1).isEmpty, "at most \(RetransmissionHistory.maximumResends) times")
        // A NACK for every packet ever sent costs at most one request's worth.
        #expect(history.resend(Array(0...65535).map { UInt16($0) }, at: 10).count == RetransmissionHistory.maximumPerRequest)
    }

    /// A probe pads with media already sent, newest first, so its packets are full-size ones: a
    /// queue counted in packets fills no faster with the probe than with the media.
    @Test func aProbePadsWithTheNewestPacketsAndLeavesTheirResendsAlone() {
        var history = RetransmissionHistory()
        #expect(history.recent(bytes: 5000).isEmpty)
        for sequence in UInt16(65530)...UInt16(65535) { history.keep(Self.packet(sequence)) }
        for sequence in UInt16(0)...UInt16(3) { history.keep(Self.packet(sequence)) }
        // 3 bytes of payload plus the header each (17): 40 bytes are three packets, newest first.
        #expect(history.recent(bytes: 40).map(\.sequenceNumber) == [3, 2, 1])
        // More than the history holds: the held packets again, in the same order, and never unbounded.
        let many = history.recent(bytes: 17 * 25).map(\.sequenceNumber)
        #expect(many.count == 25 && many[10] == 3 && many[9] == 65530)
        #expect(history.recent(bytes: 1 << 30).count == 2000)
        // Padding is not a resend: a NACK still gets each packet every time it may.
        #expect(history.resend([3], at: 0).count == 1 && history.resend([3], at: 0.1).count == 1)
    }

    @Test func aRetransmissionCarriesTheOriginalSequenceFirst() {
        let original = Self.packet(0xABCD)
        let rtx = RetransmissionHistory.retransmission(of: original, payloadType: 97, ssrc: 7, sequence: 12)
        #expect(rtx.payloadType == 97 && rtx.ssrc == 7 && rtx.sequenceNumber == 12 && rtx.timestamp == original.timestamp)
        #expect(Array(rtx.payload.readableBytesView) == [0xAB, 0xCD, 1, 2, 3])
    }

    /// A full congestion window holds everything, audio first once it opens; one packet still
    /// leaves every `keepaliveInterval`, so feedback comes back.
    @Test func aFullWindowHoldsTheMediaButLetsAKeepaliveThrough() {
        var pacer = MediaPacer()
        for _ in 0..<10 { pacer.enqueue(Self.datagram(), at: 0) }
        pacer.enqueue(Self.audio(), at: 0)
        #expect(pacer.release(at: 0.001, window: 0).count == 1, "nothing has left yet: the keepalive")
        #expect(pacer.release(at: 0.01, window: 0).isEmpty)
        #expect(pacer.windowBlocked)
        #expect(pacer.release(at: 0.5, window: -500).isEmpty)
        // Room for about two packets: two leave (the second takes the window below zero).
        let released = pacer.release(at: 0.6, window: 1300)
        #expect(released.count == 2 && released.allSatisfy(\.isVideo))
        #expect(pacer.windowBlocked)
        #expect(abs(pacer.oldestVideoWait(at: 0.6) - 0.6) < 1e-9)
        #expect(pacer.release(at: 1.7, window: 0).count == 1, "a second without sending: the keepalive")
        // An open window lets the rest go at the pace.
        var left = 0
        var now = 1.7
        while !pacer.isEmpty, now < 2 { now += 0.005; left += pacer.release(at: now, window: 1_000_000).count }
        #expect(left == 7)
        #expect(!pacer.windowBlocked)
    }

    /// A resend leaves after the audio due and ahead of the video waiting, under the same window;
    /// one that waited half a second behind a full window is dropped, and a move down drops them
    /// with the video.
    @Test func resendsLeaveBeforeTheVideoUnderTheWindow() {
        var pacer = MediaPacer()
        for _ in 0..<4 { pacer.enqueue(Self.datagram(), at: 0) }
        pacer.enqueue(Self.audio(), at: 0)
        pacer.enqueue(.init(bytes: [UInt8](repeating: 2, count: 1000), carriesTransportSequence: true, isRetransmission: true), at: 0)
        let first = pacer.release(at: 0.001, window: 1100)
        #expect(first.count == 2 && !first[0].isVideo && !first[0].isRetransmission && first[1].isRetransmission,
                "the audio, then the resend; the window is then full")
        #expect(pacer.release(at: 0.01, window: 0).isEmpty && pacer.windowBlocked)
        // Behind a full window: the resend goes stale before the video does.
        pacer.enqueue(.init(bytes: [UInt8](repeating: 2, count: 1000), carriesTransportSequence: true, isRetransmission: true), at: 0.02)
        #expect(pacer.release(at: 0.6, window: 0).isEmpty)
        let rest = pacer.release(at: 0.61, window: 100_000)
        #expect(!rest.isEmpty && rest.allSatisfy(\.isVideo))
        // A move down drops the resends waiting with the video.
        pacer.enqueue(.init(bytes: [UInt8](repeating: 2, count: 1000), carriesTransportSequence: true, isRetransmission: true), at: 0.7)
        pacer.dropVideo()
        #expect(pacer.isEmpty && pacer.queuedBytes == 0)
    }

    /// Behind a window that stays full, audio older than a second and video older than three are
    /// dropped; the caller hears of the video once, to ask for the next keyframe.
    @Test func mediaHeldTooLongBehindAFullWindowIsDropped() {
        var pacer = MediaPacer()
        for tick in 0..<200 {
            let now = Double(tick) * 0.02
            pacer.enqueue(Self.audio(), at: now)
            pacer.enqueue(Self.datagram(), at: now)
            _ = pacer.release(at: now, window: 0)
            if tick == 100 {
                // Two seconds in: all the video and about a second of the audio are kept (the keepalives took audio).
                #expect(pacer.queuedBytes <= 101 * 1200 + 51 * 120 && pacer.queuedBytes > 101 * 1200 + 45 * 120)
                let dropped = pacer.takeDroppedStaleVideo()
                #expect(!dropped)
            }
        }
        // Four seconds in: the video older than three seconds went, with all queued after it.
        let dropped = pacer.takeDroppedStaleVideo()
        let droppedAgain = pacer.takeDroppedStaleVideo()
        #expect(dropped)
        #expect(!droppedAgain, "told once")
        #expect(pacer.oldestVideoWait(at: 3.98) < MediaPacer.staleVideo)
        #expect(pacer.queuedBytes < 60 * 1200 + 51 * 120)
    }

    /// A picture of `packets` datagrams, its first marked as a keyframe's where it is one.
    static func picture(keyframe: Bool, packets: Int = 3) -> [MediaPacer.Item] {
        (0..<packets).map { index in
            var item = datagram()
            item.startsKeyframe = keyframe && index == 0
            return item
        }
    }

    /// A skip to the live edge keeps the video from the newest keyframe that has waited less than
    /// the limit, and drops what was queued before it and the resends; with no such keyframe, all
    /// the video. The audio stays either way.
    @Test func aSkipGoesOnFromTheNewestKeyframeHeld() {
        func filled() -> MediaPacer {
            var pacer = MediaPacer()
            for (at, keyframe) in [(0.0, true), (0.5, false), (1.0, true), (1.5, false)] {
                for item in Self.picture(keyframe: keyframe) { pacer.enqueue(item, at: at) }
            }
            pacer.enqueue(Self.audio(), at: 1.5)
            pacer.enqueue(.init(bytes: [UInt8](repeating: 2, count: 1000), carriesTransportSequence: true, isRetransmission: true), at: 1.5)
            return pacer
        }
        var pacer = filled()
        let kept = pacer.dropVideo(keepingKeyframeYoungerThan: 2, at: 2.5)
        #expect(kept)
        #expect(pacer.queuedBytes == 6 * 1200 + 120)
        var left: [MediaPacer.Item] = []
        var now = 2.5
        while !pacer.isEmpty, now < 4 { left += pacer.release(at: now); now += 0.005 }
        let video = left.filter(\.isVideo)
        #expect(video.count == 6 && video.first?.startsKeyframe == true, "the newest keyframe's picture and the one after it")
        #expect(!left.contains(where: \.isRetransmission) && left.count == 7)

        // That keyframe has waited 2.5 s: older than the limit, so all the video goes.
        pacer = filled()
        let keptOld = pacer.dropVideo(keepingKeyframeYoungerThan: 2, at: 3.5)
        #expect(!keptOld)
        #expect(pacer.queuedBytes == 120)
    }

    /// Video stale behind a full window goes up to the newest keyframe that has not waited as
    /// long, and the caller is not asked for the next keyframe: the video goes on from that one.
    @Test func staleVideoGoesOnFromAYoungerKeyframe() {
        var pacer = MediaPacer()
        for tick in 0..<200 {
            let now = Double(tick) * 0.02
            for item in Self.picture(keyframe: tick % 50 == 0, packets: 1) { pacer.enqueue(item, at: now) }
            _ = pacer.release(at: now, window: 0)
        }
        let dropped = pacer.takeDroppedStaleVideo()
        #expect(!dropped, "a keyframe younger than the stale limit was held")
        // The keyframe of 3 s in is the oldest video left.
        #expect(abs(pacer.oldestVideoWait(at: 3.98) - 0.98) < 0.001)
    }

    /// A link full enough to lose packets gets at most a quarter of the media's rate in resends,
    /// however many the browser NACKs; a quiet link has the whole bucket for the next loss.
    @Test func resendsAreBoundedByAShareOfTheMediaRate() {
        var budget = RetransmissionBudget()
        let media = 1_000_000.0
        var allowed = 0
        // Two seconds of NACKs for 100 packets of 1240 bytes every 100 ms.
        for tick in 0..<20 {
            for _ in 0..<100 where budget.allow(bytes: 1240, mediaRate: media, at: Double(tick) * 0.1) { allowed += 1 }
        }
        let sentBits = Double(allowed * 1240 * 8)
        // The first bucket (half a second of the budget) and then the budget's rate for two seconds.
        let most = media * RetransmissionBudget.share * (2 + RetransmissionBudget.depth)
        #expect(sentBits <= most + 1240 * 8 && sentBits >= most * 0.7, "\(sentBits) bits resent")
        // A low rung still gets the floor; nonsense rates count as none.
        var low = RetransmissionBudget()
        let first = low.allow(bytes: 1240, mediaRate: .nan, at: 0)
        #expect(first)
        var count = 1
        while low.allow(bytes: 1240, mediaRate: 100_000, at: 0) { count += 1 }
        #expect(Double(count * 1240 * 8) <= RetransmissionBudget.floor * RetransmissionBudget.depth + 1240 * 8)
        // After a quiet second the bucket is full again.
        let afterQuiet = low.allow(bytes: 1240, mediaRate: 100_000, at: 1)
        #expect(afterQuiet)
    }
}
