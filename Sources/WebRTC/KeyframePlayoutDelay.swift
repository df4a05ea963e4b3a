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
/// After the path's queue was deep, the browser is asked to render pictures as soon as they
/// are decoded instead (`rendersAtOnce`: a minimum and a maximum of 0, which libwebrtc takes as
/// "as soon as possible", as any minimum of 0 with a maximum of at most 0.5 s). Chromium maps
/// each picture's RTP timestamp to the time it should play by what it learned from arrivals
/// (its timestamp extrapolator). While a queue on the path drains, pictures sent at the media's
/// pace arrive at the link's, a fifth of it on a top that met a 400 kbit/s link, and Chromium
/// learned that pace: the next rung's pictures, arriving on time after the move down, were
/// scheduled seconds ahead and held undecoded for 3 s (libwebrtc's longest wait for a frame),
/// then about a GOP of them dropped. In 8 of 12 starts of runs CM and CO the viewer froze 3.0–4.6 s
/// that way with nothing lost after the drain; with every picture rendered at once (run CR) no
/// start dropped a picture, but keyframes froze again on links their rung nearly fills. So this
/// holds only `atOnceHold` seconds after the last deep queue, by when the browser has relearned
/// the pace from pictures arriving on time, and the keyframe delay then grows back (runs CV, CW:
/// 1.56 s frozen a start against main's 2.71 s, 0–18 pictures dropped against up to 97).
///
/// Pure: the caller says what time it is, what the path drains at and the queue ahead on it.
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
    /// A queue ahead of a picture sent now deeper than this (seconds) is one whose drain the
    /// browser learns a wrong pace from: pictures more than a second late, arriving at a
    /// fraction of the media's pace. The congestion window holds what is on the path to about a
    /// third of a second of what the viewer's estimate drains (`WebRTCViewer.congestionWindow`),
    /// so only a link that fell to a third of it or less under what was already sent gets
    /// there. With 0.4 s of the queue feedback reported (run CU), a 3G trace's falls by a fifth
    /// got there too, and the keyframes rendered at once and the delay asked whole after froze
    /// 2.4 s in two minutes.
    public static let deepQueue = 1.0
    /// How long pictures are rendered at once after the last deep queue (seconds).
    public static let atOnceHold = 6.0
    /// After pictures were rendered at once, the delay asked grows back at most this fast
    /// (seconds a second), libwebrtc's own most for its delay: Chromium takes a delay asked
    /// after none at once, and the keyframe delay asked whole froze it that long (0.27 and
    /// 0.48 s in run CU). Grown slowly, it plays a little slower instead.
    public static let regrowth = 0.1
    /// RTP, the header extensions and SRTP's tag per packet of about 1,200 bytes of payload.
    static let overhead = 1.04

    private var keyframeBytes = 0
    /// What the rung's keyframes need, and since when.
    private var needed = 0.0
    private var neededAt = -Double.infinity
    private var deepQueueAt = -Double.infinity
    /// When pictures were last rendered at once (nil: not since the delay grew back).
    private var atOnceEndedAt: Double?

    public init() {}

    /// The delay asked now (seconds, in the extension's 10 ms steps): 0 while pictures are
    /// rendered at once.
    public private(set) var minimum = 0.0

    /// Whether the browser is asked to render pictures as soon as they are decoded.
    public private(set) var rendersAtOnce = false

    /// What the extension asks now: the least and the most the browser may hold pictures (seconds).
    public var ask: (minimum: Double, maximum: Double) { rendersAtOnce ? (0, 0) : (minimum, Self.maximum) }

    /// A keyframe of `bytes` leaves for the viewer (its rung's current size).
    public mutating func keyframe(bytes: Int) {
        keyframeBytes = bytes
    }

    /// What to ask for now, given the rate the viewer's path drains at (bit/s) and the queue a
    /// picture sent now meets there (seconds, `TransportFeedbackLink.queueAhead`); returns `minimum`.
    @discardableResult
    public mutating func update(drainRate: Double, pathQueue: Double = 0, at now: Double) -> Double {
        var crossing = 0.0
        if drainRate.isFinite, drainRate > 0 {
            crossing = Double(keyframeBytes) * 8 * Self.overhead / drainRate
        }
        let wanted = crossing < Self.threshold ? 0 : (min(Self.ceiling, crossing) * 100).rounded(.up) / 100
        if wanted >= needed {
            needed = wanted
            if wanted > 0 { neededAt = now }
        } else if now - neededAt > Self.hold {
            needed = wanted
            neededAt = now
        }
        if pathQueue > Self.deepQueue { deepQueueAt = now }
        let atOnce = now - deepQueueAt <= Self.atOnceHold
        if rendersAtOnce, !atOnce { atOnceEndedAt = now }
        rendersAtOnce = atOnce
        minimum = atOnce ? 0 : needed
        if !atOnce, let ended = atOnceEndedAt {
            let grown = ((now - ended) * Self.regrowth * 100).rounded(.down) / 100
            if grown >= needed { atOnceEndedAt = nil } else { minimum = grown }
        }
        return minimum
    }

    /// The extension's three bytes: the minimum and the maximum, 12 bits each in 10 ms units.
    public static func payload(minimum: Double, maximum: Double = Self.maximum) -> (UInt8, UInt8, UInt8) {
        let low = UInt16(max(0, min(4095, (minimum * 100).rounded())))
        let high = UInt16(max(0, min(4095, (maximum * 100).rounded())))
        return (UInt8(low >> 4), UInt8((low & 0xF) << 4 | high >> 8), UInt8(high & 0xFF))
    }
}
