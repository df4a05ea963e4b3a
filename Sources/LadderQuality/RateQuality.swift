import Foundation

/// One encode of a source at one size and one target rate, with what came out.
public struct RateQualityPoint: Sendable, Codable, Hashable {
    public var width: Int
    public var height: Int
    /// The rate asked of the encoder, bit/s.
    public var targetBitRate: Int
    /// The rate the encoder produced (video only), bit/s: the x axis of every curve.
    public var bitRate: Int
    /// The quality figure the curves are drawn with (PSNR Y by default), at display size.
    public var quality: Double
    /// Every figure, for the report and for choosing another metric.
    public var psnrY: Double
    public var psnrYUV: Double
    public var ssimAll: Double
    public var ssimDecibels: Double

    public init(width: Int, height: Int, targetBitRate: Int, bitRate: Int, quality: Double,
                psnrY: Double? = nil, psnrYUV: Double = 0, ssimAll: Double = 0, ssimDecibels: Double = 0) {
        self.psnrY = psnrY ?? quality
        self.width = width
        self.height = height
        self.targetBitRate = targetBitRate
        self.bitRate = bitRate
        self.quality = quality
        self.psnrYUV = psnrYUV
        self.ssimAll = ssimAll
        self.ssimDecibels = ssimDecibels
    }

    public var size: String { "\(width)x\(height)" }
}

/// The rate–quality analysis of per-title encoding (Netflix's convex hull): every resolution's
/// curve, the hull over all of them, and a ladder drawn from the hull.
public enum RateQuality {
    /// The upper convex hull of the points in (bit rate, quality): the best quality any
    /// resolution reaches at each rate, where mixing two encodes in time could not do better.
    /// Sorted by rate. Points below it are never worth streaming.
    public static func convexHull(_ points: [RateQualityPoint]) -> [RateQualityPoint] {
        let sorted = points.sorted { ($0.bitRate, -$0.quality) < ($1.bitRate, -$1.quality) }
        var hull: [RateQualityPoint] = []
        for point in sorted {
            // A point at no higher quality than the hull's last, at a higher rate, is dominated.
            if let last = hull.last, point.quality <= last.quality { continue }
            while hull.count >= 2 {
                let a = hull[hull.count - 2], b = hull[hull.count - 1]
                // Drop b when it lies on or under the chord from a to the new point.
                let cross = Double(b.bitRate - a.bitRate) * (point.quality - a.quality)
                    - (b.quality - a.quality) * Double(point.bitRate - a.bitRate)
                if cross >= 0 { hull.removeLast() } else { break }
            }
            hull.append(point)
        }
        return hull
    }

    /// `count` rates from `minimum` to `maximum`, evenly spaced in log rate: each rung the same
    /// ratio above the next, so every switch is the same relative step for a player.
    public static func spacedRates(count: Int, minimum: Int, maximum: Int) -> [Int] {
        guard count > 1, maximum > minimum else { return [max(minimum, maximum)] }
        let ratio = pow(Double(maximum) / Double(minimum), 1 / Double(count - 1))
        return (0..<count).map { Int((Double(minimum) * pow(ratio, Double($0))).rounded()) }
    }

    public struct SuggestedRung: Sendable, Codable, Hashable {
        public var width: Int
        public var height: Int
        public var bitRate: Int
        /// The quality the size's curve predicts at that rate.
        public var predictedQuality: Double
    }

    /// A ladder of `count` rungs between `minimum` and `maximum` bit/s, spaced evenly in log rate.
    /// Each rate is a target the encoder is asked for, and x264 does not produce it exactly:
    /// larger sizes undershoot low targets more (asked 600 k, a 540p encode of easy content
    /// makes 460 k). So every size is judged by the encode it would give at that target, read
    /// off its own grid (quality and produced rate against the target, in log rate), and the one
    /// furthest above the hull's tangent there wins: bits a size leaves unspent are credited at
    /// the hull's local dB per log-rate, so a size wins by efficiency, not by spending less.
    /// The larger size wins an exact tie. A higher rung never gets a smaller size than a lower
    /// one (a player stepping up never loses pixels). Sorted from the top down.
    public static func suggestLadder(points: [RateQualityPoint], count: Int, minimum: Int, maximum: Int) -> [SuggestedRung] {
        let curves = Dictionary(grouping: points) { Size(width: $0.width, height: $0.height) }
        let hull = convexHull(points)
        var rungs: [SuggestedRung] = []
        for rate in spacedRates(count: count, minimum: minimum, maximum: maximum) {
            let target = Double(rate)
            let slope = hullSlope(hull, at: target)
            let candidates = curves.compactMap { size, curve -> (size: Size, quality: Double, score: Double)? in
                guard let encode = predictedEncode(of: curve, atTarget: target) else { return nil }
                return (size, encode.quality, encode.quality - slope * log(encode.bitRate / target))
            }
            guard let chosen = candidates.max(by: { ($0.score, $0.size.pixels) < ($1.score, $1.size.pixels) }) else { continue }
            rungs.append(SuggestedRung(width: chosen.size.width, height: chosen.size.height, bitRate: rate, predictedQuality: chosen.quality))
        }
        // From the bottom up, a rung is at least as large as the one below it.
        for index in rungs.indices.dropFirst() where rungs[index].width * rungs[index].height < rungs[index - 1].width * rungs[index - 1].height {
            rungs[index].width = rungs[index - 1].width
            rungs[index].height = rungs[index - 1].height
        }
        return rungs.reversed()
    }

    /// What one size's encode at `target` bit/s would give: quality and produced rate, linear in
    /// log target rate between its grid points. Below its lowest target, nil (it was never tried
    /// that low, so it must not win there by a guess); above its highest, its best quality holds
    /// and the rate grows with the target.
    static func predictedEncode(of curve: [RateQualityPoint], atTarget target: Double) -> (quality: Double, bitRate: Double)? {
        let sorted = curve.filter { $0.targetBitRate > 0 && $0.bitRate > 0 }.sorted { $0.targetBitRate < $1.targetBitRate }
        guard let first = sorted.first, let last = sorted.last, target >= Double(first.targetBitRate) else { return nil }
        if target >= Double(last.targetBitRate) {
            return (last.quality, Double(last.bitRate) * target / Double(last.targetBitRate))
        }
        for (a, b) in zip(sorted, sorted.dropFirst()) where target <= Double(b.targetBitRate) {
            guard b.targetBitRate > a.targetBitRate else { return (max(a.quality, b.quality), Double(b.bitRate)) }
            let t = (log(target) - log(Double(a.targetBitRate))) / (log(Double(b.targetBitRate)) - log(Double(a.targetBitRate)))
            let logRate = log(Double(a.bitRate)) + t * (log(Double(b.bitRate)) - log(Double(a.bitRate)))
            return (a.quality + t * (b.quality - a.quality), exp(logRate))
        }
        return (last.quality, Double(last.bitRate))
    }

    /// The hull's slope at `bitRate` in quality per unit of log rate (the segment around it, or
    /// the nearest at either end); 0 for a hull of one point.
    static func hullSlope(_ hull: [RateQualityPoint], at bitRate: Double) -> Double {
        let segments = Array(zip(hull, hull.dropFirst()))
        guard !segments.isEmpty else { return 0 }
        let segment = segments.first { Double($0.1.bitRate) >= bitRate } ?? segments[segments.count - 1]
        let run = log(Double(segment.1.bitRate)) - log(Double(segment.0.bitRate))
        return run > 0 ? max(0, (segment.1.quality - segment.0.quality) / run) : 0
    }

    struct Size: Hashable {
        var width: Int
        var height: Int
        var pixels: Int { width * height }
    }
}

/// Bjøntegaard's delta rate: the average bit-rate difference between two rate–quality curves over
/// the quality range both cover, with piecewise cubic Hermite (PCHIP) interpolation of log rate
/// against quality, as JVET's and AOM's tools compute it now (the original cubic fit overshoots
/// with few points). Negative means the test curve needs fewer bits for the same quality.
public enum BjontegaardDelta {
    /// nil when the curves share no quality range or have fewer than two distinct points each.
    public static func rate(reference: [(bitRate: Double, quality: Double)], test: [(bitRate: Double, quality: Double)]) -> Double? {
        guard let a = monotone(reference), let b = monotone(test) else { return nil }
        let low = max(a.first!.quality, b.first!.quality)
        let high = min(a.last!.quality, b.last!.quality)
        guard high > low else { return nil }
        let integralA = integrate(a, from: low, to: high)
        let integralB = integrate(b, from: low, to: high)
        let averageDifference = (integralB - integralA) / (high - low)
        return exp(averageDifference) - 1
    }

    typealias Knot = (quality: Double, logRate: Double)

    /// Points sorted by quality, log rate; a curve whose rate falls as quality rises keeps only
    /// its efficient points (more bits for less quality is never on an encoder's curve).
    static func monotone(_ points: [(bitRate: Double, quality: Double)]) -> [Knot]? {
        var knots: [Knot] = []
        for point in points.filter({ $0.bitRate > 0 && $0.quality.isFinite }).sorted(by: { $0.quality < $1.quality }) {
            let knot = (quality: point.quality, logRate: log(point.bitRate))
            if let last = knots.last, knot.quality <= last.quality || knot.logRate <= last.logRate { continue }
            knots.append(knot)
        }
        return knots.count >= 2 ? knots : nil
    }

    /// ∫ of the PCHIP interpolant of log rate over quality in [low, high].
    static func integrate(_ knots: [Knot], from low: Double, to high: Double) -> Double {
        let slopes = pchipSlopes(knots)
        var total = 0.0
        for i in 0..<(knots.count - 1) {
            let x0 = knots[i].quality, x1 = knots[i + 1].quality
            let start = max(low, x0), end = min(high, x1)
            guard end > start else { continue }
            // Simpson's rule on the cubic is exact.
            let value = { (x: Double) in hermite(x, x0: x0, x1: x1, y0: knots[i].logRate, y1: knots[i + 1].logRate, d0: slopes[i], d1: slopes[i + 1]) }
            total += (end - start) / 6 * (value(start) + 4 * value((start + end) / 2) + value(end))
        }
        return total
    }

    static func hermite(_ x: Double, x0: Double, x1: Double, y0: Double, y1: Double, d0: Double, d1: Double) -> Double {
        let h = x1 - x0, t = (x - x0) / h
        let t2 = t * t, t3 = t2 * t
        return (2 * t3 - 3 * t2 + 1) * y0 + (t3 - 2 * t2 + t) * h * d0 + (-2 * t3 + 3 * t2) * y1 + (t3 - t2) * h * d1
    }

    /// Fritsch–Carlson slopes: the interpolant keeps the data's monotonicity (no overshoot).
    static func pchipSlopes(_ knots: [Knot]) -> [Double] {
        let n = knots.count
        let h = (0..<(n - 1)).map { knots[$0 + 1].quality - knots[$0].quality }
        let delta = (0..<(n - 1)).map { (knots[$0 + 1].logRate - knots[$0].logRate) / h[$0] }
        guard n > 2 else { return [delta[0], delta[0]] }
        var d = [Double](repeating: 0, count: n)
        for k in 1..<(n - 1) {
            if delta[k - 1] * delta[k] > 0 {
                let w1 = 2 * h[k] + h[k - 1], w2 = h[k] + 2 * h[k - 1]
                d[k] = (w1 + w2) / (w1 / delta[k - 1] + w2 / delta[k])
            }
        }
        d[0] = endSlope(h0: h[0], h1: h[1], delta0: delta[0], delta1: delta[1])
        d[n - 1] = endSlope(h0: h[n - 2], h1: h[n - 3], delta0: delta[n - 2], delta1: delta[n - 3])
        return d
    }

    private static func endSlope(h0: Double, h1: Double, delta0: Double, delta1: Double) -> Double {
        var d = ((2 * h0 + h1) * delta0 - h0 * delta1) / (h0 + h1)
        if d * delta0 <= 0 { d = 0 } else if delta0 * delta1 <= 0, abs(d) > abs(3 * delta0) { d = 3 * delta0 }
        return d
    }
}
