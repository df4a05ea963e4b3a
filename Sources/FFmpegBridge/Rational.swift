import CFFmpeg
import MediaCore

/// The engine's `Rational` (MediaCore) to and from FFmpeg's AVRational; the C type stays in this module.
extension Rational {
    init(_ value: AVRational) {
        self.init(value.num, value.den)
    }

    var av: AVRational { AVRational(num: numerator, den: denominator) }
}

/// FFmpeg's marker for "no timestamp".
public let noTimestamp: Int64 = cffmpeg_nopts_value()
