/// A time base or frame rate: a fraction of a second per tick (`1/90000`) or frames per second (`30000/1001`).
public struct Rational: Sendable, Hashable, CustomStringConvertible {
    public var numerator: Int32
    public var denominator: Int32

    public init(_ numerator: Int32, _ denominator: Int32) {
        self.numerator = numerator
        self.denominator = denominator
    }

    /// A frame rate given in frames per second, to a thousandth (29.97 is 29970/1000).
    public init(framesPerSecond rate: Double) {
        self.init(Int32((rate * 1000).rounded()), 1000)
    }

    public var isValid: Bool { numerator > 0 && denominator > 0 }
    public var doubleValue: Double { isValid ? Double(numerator) / Double(denominator) : 0 }
    public var description: String { "\(numerator)/\(denominator)" }

    /// Converts a timestamp in this time base to another exactly, rounding half away from zero
    /// (FFmpeg's `av_rescale_q`). A result beyond Int64 saturates; an invalid base gives 0.
    public func rescale(_ value: Int64, to other: Rational) -> Int64 {
        guard isValid, other.isValid else { return 0 }
        // value · (num · other.den) / (den · other.num): both factors fit in 62 bits, the product in 128.
        let multiplier = Int64(numerator) * Int64(other.denominator)
        let divisor = Int64(denominator) * Int64(other.numerator)
        return Self.multiplyDivideRounded(value, multiplier, divisor)
    }

    public func seconds(_ value: Int64) -> Double {
        Double(value) * Double(numerator) / Double(denominator)
    }

    /// `value · multiplier / divisor` rounded half away from zero, in 128 bits; `divisor` > 0, `multiplier` ≥ 0.
    static func multiplyDivideRounded(_ value: Int64, _ multiplier: Int64, _ divisor: Int64) -> Int64 {
        let magnitude = value.magnitude.multipliedFullWidth(by: multiplier.magnitude)
        let half = UInt64(divisor) / 2
        // Add half the divisor to the 128-bit product, then divide.
        let (low, carry) = magnitude.low.addingReportingOverflow(half)
        let high = magnitude.high &+ (carry ? 1 : 0)
        guard high < UInt64(divisor) else { return value < 0 ? .min + 1 : .max }
        let quotient = UInt64(divisor).dividingFullWidth((high: high, low: low)).quotient
        guard quotient <= UInt64(Int64.max) else { return value < 0 ? .min + 1 : .max }
        return value < 0 ? -Int64(quotient) : Int64(quotient)
    }
}

/// A point (or a length) on a media timeline in whole ticks of a time base: how the engine
/// carries time from the demuxer to the grid, the segmenter and the RTP packetizers, so a
/// live job never accumulates rounding however long it runs. Seconds appear only in reports.
public struct MediaTime: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var ticks: Int64
    public var timeBase: Rational

    public init(ticks: Int64, timeBase: Rational) {
        self.ticks = ticks
        self.timeBase = timeBase
    }

    /// The length of `seconds` in `timeBase`, rounded to the nearest tick: for configured
    /// durations (a 2 s keyframe interval), not for timestamps.
    public init(seconds: Double, timeBase: Rational) {
        let ticks = timeBase.isValid && seconds.isFinite ? (seconds * Double(timeBase.denominator) / Double(timeBase.numerator)).rounded() : 0
        self.init(ticks: ticks >= 0x1p62 ? 1 << 62 : ticks <= -0x1p62 ? -(1 << 62) : Int64(ticks), timeBase: timeBase)
    }

    public static func zero(_ timeBase: Rational) -> MediaTime { MediaTime(ticks: 0, timeBase: timeBase) }

    public var seconds: Double { timeBase.seconds(ticks) }
    public var description: String { "\(ticks)×\(timeBase)" }

    public func rescaled(to other: Rational) -> MediaTime {
        other == timeBase ? self : MediaTime(ticks: timeBase.rescale(ticks, to: other), timeBase: other)
    }

    /// Ticks of `other`'s time base, the way RTP and muxers want them.
    public func ticks(in other: Rational) -> Int64 { rescaled(to: other).ticks }

    /// Both sides in the left side's time base (the usual case is one base throughout).
    public static func + (lhs: MediaTime, rhs: MediaTime) -> MediaTime {
        MediaTime(ticks: lhs.ticks &+ rhs.ticks(in: lhs.timeBase), timeBase: lhs.timeBase)
    }

    public static func - (lhs: MediaTime, rhs: MediaTime) -> MediaTime {
        MediaTime(ticks: lhs.ticks &- rhs.ticks(in: lhs.timeBase), timeBase: lhs.timeBase)
    }

    /// Exact across time bases: a·n₁/d₁ against b·n₂/d₂ by cross-multiplying in 128 bits. A time
    /// with an invalid base (zero or negative, from a damaged source) is the instant 0, as rescaling
    /// makes it, so ordering, equality and hashing agree for every input.
    public static func < (lhs: MediaTime, rhs: MediaTime) -> Bool {
        guard lhs.timeBase.isValid, rhs.timeBase.isValid else { return lhs.orZero < rhs.orZero }
        if lhs.timeBase == rhs.timeBase { return lhs.ticks < rhs.ticks }
        let left = lhs.ticks.multipliedFullWidth(by: Int64(lhs.timeBase.numerator) * Int64(rhs.timeBase.denominator))
        let right = rhs.ticks.multipliedFullWidth(by: Int64(rhs.timeBase.numerator) * Int64(lhs.timeBase.denominator))
        return left.high != right.high ? left.high < right.high : left.low < right.low
    }

    private var orZero: MediaTime { timeBase.isValid ? self : .zero(Rational(1, 1)) }

    /// Equal instants, whatever their time bases.
    public static func == (lhs: MediaTime, rhs: MediaTime) -> Bool { !(lhs < rhs) && !(rhs < lhs) }

    public func hash(into hasher: inout Hasher) {
        // Equal instants must hash alike: hash the value in a common base (nanoseconds).
        hasher.combine(timeBase.rescale(ticks, to: Rational(1, 1_000_000_000)))
    }
}
