/// The least playout delay a viewer's browser is asked for, through libwebrtc's playout-delay
/// RTP header extension: long enough for its rung's keyframes to cross its link.
///
/// A keyframe is about a quarter of its rung's GOP (480p's 29 KB in 250 KB), so where a rung
/// fills most of a link its keyframe takes 0.2 s to cross while other pictures take a frame's
/// time. Chromium starts its video jitter buffer at about 50 ms and grows it a little with each
/// late keyframe: on a 1.3 Mbit/s link it froze 0.2 s on each of 480p's first keyframes while its
/// target took 10–20 s to grow to 0.25 s (run AN). Told the crossing time with the first
/// keyframe, it holds pictures that long from then on. Where keyframes cross in under
/// `threshold` nothing is asked, so a wide link keeps Chromium's own low delay.
///
/// Pure: the caller says what time it is and what the path drains at.
public struct KeyframePlayoutDelay: Sendable {
    /// Crossing times under this ask nothing: Chromium counts a freeze only when a picture comes
    /// 150 ms later than its frame interval, and its own target covers the rest.
    public static let threshold = 0.15
    /// Beyond this the rung is not one the link carries (the switching policy moves the viewer).
    public static let ceiling = 0.5
    /// A delay asked for is kept this long after the last keyframe that needed it (seconds): a
    /// browser lowering its delay catches up by playing faster, and the link may fall again.
    public static let hold = 10.0
    /// The most the browser may hold pictures, sent with each minimum: libwebrtc's own default
    /// (a maximum under 0.5 s would switch Chromium to its low-latency renderer).
    public static let maximum = 10.0
    /// RTP, the header extensions and SRTP's tag per packet of about 1,200 bytes of payload.
    static let overhead = 1.04

    private var keyframeBytes = 0
    private var asked = 0.0
    private var askedAt = -Double.infinity

    public init() {}

    /// The delay asked now (seconds, in the extension's 10 ms steps).
    public var minimum: Double { asked }

    /// A keyframe of `bytes` leaves for the viewer (its rung's current size).
    public mutating func keyframe(bytes: Int) {
        keyframeBytes = bytes
    }

    /// What to ask for now, given the rate the viewer's path drains at (bit/s).
    @discardableResult
    public mutating func update(drainRate: Double, at now: Double) -> Double {
        var crossing = 0.0
        if drainRate.isFinite, drainRate > 0 {
            crossing = Double(keyframeBytes) * 8 * Self.overhead / drainRate
        }
        let wanted = crossing < Self.threshold ? 0 : (min(Self.ceiling, crossing) * 100).rounded(.up) / 100
        if wanted >= asked {
            asked = wanted
            if wanted > 0 { askedAt = now }
        } else if now - askedAt > Self.hold {
            asked = wanted
            askedAt = now
        }
        return asked
    }

    /// The extension's three bytes: the minimum and the maximum, 12 bits each in 10 ms units.
    public static func payload(minimum: Double) -> (UInt8, UInt8, UInt8) {
        let low = UInt16(max(0, min(4095, (minimum * 100).rounded())))
        let high = UInt16(min(4095, (maximum * 100).rounded()))
        return (UInt8(low >> 4), UInt8((low & 0xF) << 4 | high >> 8), UInt8(high & 0xFF))
    }
}
