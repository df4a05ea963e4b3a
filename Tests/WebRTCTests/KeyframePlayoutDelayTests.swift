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
    /// that needed it; a higher need is asked for at once.
    @Test func theDelayFallsOnlyAfterItsHold() {
        var delay = KeyframePlayoutDelay()
        delay.keyframe(bytes: 29_000)
        #expect(delay.update(drainRate: 1_300_000, at: 10) == 0.19)
        #expect(delay.update(drainRate: 10_000_000, at: 15) == 0.19)
        #expect(delay.update(drainRate: 1_000_000, at: 16) == 0.25)
        #expect(delay.update(drainRate: 10_000_000, at: 25) == 0.25)
        #expect(delay.update(drainRate: 10_000_000, at: 26.5) == 0)
        // Nothing known about the path: nothing asked.
        var fresh = KeyframePlayoutDelay()
        fresh.keyframe(bytes: 29_000)
        #expect(fresh.update(drainRate: 0, at: 1) == 0 && fresh.update(drainRate: .nan, at: 2) == 0)
    }

    /// A queue on the path deeper than `deepQueue` asks the browser to render pictures at once
    /// (minimum and maximum 0) until `atOnceHold` seconds after the last such queue; the
    /// keyframe delay it went on tracking meanwhile then grows back at `regrowth`, not whole. A
    /// keyframe's own queue on a link its rung nearly fills asks nothing of the kind.
    @Test func aDeepQueueOnThePathAsksForPicturesAtOnceAndTheDelayGrowsBackAfter() {
        var delay = KeyframePlayoutDelay()
        delay.keyframe(bytes: 29_000)
        #expect(delay.update(drainRate: 1_300_000, pathQueue: 0.3, at: 1) == 0.19)
        #expect(!delay.rendersAtOnce && delay.ask == (0.19, KeyframePlayoutDelay.maximum))
        // The link falls under a full queue: 2.4 s of it.
        #expect(delay.update(drainRate: 400_000, pathQueue: 2.4, at: 2) == 0)
        #expect(delay.rendersAtOnce && delay.ask == (0, 0))
        // The queue drains; pictures are still rendered at once within the hold.
        delay.update(drainRate: 400_000, pathQueue: 0.05, at: 2 + KeyframePlayoutDelay.atOnceHold)
        #expect(delay.rendersAtOnce)
        // After it, the keyframe delay (29 KB over 400 kbit/s: the ceiling) grows back from nothing.
        let end = 2.5 + KeyframePlayoutDelay.atOnceHold
        #expect(delay.update(drainRate: 400_000, pathQueue: 0.05, at: end) == 0)
        #expect(!delay.rendersAtOnce && delay.ask == (0, KeyframePlayoutDelay.maximum))
        #expect(delay.update(drainRate: 400_000, at: end + 2) == 0.2)
        #expect(delay.update(drainRate: 400_000, at: end + 4.5) == 0.45)
        #expect(delay.update(drainRate: 400_000, at: end + 6) == KeyframePlayoutDelay.ceiling)
        #expect(delay.update(drainRate: 400_000, at: end + 9) == KeyframePlayoutDelay.ceiling)
        let (a, b, c) = KeyframePlayoutDelay.payload(minimum: 0, maximum: 0)
        #expect(a == 0 && b == 0 && c == 0)
    }

    /// The extension's bytes: 12 bits of minimum then 12 of maximum, in 10 ms units.
    @Test func theExtensionCarriesTheMinimumAndLibwebrtcsDefaultMaximum() {
        let (a, b, c) = KeyframePlayoutDelay.payload(minimum: 0.19)
        let minimum = Int(a) << 4 | Int(b) >> 4, maximum = Int(b & 0xF) << 8 | Int(c)
        #expect(minimum == 19 && maximum == 1000)
        let (x, y, _) = KeyframePlayoutDelay.payload(minimum: 0)
        #expect(x == 0 && y >> 4 == 0)
    }
}
