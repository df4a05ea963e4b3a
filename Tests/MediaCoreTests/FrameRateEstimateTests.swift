import MediaCore
import Testing

@Suite struct FrameRateEstimateTests {
    /// Presentation times as an x264 publisher sends them: decode order with a B-pyramid
    /// (I P B b b P B b b …), each time shifted by up to `jitter` ticks.
    static func decodeOrder(count: Int, gap: Int64, start: Int64 = 1_234_567, jitter: Int64 = 0) -> [Int64] {
        var generator = SystemRandomNumberGenerator()
        let displayOrder = (0..<Int64(count)).map { start + $0 * gap }
        var decode: [Int64] = [displayOrder[0]]
        var index = 1
        while index + 3 < count {
            decode += [displayOrder[index + 3], displayOrder[index + 1], displayOrder[index], displayOrder[index + 2]]
            index += 4
        }
        decode += displayOrder[index...]
        return decode.map { $0 + (jitter > 0 ? Int64.random(in: -jitter...jitter, using: &generator) : 0) }
    }

    static func estimate(_ times: [Int64], minimumPictures: Int = FrameRateEstimate.capacity) -> Double? {
        var estimate = FrameRateEstimate(clockRate: 90_000)
        times.forEach { estimate.add(presentationTicks: $0) }
        return estimate.frameRate(minimumPictures: minimumPictures)
    }

    static let rates: [(gap: Int64, rate: Double)] = [(3600, 25), (3000, 30), (3003, 30_000.0 / 1001), (1500, 60), (1800, 50), (3750, 24),
                                                       (3754, 24_000.0 / 1001)]

    @Test(arguments: rates)
    func theRateComesFromTheSortedTimes(gap: Int64, rate: Double) {
        #expect(Self.estimate(Self.decodeOrder(count: 30, gap: gap)) == rate)
    }

    @Test func captureJitterAndAMissingPictureDoNotMoveIt() {
        // A phone stamps capture times: ±4 ms around 40 ms (25 fps).
        for _ in 0..<100 {
            #expect(Self.estimate(Self.decodeOrder(count: 20, gap: 3600, jitter: 360)) == 25)
        }
        var times = Self.decodeOrder(count: 20, gap: 3000)
        times.remove(at: 5)
        #expect(Self.estimate(times) == 30)
    }

    @Test func anUncommonRateIsKeptToAThousandth() {
        #expect(Self.estimate(Self.decodeOrder(count: 20, gap: 6923)) == 13.0)   // 13.0002 snaps to no common rate
        #expect(Self.estimate(Self.decodeOrder(count: 20, gap: 4000)) == 22.5)
    }

    @Test func tooFewPicturesOrNoPlausibleGapGiveNothing() {
        #expect(Self.estimate(Self.decodeOrder(count: 11, gap: 3000)) == nil, "fewer than the pictures asked for")
        #expect(Self.estimate(Self.decodeOrder(count: 3, gap: 3000), minimumPictures: 3) == 30)
        #expect(Self.estimate(Array(repeating: 90_000, count: 20)) == nil, "one time repeated has no gap")
        #expect(Self.estimate(Self.decodeOrder(count: 20, gap: 180_000)) == nil, "half a frame per second")
        #expect(Self.estimate(Self.decodeOrder(count: 20, gap: 300)) == nil, "300 frames per second")
    }

    /// Timestamps come from the network: wild values (wrapped, extreme, negative) never trap and
    /// never give a rate outside 1–240 fps.
    @Test func arbitraryTimestampsNeverTrapAndNeverGiveAnImplausibleRate() {
        var generator = SystemRandomNumberGenerator()
        let extremes: [Int64] = [.min, .max, 0, -1, 1, .min + 1, .max - 1]
        for _ in 0..<5000 {
            var estimate = FrameRateEstimate(clockRate: 90_000)
            for _ in 0..<Int.random(in: 0...20, using: &generator) {
                let time = Bool.random(using: &generator) ? extremes.randomElement(using: &generator)!
                                                          : Int64.random(in: -1_000_000...1_000_000, using: &generator)
                estimate.add(presentationTicks: time)
            }
            if let rate = estimate.frameRate(minimumPictures: 2) { #expect((1...240).contains(rate)) }
        }
    }
}
