import DequeModule
import NIOCore

/// Spreads a viewer's media over time (as GCC's pacer does): a keyframe is many packets
/// written at once, and sent at once it overflows a narrow link's queue, which browsers show as
/// a stutter on every keyframe. Packets leave at `factor` times the rate media came in over the
/// last second, so the pacer only smooths the bursts and never falls behind the media itself.
///
/// Audio leaves ahead of the video waiting, as libwebrtc's pacer sends it: a keyframe paced over
/// a narrow link holds the queue for a few hundred milliseconds, and audio queued behind it
/// reached Chromium in bursts. Its audio jitter buffer answered with up to half a second of
/// delay, and lip sync then held the video back as far, in jumps that Chromium counts as freezes
/// (0.2–0.4 s every ten seconds or so on a trace window that always carried the rung). Each audio
/// packet leaves when an `AudioSmoother` says it is due (a publisher's bursts spread over the
/// media time they cover). Resends a NACK asked for leave next, ahead of the video waiting, and
/// under the same congestion window: sent at once into a path whose queue had overflowed, they
/// were lost again (see `WebRTCViewer.retransmit`).
///
/// A congestion window bounds what is on the path (as libwebrtc's pacer's does): bytes sent and
/// not yet reported by feedback, at most what the link drains in a round trip and a little more
/// (`WebRTCViewer.congestionWindow`). Without it, a link that fell to almost nothing (a 3G
/// trace's 50 s at 2 kbit/s) kept its 100-packet queue full of video, the node's answers to the
/// browser's ICE consent checks waited behind it for minutes, and Chromium gave the session up.
/// Held here instead, media can still be dropped: audio after `staleAudio`, video after
/// `staleVideo` (up to the newest keyframe held that waited less, or else up to the stream's next
/// keyframe, which the caller asks for), and the time video
/// waits behind the window counts in the lag the switching policy judges.
///
/// Pure: the caller says what time it is, and sends what `release` returns.
public struct MediaPacer: Sendable {
    /// GCC's pacing factor: bursts drain at 2.5× the media rate.
    public static let factor = 2.5
    /// The pacer never runs slower than this (bit/s): the first second has no rate to go by, and
    /// a viewer's first keyframe must not wait behind a slow start (60 KB take 0.16 s at this).
    public static let minimumRate = 3_000_000.0
    /// What may leave in one go beyond the rate (seconds of it), so a tick's lateness is made up.
    static let burst = 0.010

    /// An RTP packet in the clear, and whether it has a transport-wide sequence number to fill in:
    /// numbers are given (and the packet protected) as it leaves, so they go out in order even
    /// when retransmissions and probes leave between queued packets, and a packet's send time is
    /// when it left, not when it was queued. The packet is the viewer's own header and the
    /// payload the rung shares with its other viewers (`ViewerRTPHeader`): nothing is copied
    /// until it leaves.
    public struct Item: Sendable {
        public var header: ViewerRTPHeader
        public var payload: ByteBuffer
        public var carriesTransportSequence: Bool
        /// A video packet: dropped with the rest of its rung when the player is moved away.
        public var isVideo: Bool
        /// A resend a NACK asked for: it leaves after the audio and before the video waiting.
        public var isRetransmission: Bool
        /// The first packet of a keyframe: video may go on from here after what was queued
        /// before it is dropped (`dropVideo(keepingKeyframeYoungerThan:at:)`).
        public var startsKeyframe = false
        /// Media whose RTP sequence number is given as it leaves (`LeavingSequenceNumbers`; the
        /// number its player wrote stands only for a track's first): what the pacer drops (video
        /// on a move, stale media) then leaves no gap in the numbers.
        public var numberedAsItLeaves = false
        /// When it was queued (`enqueue` sets it).
        public var queuedAt = 0.0
        /// Audio: when it is due to leave (`AudioSmoother`; `enqueue` sets it).
        var due = 0.0
        /// The packet's length in the clear.
        public var count: Int { header.count + payload.readableBytes }

        public init(header: ViewerRTPHeader, payload: ByteBuffer, carriesTransportSequence: Bool, isVideo: Bool = false, isRetransmission: Bool = false) {
            self.header = header
            self.payload = payload
            self.carriesTransportSequence = carriesTransportSequence
            self.isVideo = isVideo
            self.isRetransmission = isRetransmission
        }

        /// A packet serialized whole (padding, tests): its first 12 bytes are taken as the header.
        public init(bytes: [UInt8], carriesTransportSequence: Bool, isVideo: Bool = false, isRetransmission: Bool = false) {
            let split = min(12, bytes.count)
            self.init(header: ViewerRTPHeader(bytes[..<split]), payload: ByteBuffer(bytes: bytes[split...]),
                      carriesTransportSequence: carriesTransportSequence, isVideo: isVideo, isRetransmission: isRetransmission)
        }

        /// The packet in the clear, header and payload.
        public var bytes: [UInt8] { header.bytes + payload.readableBytesView }
    }

    private var queue = Deque<Item>()
    /// What is not video (the audio): it leaves before `queue`.
    private var audioQueue = Deque<Item>()
    /// Resends: after the audio, before `queue` (they are late already), under the same window.
    private var resendQueue = Deque<Item>()
    /// Spreads the publisher's bursts of audio over the time they cover.
    private var audioSmoother = AudioSmoother()
    public private(set) var queuedBytes = 0
    private var budget = 0.0
    private var lastRelease: Double?
    /// Bytes that came in during the current and the previous second.
    private var windowStart = 0.0
    private var windowBytes = 0
    private var previousWindowBytes = 0

    /// Whether the last release left media waiting because the congestion window was full.
    public private(set) var windowBlocked = false
    /// Video was dropped for waiting too long (`staleVideo`), since the caller last took this.
    private var droppedStaleVideo = false
    private var lastSent = -Double.infinity

    /// Audio that waited this long behind a full window is dropped (seconds): played that late
    /// it would only add to the browser's jitter buffer.
    public static let staleAudio = 1.0
    /// Video that waited this long is dropped with the video queued after it up to the newest
    /// keyframe that waited less (seconds); with no such keyframe, all of it, and the player then
    /// starts again at its rung's next keyframe. Longer than the lag at which the
    /// switching policy skips on its own (2 s, judged on feedback, which an outage delays).
    public static let staleVideo = 3.0
    /// A resend that waited this long behind a full window is dropped (seconds): the browser has
    /// asked again by then, or given the picture up.
    public static let staleRetransmission = 0.5
    /// While the window stays full, one packet leaves this often (seconds): feedback lost on the
    /// way back would otherwise leave the window full for good.
    public static let keepaliveInterval = 1.0

    public init() {}

    public var isEmpty: Bool { queue.isEmpty && audioQueue.isEmpty && resendQueue.isEmpty }

    /// What media came in at over the last second (bit/s).
    public var mediaRate: Double { Double(max(windowBytes, previousWindowBytes)) * 8 }

    /// What the viewer's link carries, as its adaptation estimates it (bit/s; nil: not known yet).
    public var linkRate: Double?
    /// How far above the link's estimate bursts may leave: a keyframe sent faster than the link
    /// drains queues at the bottleneck, and a queue counted in packets overflows there (0.2–0.5 s
    /// freezes on every keyframe of 480p over a 1.3 Mbit/s link, whose IDRs left at 3 Mbit/s).
    /// Held in the node instead, it arrives as late but whole.
    public static let linkHeadroom = 1.25

    /// The pace now (bit/s): bursts at `factor` times the media rate, but no faster than the
    /// link carries with `linkHeadroom`, and never slower than the media itself comes in (the
    /// queue would grow without end).
    public var rate: Double {
        let media = Double(max(windowBytes, previousWindowBytes)) * 8
        let burst = max(Self.minimumRate, Self.factor * media)
        guard let link = linkRate, link.isFinite, link > 0 else { return burst }
        return max(media * 1.05, min(burst, link * Self.linkHeadroom))
    }

    public mutating func enqueue(_ item: Item, at now: Double) {
        var item = item
        item.queuedAt = now
        queuedBytes += item.count
        // A resend is not media coming in: the rate the pacer goes by is the media's.
        guard !item.isRetransmission else { return resendQueue.append(item) }
        if now - windowStart >= 1 {
            previousWindowBytes = now - windowStart >= 2 ? 0 : windowBytes
            windowStart = now
            windowBytes = 0
        }
        windowBytes += item.count
        if !item.isVideo, item.header.count >= 12 {
            item.due = audioSmoother.due(timestamp: item.header.timestamp, at: now)
        }
        if item.isVideo { queue.append(item) } else { audioQueue.append(item) }
    }

    /// What may leave now, in order. `window`: bytes that may still go on the path (nil: no
    /// window); a packet may take it below zero, as the budget.
    public mutating func release(at now: Double, window: Int? = nil) -> [Item] {
        let bytesPerSecond = rate / 8
        let elapsed = lastRelease.map { max(0, now - $0) } ?? Self.burst
        lastRelease = now
        budget = min(budget + elapsed * bytesPerSecond, Self.burst * bytesPerSecond + 1500)
        dropStale(at: now)
        var room = window ?? .max
        // A full window still lets one packet through now and then, so feedback comes back.
        if room <= 0, !isEmpty, now - lastSent >= Self.keepaliveInterval { room = 1 }
        // Audio goes when due (a few hundred bytes every 20 ms): its cost is taken from the video's budget.
        var released: [Item] = []
        while room > 0, let item = audioQueue.first, item.due <= now {
            audioQueue.removeFirst()
            budget -= Double(item.count)
            room -= item.count
            queuedBytes -= item.count
            released.append(item)
        }
        // A packet may take the budget below zero: the debt is paid before the next one leaves.
        while budget > 0, room > 0, let item = resendQueue.popFirst() ?? queue.popFirst() {
            budget -= Double(item.count)
            room -= item.count
            queuedBytes -= item.count
            released.append(item)
        }
        windowBlocked = room <= 0 && !isEmpty
        if !released.isEmpty { lastSent = now }
        if queue.isEmpty { budget = min(budget, 1500) }
        return released
    }

    /// When `release` may next let something go (seconds on the caller's clock; nil: nothing
    /// waits): the first audio packet's due time, or when the video's budget is paid back. With
    /// the congestion window full, `now`: feedback may open it at any moment, so the caller keeps
    /// looking. The caller may release later (its timer's granularity), never usefully sooner.
    public func nextRelease(at now: Double) -> Double? {
        guard !isEmpty else { return nil }
        if windowBlocked { return now }
        var next = Double.infinity
        if !queue.isEmpty || !resendQueue.isEmpty {
            let bytesPerSecond = rate / 8
            next = budget > 0 || bytesPerSecond <= 0 ? now : (lastRelease ?? now) + -budget / bytesPerSecond
        }
        if let audio = audioQueue.first { next = min(next, audio.due) }
        return max(now, next)
    }

    /// How long the oldest video queued has waited (seconds; 0 when none waits).
    public func oldestVideoWait(at now: Double) -> Double { queue.first.map { max(0, now - $0.queuedAt) } ?? 0 }

    /// Whether video was dropped for waiting too long since the last call (then the caller asks
    /// for the next keyframe, and forgets what it would resend).
    public mutating func takeDroppedStaleVideo() -> Bool {
        defer { droppedStaleVideo = false }
        return droppedStaleVideo
    }

    private mutating func dropStale(at now: Double) {
        queuedBytes -= Self.drop(olderThan: Self.staleAudio, at: now, from: &audioQueue)
        queuedBytes -= Self.drop(olderThan: Self.staleRetransmission, at: now, from: &resendQueue)
        if oldestVideoWait(at: now) > Self.staleVideo, !dropVideo(keepingKeyframeYoungerThan: Self.staleVideo, at: now) {
            droppedStaleVideo = true
        }
    }

    /// Drops the items at the head of `items` that have waited more than `age` seconds; returns their bytes.
    private static func drop(olderThan age: Double, at now: Double, from items: inout Deque<Item>) -> Int {
        var bytes = 0
        while let first = items.first, now - first.queuedAt > age {
            bytes += first.count
            items.removeFirst()
        }
        return bytes
    }

    /// The video queued is dropped, the audio kept: the player was moved down, and the old rung's
    /// pictures, late already, would reach the link before the new rung's IDR.
    public mutating func dropVideo() {
        queue.removeAll()
        resendQueue.removeAll()
        queuedBytes = audioQueue.reduce(0) { $0 + $1.count }
    }

    /// The video queued before its newest keyframe that has waited less than `age` is dropped,
    /// with every resend, and the video goes on from that keyframe; true when there was one. Else
    /// all the video is dropped, as `dropVideo()`, and false: the caller starts again at the
    /// rung's next keyframe. A viewer moved down whose path was full of the old rung's data got
    /// its new rung's IDR held here behind the congestion window; the skip to the live edge that
    /// its lag then asked for dropped that IDR, and it froze until the next one (3 s, runs CB and
    /// CD). It pays where the viewer reached that rung in one move, so that IDR is the first video
    /// held (starts falling to 400 kbit/s: 2.48 s frozen against 3.07 s); after moves a rung at a
    /// time, what was kept reached Chromium late in one burst and it dropped much of it (runs CI-CK).
    public mutating func dropVideo(keepingKeyframeYoungerThan age: Double, at now: Double) -> Bool {
        guard let keyframe = queue.lastIndex(where: { $0.startsKeyframe }), now - queue[keyframe].queuedAt < age else {
            dropVideo()
            return false
        }
        queue.removeFirst(keyframe)
        resendQueue.removeAll()
        queuedBytes = (queue.reduce(0) { $0 + $1.count }) + audioQueue.reduce(0) { $0 + $1.count }
        return true
    }

    /// Everything queued is dropped (the viewer left).
    public mutating func clear() {
        queue.removeAll()
        audioQueue.removeAll()
        resendQueue.removeAll()
        queuedBytes = 0
    }
}
