import Testing
@testable import WebRTC

/// What a viewer's browser is asked to hold pictures for, on made-up keyframes and links.
@Suite struct KeyframePlayoutDelayTests {
    /// 480p's 29 KB keyframes on a 1.3 Mbit/s link take 0.19 s (Chromium froze on each); the
    /// top's 60 KB on a wide link's 3.4 Mbit/s estimate take 0.15 s and ask nothing.
    @Test func aKeyframeThatTakesLongerThanAFreezeAsksForItsCrossingTime() {
        var delay = KeyframePlayoutDelay()
        delay.keyframe(bytes: 60_000)
        #expect(delay.update(drainRate: 3_400_000, at: 1) == 0)
        delay.keyframe(bytes: 29_000)
        let asked = delay.update(drainRate: 1_300_000, at: 2)
        #expect(asked == 0.19, "asked \(asked)")
        // In the extension's 10 ms steps, never more than the ceiling.
        delay.keyframe(bytes: 200_000)
        #expect(delay.update(drainRate: 1_000_000, at: 3) == KeyframePlayoutDelay.ceiling)
    }

    /// A link that widens again lowers the delay only after `hold` seconds without a keyframe
    /// that needed it; a higher need between keyframes grows at `regrowth`.
    @Test func theDelayFallsOnlyAfterItsHold() {
        var delay = KeyframePlayoutDelay()
        delay.keyframe(bytes: 29_000)
        #expect(delay.update(drainRate: 1_300_000, at: 10) == 0.19)
        #expect(delay.update(drainRate: 10_000_000, at: 15) == 0.19)
        #expect(delay.update(drainRate: 1_000_000, at: 15.2) == 0.21)
        #expect(delay.update(drainRate: 1_000_000, at: 16) == 0.25)
        #expect(delay.update(drainRate: 10_000_000, at: 25) == 0.25)
        #expect(delay.update(drainRate: 10_000_000, at: 26.5) == 0)
        // Nothing known about the path: nothing asked.
        var fresh = KeyframePlayoutDelay()
        fresh.keyframe(bytes: 29_000)
        #expect(fresh.update(drainRate: 0, at: 1) == 0 && fresh.update(drainRate: .nan, at: 2) == 0)
    }

    /// A path that narrows between keyframes raises the delay at libwebrtc's own pace, picture by
    /// picture (a minimum raised at once is a freeze of that much), so the next keyframe finds
    /// most of its crossing time held; a keyframe still crossing takes its need at once.
    @Test func aPathThatNarrowsBetweenKeyframesRaisesTheDelayAtRegrowth() {
        var delay = KeyframePlayoutDelay()
        delay.keyframe(bytes: 29_000)
        #expect(delay.update(drainRate: 10_000_000, at: 1) == 0)
        // Half a second on, the path drains 800 kbit/s: that keyframe would take 0.31 s.
        var asked: [Double] = []
        for picture in 0..<30 { asked.append(delay.update(drainRate: 800_000, at: 1.5 + Double(picture) / 30)) }
        #expect(asked.first == 0.05, "\(asked)")
        #expect(asked == asked.sorted() && zip(asked, asked.dropFirst()).allSatisfy { $1 - $0 < 0.0101 }, "\(asked)")
        #expect(abs(asked.last! - 0.14) < 0.011, "\(asked)")
        // Three seconds on, all of it is held; then the next keyframe, twice the size, is still
        // crossing at the next picture and asks its whole need.
        for picture in 0..<90 { delay.update(drainRate: 800_000, at: 2.5 + Double(picture) / 30) }
        #expect(delay.minimum == 0.31)
        delay.keyframe(bytes: 58_000)
        #expect(delay.update(drainRate: 800_000, at: 5.5) == KeyframePlayoutDelay.ceiling)
        // The first keyframe of a viewer, sent before its path's rate is known, asks its need at
        // the first picture that knows it, while it is still crossing.
        var fresh = KeyframePlayoutDelay()
        fresh.keyframe(bytes: 29_000)
        #expect(fresh.update(drainRate: 0, at: 1) == 0)
        #expect(fresh.update(drainRate: 1_300_000, at: 1.1) == 0.19)
    }

    /// A second of pictures at `rate` (bit/s), 30 a second, handed over from RTP time `from`.
    static func pictures(_ delay: inout KeyframePlayoutDelay, rate: Double, from: UInt32 = 0) {
        for index in 0..<31 { delay.picture(bytes: Int(rate / 8 / 30), timestamp: from &+ UInt32(index * 3000)) }
    }

    /// A queue on the path deeper than `deepQueue`, while the pictures going into it are more
    /// than it drains, asks the browser to render pictures at once (minimum and maximum 0) until
    /// that queue has drained and `relearning` seconds after; the keyframe delay it went on
    /// tracking meanwhile then grows back at `regrowth`, not whole, and the maximum with it until
    /// `regrownMaximum`. A keyframe's own queue on a link its rung nearly fills asks nothing of the kind.
    @Test func aDeepQueueOnThePathAsksForPicturesAtOnceAndTheDelayGrowsBackAfter() {
        var delay = KeyframePlayoutDelay()
        delay.keyframe(bytes: 29_000)
        Self.pictures(&delay, rate: 2_000_000)
        #expect(abs((delay.pictureRate ?? 0) - 2_000_000) < 1000, "\(delay.pictureRate ?? 0)")
        #expect(delay.update(drainRate: 1_300_000, pathQueue: 0.3, at: 1) == 0.19)
        #expect(!delay.rendersAtOnce && delay.ask == (0.19, KeyframePlayoutDelay.maximum))
        // The link falls under a full queue: 2.4 s of it at 400 kbit/s, the top's pictures at 2 Mbit/s.
        #expect(delay.update(drainRate: 1_300_000, pathQueue: 2.4, queueDrainRate: 400_000, at: 2) == 0)
        #expect(delay.rendersAtOnce && delay.ask == (0, 0))
        // The queue drains; pictures are still rendered at once while the browser relearns their pace.
        delay.update(drainRate: 400_000, pathQueue: 0.05, at: 4.4 + KeyframePlayoutDelay.relearning - 0.1)
        #expect(delay.rendersAtOnce)
        // After it, the keyframe delay (29 KB over 400 kbit/s: the ceiling) grows back from
        // 10 ms, and the most the browser may hold pictures grows with it: asked the default
        // maximum at once, Chromium would jump to its own jitter target.
        let end = 4.5 + KeyframePlayoutDelay.relearning
        #expect(delay.update(drainRate: 400_000, pathQueue: 0.05, at: end) == 0.01)
        #expect(!delay.rendersAtOnce && delay.ask == (0.01, 0.01))
        #expect(delay.update(drainRate: 400_000, at: end + 2) == 0.2)
        #expect(delay.ask == (0.2, 0.2))
        #expect(delay.update(drainRate: 400_000, at: end + 4.5) == 0.45)
        // The minimum stops at the keyframes' need; the maximum grows on, then is the default.
        #expect(delay.update(drainRate: 400_000, at: end + 6) == KeyframePlayoutDelay.ceiling)
        #expect(delay.ask == (KeyframePlayoutDelay.ceiling, 0.6))
        #expect(delay.update(drainRate: 400_000, at: end + 9) == KeyframePlayoutDelay.ceiling)
        #expect(delay.ask == (KeyframePlayoutDelay.ceiling, 0.9))
        #expect(delay.update(drainRate: 400_000, at: end + 10) == KeyframePlayoutDelay.ceiling)
        #expect(delay.ask == (KeyframePlayoutDelay.ceiling, KeyframePlayoutDelay.maximum))
        let (a, b, c) = KeyframePlayoutDelay.payload(minimum: 0, maximum: 0)
        #expect(a == 0 && b == 0 && c == 0)
    }

    /// A rung under its link's rate waits behind a queue without arriving slower than its
    /// pictures' pace: however deep, that queue renders nothing at once.
    @Test func aDeepQueueUnderPicturesTheLinkCarriesRendersNothingAtOnce() {
        var delay = KeyframePlayoutDelay()
        delay.keyframe(bytes: 8_000)
        Self.pictures(&delay, rate: 250_000)
        delay.update(drainRate: 400_000, pathQueue: 1.2, queueDrainRate: 400_000, at: 1)
        #expect(!delay.rendersAtOnce)
        // The same queue under the top's pictures does.
        Self.pictures(&delay, rate: 2_000_000, from: 93_000)
        delay.update(drainRate: 400_000, pathQueue: 1.2, queueDrainRate: 400_000, at: 2)
        #expect(delay.rendersAtOnce)
    }

    /// On a wide link the keyframes need nothing: after pictures were rendered at once, 10 ms
    /// is asked until the maximum has grown back, then nothing.
    @Test func afterPicturesAtOnceAWideLinkIsAskedNothingOnceTheMaximumHasGrown() {
        var wide = KeyframePlayoutDelay()
        wide.keyframe(bytes: 29_000)
        wide.update(drainRate: 10_000_000, pathQueue: 2.4, at: 1)
        #expect(wide.rendersAtOnce, "no pictures' rate known yet: the queue alone decides")
        let ended = 3.5 + KeyframePlayoutDelay.relearning
        #expect(wide.update(drainRate: 10_000_000, at: ended) == 0.01)
        #expect(wide.update(drainRate: 10_000_000, at: ended + 2.9) == 0.01)
        #expect(wide.ask == (0.01, 0.29))
        #expect(wide.update(drainRate: 10_000_000, at: ended + 10) == 0)
        #expect(wide.ask == (0, KeyframePlayoutDelay.maximum))
    }

    @Test func theExtensionCarriesTheMinimumAndLibwebrtcsDefaultMaximum() {
        let (a, b, c) = KeyframePlayoutDelay.payload(minimum: 0.19)
        let minimum = Int(a) << 4 | Int(b) >> 4, maximum = Int(b & 0xF) << 8 | Int(c)
        #expect(minimum == 19 && maximum == 1000)
        let (x, y, _) = KeyframePlayoutDelay.payload(minimum: 0)
        #expect(x == 0 && y >> 4 == 0)
    }
}
