import CFFmpeg

/// A time base or frame rate, mirroring AVRational without exposing the C type.
public struct Rational: Sendable, Hashable, CustomStringConvertible {
    public var numerator: Int32
    public var denominator: Int32

    public init(_ numerator: Int32, _ denominator: Int32) {
        self.numerator = numerator
        self.denominator = denominator
    }

    init(_ value: AVRational) {
        self.init(value.num, value.den)
    }

    var av: AVRational { AVRational(num: numerator, den: denominator) }

    public var isValid: Bool { numerator > 0 && denominator > 0 }
    public var doubleValue: Double { isValid ? Double(numerator) / Double(denominator) : 0 }
    public var description: String { "\(numerator)/\(denominator)" }

    /// Converts a timestamp in this time base to another, rounding to nearest.
    public func rescale(_ value: Int64, to other: Rational) -> Int64 {
        av_rescale_q(value, av, other.av)
    }

    public func seconds(_ value: Int64) -> Double {
        Double(value) * Double(numerator) / Double(denominator)
    }
}

/// FFmpeg's marker for "no timestamp".
public let noTimestamp: Int64 = cffmpeg_nopts_value()
