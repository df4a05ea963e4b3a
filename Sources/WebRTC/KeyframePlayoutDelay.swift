import DequeModule

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
/// holds only while a queue drains that pictures went into faster than it drains, and
/// `relearning` seconds after, by when the browser has relearned the pace from pictures
/// arriving on time, and the delay then grows back, its maximum with its
/// minimum (runs CV, CW: 1.56 s frozen a start against main's 2.71 s, 0–18 pictures dropped
/// against up to 97).
///
/// The need is asked at once only while a keyframe is still crossing: libwebrtc clamps each
/// picture's render delay to the minimum asked, so a minimum raised between keyframes moves the
/// next picture's render time by the whole rise, a freeze of its own. A path that narrows between
/// keyframes raises it at `regrowth` instead, libwebrtc's own pace (the pictures play a little
/// slower), and the next keyframe finds most of its crossing time already held (runs DW–DY).
///
/// Pure: the caller says what time it is, what the path drains at, the queue ahead on it and
/// the pictures it hands over.
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
    /// Pictures are rendered at once while the queue ahead drains and this long after
    /// (seconds), for the browser to learn the pace of pictures arriving on time again.
    public static let relearning = 3.0
    /// A deep queue distorts the pace pictures arrive at only while the pictures going into it
    /// are more than the path drains, by this much: the top's pictures into a link fallen to a
    /// fifth of it arrive at a fifth of their pace. A rung under its link's rate, its pictures
    /// waiting behind a queue its congestion window allows (0.7 s of a 400 kbit/s link, run
    /// DD), arrives at its own pace, late: renewed by such a queue, 240p's keyframes were
    /// rendered at once, each frozen 0.2 s, for as long as the viewer stayed.
    public static let pacedOverDrain = 1.5
    /// The span of media the pictures' rate is taken over (seconds), and the most pictures kept
    /// for it (a second at 240 a second): a publisher whose timestamps stand still does not grow it.
    static let pictureRateSpan = 1.0
    static let picturesKept = 240
    /// The least delay asked while it grows back (seconds): a minimum of 0 under a maximum of
    /// 0.5 s or less is "at once" again to libwebrtc.
    static let leastRegrown = 0.01
    /// After pictures were rendered at once, the delay grows back at most this fast (seconds a
    /// second), libwebrtc's own most for its delay. While pictures render at once, libwebrtc
    /// goes on moving its own delay towards its jitter target, and renders at that delay
    /// (clamped to the minimum and maximum asked) the moment the ask allows: asked (0, 10 s)
    /// after (0, 0), Chromium jumped from some 20 ms to its 0.26 s target and froze that long
    /// (run CY's step; 0.27 and 0.48 s in run CU). So both the minimum and the maximum grow:
    /// the maximum from 10 ms at this rate, the minimum with it up to the keyframes' need, and
    /// Chromium plays a little slower instead of freezing.
    public static let regrowth = 0.1
    /// The grown maximum at which the ask is libwebrtc's default maximum again (seconds):
    /// over the jitter targets Chromium reaches on the links a rung is kept on (0.05–0.3 s).
    public static let regrownMaximum = 1.0
    /// RTP, the header extensions and SRTP's tag per packet of about 1,200 bytes of payload.
    static let overhead = 1.04

    private var keyframeBytes = 0
    /// What the rung's keyframes need, and since when.
    private var needed = 0.0
    private var neededAt = -Double.infinity
    /// Until when pictures are rendered at once.
    private var atOnceUntil = -Double.infinity
    /// The last second of pictures handed to the viewer: RTP time (90 kHz) and bytes.
    private var pictures = Deque<(timestamp: UInt32, bytes: Int)>()
    private var pictureBytes = 0
    /// When pictures were last rendered at once (nil: not since the delay grew back).
    private var atOnceEndedAt: Double?

    public init() {}

    /// The delay asked now (seconds, in the extension's 10 ms steps): 0 while pictures are
    /// rendered at once.
    public private(set) var minimum = 0.0
    /// The most the browser may hold pictures now: `maximum`, or less while the delay grows
    /// back after pictures were rendered at once.
    private var maximumNow = Self.maximum

    /// Whether the browser is asked to render pictures as soon as they are decoded.
    public private(set) var rendersAtOnce = false

    /// What the extension asks now: the least and the most the browser may hold pictures (seconds).
    public var ask: (minimum: Double, maximum: Double) { rendersAtOnce ? (0, 0) : (minimum, maximumNow) }

    /// A keyframe of `bytes` leaves for the viewer (its rung's current size).
    public mutating func keyframe(bytes: Int) {
        keyframeBytes = bytes
        keyframeLeft = true
    }

    /// A keyframe left since the last `update`, and when the last one did (`update`'s clock).
    private var keyframeLeft = false
    private var keyframeLeftAt = -Double.infinity
    private var lastUpdate: Double?

    /// A picture of `bytes` at RTP time `timestamp` (90 kHz) leaves for the viewer.
    public mutating func picture(bytes: Int, timestamp: UInt32) {
        pictures.append((timestamp, bytes))
        pictureBytes += bytes
        while let first = pictures.first,
              Int32(bitPattern: timestamp &- first.timestamp) > Int32(Self.pictureRateSpan * 90_000) || pictures.count > Self.picturesKept {
            pictures.removeFirst()
            pictureBytes -= first.bytes
        }
    }

    /// The rate of the video handed to the viewer over its last second of media (bit/s; nil
    /// before a fifth of a second of it): the rung's own rate, however fast a catch-up sends it.
    public var pictureRate: Double? {
        guard let first = pictures.first, let last = pictures.last else { return nil }
        let span = Double(Int32(bitPattern: last.timestamp &- first.timestamp)) / 90_000
        guard span >= 0.2 else { return nil }
        return Double(pictureBytes - first.bytes) * 8 / span
    }

    /// What to ask for now, given the rate the viewer's path drains at (bit/s), the queue a
    /// picture sent now meets there (seconds, `TransportFeedbackLink.queueAhead`) and the rate
    /// that queue drains at (bit/s, `TransportFeedbackLink.queueDrainRate`; nil: `drainRate`);
    /// returns `minimum`.
    @discardableResult
    public mutating func update(drainRate: Double, pathQueue: Double = 0, queueDrainRate: Double? = nil, at now: Double) -> Double {
        var crossing = 0.0
        if drainRate.isFinite, drainRate > 0 {
            crossing = Double(keyframeBytes) * 8 * Self.overhead / drainRate
        }
        let wanted = crossing < Self.threshold ? 0 : (min(Self.ceiling, crossing) * 100).rounded(.up) / 100
        let elapsed = lastUpdate.map { max(0, min(1, now - $0)) } ?? 0
        lastUpdate = now
        if keyframeLeft {
            keyframeLeft = false
            keyframeLeftAt = now
        }
        if wanted >= needed {
            // At once while a keyframe that just left is still crossing (the first one's, say,
            // before the path's rate was known): it is late by that much anyway. Else at
            // `regrowth` (see the type's comment).
            let crossingKeyframe = now - keyframeLeftAt <= max(crossing, Self.threshold)
            needed = crossingKeyframe ? wanted : min(wanted, needed + elapsed * Self.regrowth)
            if wanted > 0 { neededAt = now }
        } else if now - neededAt > Self.hold {
            needed = wanted
            neededAt = now
        }
        if pathQueue > Self.deepQueue, (pictureRate ?? .infinity) > (queueDrainRate ?? drainRate) * Self.pacedOverDrain {
            atOnceUntil = max(atOnceUntil, now + pathQueue + Self.relearning)
        }
        let atOnce = now <= atOnceUntil
        if rendersAtOnce, !atOnce { atOnceEndedAt = now }
        rendersAtOnce = atOnce
        // In the extension's 10 ms steps (a need grown at `regrowth` lies between them).
        let asked = (needed * 100 + 1e-6).rounded(.down) / 100
        minimum = atOnce ? 0 : asked
        maximumNow = Self.maximum
        if !atOnce, let ended = atOnceEndedAt {
            let grown = max(Self.leastRegrown, ((now - ended) * Self.regrowth * 100).rounded(.down) / 100)
            if grown >= Self.regrownMaximum {
                atOnceEndedAt = nil
            } else {
                minimum = max(Self.leastRegrown, min(grown, asked))
                maximumNow = grown
            }
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
