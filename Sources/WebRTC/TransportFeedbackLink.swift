import DequeModule
import MediaCore

/// A WebRTC viewer's link as transport-wide congestion control shows it (the send side of
/// draft-holmer-rmcat-transport-wide-cc-extensions, as GCC and OvenMediaEngine's
/// `rtc_bandwidth_estimator.cpp` use it): the node notes when it sent each transport-wide
/// sequence number and how big the packet was; each feedback says which arrived and when, on the
/// viewer's clock. From these it fills the same `LinkObservation` a TCP player's `TCP_INFO` does,
/// so one `LinkEstimator` and one `SwitchingPolicy` serve both.
///
/// - **Delivered bytes**: the sizes of the packets the feedback says arrived. Exact, as TCP's
///   `bytes_acked` is.
/// - **Backlog**: the one-way delay now over the least seen in the last `baseWindow` seconds.
///   The two clocks differ by a constant, which the least delay takes out, and what is left is the
///   time packets wait in the path's queues: the media's lag, as the age of the oldest
///   unacknowledged byte is on TCP. Its bias: a route change that lengthens the path reads as a
///   queue until the window forgets the old least.
/// - **Sender waiting**: a queue of more than `saturatedQueue` seconds, or loss, means the link,
///   not the sender, limited delivery (the only way a paced RTP sender is "waiting").
/// - **Rate sample**: bytes over the arrival span of one feedback's packets, marked app-limited
///   unless the link was saturated. Like TCP's `delivery_rate`, a burst inflates it; the estimator
///   never lets it raise an estimate.
/// - **Loss**: media packets reported lost over those reported in the last `lossWindow` of
///   feedback (a probe's padding lost is the probe's own doing, which the probe's end already
///   answers). One feedback covers some 50–100 ms, a handful of packets on a low rung: one packet
///   of three lost read as 33 % loss, and moved a Chromium viewer off a 480p rung its 1.3 Mbit/s
///   link carried. GCC too judges loss over a report interval.
public struct TransportFeedbackLink: Sendable {
    private struct Sent {
        var sequence: UInt16
        var bytes: Int
        var time: Double
        var acknowledged: Bool
        var padding: Bool
        /// Bytes sent up to and with this packet, since the link began.
        var sentThrough: UInt64
        /// Bytes on the path when it left, itself included (`inFlightBytes` then).
        var inFlight: Int
        /// Feedback said it never arrived.
        var lost = false
    }

    /// How many packets' send records are kept (about 10 s of a 4 Mbit/s rung).
    public static let capacity = 4096
    public var baseWindow = 10.0
    public var saturatedQueue = 0.05
    /// Seconds of feedback that loss is counted over.
    public var lossWindow = 1.0
    private var lossCounts = Deque<(time: Double, reported: Int, lost: Int)>()

    private var records: [Sent?] = Array(repeating: nil, count: capacity)
    private var delivered: UInt64 = 0
    private var sentBytes: UInt64 = 0
    private var deliveries = Deque<(time: Double, delivered: UInt64)>()
    /// The last packet sent that feedback has reported arrived: when it left, the bytes sent up
    /// to it, and the queue it met (seconds).
    private var latestReported: (time: Double, sentThrough: UInt64, queue: Double)?
    /// Bytes sent up to the newest packet any feedback has reported, arrived or lost.
    private var reportedThrough: UInt64 = 0
    /// Media reported lost that left after the last packet reported arrived (`latestReported`):
    /// bytes sent up to and with each, and its size. Those bytes are not on the path.
    private var lostSinceReported = Deque<(sentThrough: UInt64, bytes: Int)>()
    private var lostBytesSinceReported = 0
    private(set) var leastDelay: [(time: Double, delay: Double)] = []
    /// The least time from a packet leaving to the feedback that reported it coming back, over
    /// the last `baseWindow` seconds (kept as `leastDelay` is: `keepLeast`).
    private(set) var leastReportDelays: [(time: Double, delay: Double)] = []
    /// The most entries either list of least delays keeps: one per feedback while delays only grow,
    /// as a viewer repeating one feedback would make them, which must not grow without end.
    static let leastEntries = 256

    public init() {}

    /// The path's round trip as feedback alone shows it (seconds; nil before any): the least time
    /// from a packet leaving to a feedback that reported it, over the last `baseWindow` seconds.
    /// The newest packet a feedback reports arrived a packet's spacing or so before the feedback
    /// left, so the least such time is the round trip with little more. Receiver reports give a
    /// round trip only a second or so in: until then a congestion window took 0.1 s, on a path of
    /// 1 ms, and the window let a start's wide-link burst fill a 30-packet queue and overflow it.
    public var reportRoundTrip: Double? { leastReportDelays.first?.delay }

    /// A packet left the node with this transport-wide sequence number. `padding`: a probe's,
    /// whose loss is the probe's own doing (it counts as delivered when it arrives, and never as lost).
    public mutating func sent(sequence: UInt16, bytes: Int, at time: Double, padding: Bool = false) {
        sentBytes &+= UInt64(bytes)
        records[Int(sequence) % Self.capacity] = Sent(sequence: sequence, bytes: bytes, time: time, acknowledged: false, padding: padding,
                                                      sentThrough: sentBytes, inFlight: inFlightBytes)
    }

    /// How long a loss's lesson about the path's depth holds (seconds): the link's rate, and with
    /// it what its queue holds in bytes, changes within seconds on a mobile trace.
    public static let lossMemory = 10.0
    /// The least that was on the path when a media packet the newest feedback with losses
    /// reported lost left (bytes, and when that feedback came).
    private var lossInFlight: (bytes: Int, time: Double)?

    /// The deepest queue (seconds) that the arrivals of the newest feedback with media lost met,
    /// and when that feedback came: a queue counted in packets drops only once full, so that is
    /// as deep as the path's queue goes at its rate then.
    private var lossQueue: (seconds: Double, time: Double)?

    /// How deep the path's queue went when it last overflowed (seconds; nil: no media lost in the
    /// last `lossMemory` seconds). Unlike `inFlightLimit`, it does not count the packets lost and
    /// not yet reported as on the path: while a short queue overflows, those are many, and a
    /// limit that counted them stayed above what the path held (run EM: a 52 KB window over a
    /// 30-packet queue of 1.15 Mbit/s, 20 % of the media lost for two seconds).
    public func queueAtLoss(at now: Double) -> Double? {
        guard let lossQueue, now - lossQueue.time <= Self.lossMemory else { return nil }
        return lossQueue.seconds
    }

    /// What the path held when it last overflowed, less a margin (bytes; nil: no media lost in the
    /// last `lossMemory` seconds). A router's queue counts packets, and one of 30 holds 0.12 s of
    /// a 2.9 Mbit/s link: a congestion window of the round trip and 0.25 s let 84 KB onto such a
    /// path, the top's keyframes overflowed it, and the loss moved a Chromium viewer off a rung
    /// its link carried, twice (run BB). Bounded by this, the keyframe waits in the node's pacer
    /// instead, as TCP's window halves on loss.
    public func inFlightLimit(at now: Double) -> Int? {
        guard let lossInFlight, now - lossInFlight.time <= Self.lossMemory else { return nil }
        return lossInFlight.bytes * 4 / 5
    }

    /// What feedback said arrived over its last half second or so (bit/s; nil before 0.2 s of it):
    /// while no queue builds, the link carries at least this, however little the estimate says.
    public var recentDeliveryRate: Double? {
        guard let last = deliveries.last, let first = deliveries.first, last.time - first.time >= 0.2 else { return nil }
        return Double(last.delivered - first.delivered) * 8 / (last.time - first.time)
    }

    /// The rate the newest feedback's packets arrived at, while that feedback showed a queue of
    /// more than `saturatedQueue` (bit/s; nil while none shows): packets waiting at the
    /// bottleneck leave it back to back, so they arrive at what the link drains now. A link that
    /// just fell still shows its wide past in `recentDeliveryRate` for half a second, and a
    /// congestion window sized by that kept sending: a Chromium viewer started on a wide link
    /// that fell to 1.28 Mbit/s 0.2 s later had 199 KB in flight against a 100-packet queue,
    /// lost 85 packets, was moved two rungs down for it, and froze 2 s.
    public private(set) var queuedDeliveryRate: Double?

    /// Bytes sent after the newest packet feedback has reported: on the path, or lost there and
    /// not yet known to be. A congestion window (`MediaPacer.release(at:window:)`) holds it.
    public var inFlightBytes: Int { Int(clamping: sentBytes &- reportedThrough) }

    /// The queue a packet sent now would meet on the path (seconds), if the link drains at
    /// `bitRate`: the queue the last packet reported met, plus what was sent after it, less what
    /// the link carried since. Feedback comes every 50–100 ms and tells of packets sent before
    /// it; a probe that waited for it to show a queue had overfilled the link by then (a 0.1 s
    /// hold read 0.15–0.25 s at the probe's end, and Chromium's audio buffer, then its video by
    /// lip sync, took that much more delay). Packets reported lost after it are not on the path:
    /// counted, a fall with loss on a short queue read as more than a second ahead of a picture
    /// (run CY's step), where its 30 packets held 0.44 s. Nil before any feedback.
    public func predictedQueue(at now: Double, bitRate: Double) -> Double? {
        guard let reported = latestReported, bitRate > 0 else { return nil }
        let since = Double(sentBytes &- reported.sentThrough &- UInt64(lostBytesSinceReported)) * 8 / bitRate
        return max(0, reported.queue + since - (now - reported.time))
    }

    /// The queue a packet sent now would meet (seconds, 0 before any feedback), at the rate the
    /// path drains now: while feedback shows a queue, the rate its packets arrived at
    /// (`queuedDeliveryRate`), the link's own then; else `drainRate`. Known within a feedback or
    /// two of a fall, where a queue that was reported takes as long as it is deep to show.
    public func queueAhead(at now: Double, drainRate: Double) -> Double {
        predictedQueue(at: now, bitRate: queueDrainRate(drainRate: drainRate)) ?? 0
    }

    /// What the link is taken to carry now, for the pacer's pace and the congestion window
    /// (bit/s): `estimate`, the adaptation's, but while feedback shows a queue no more than that
    /// queue drains at (`queuedDeliveryRate`). An estimate keeps the most that app-limited
    /// readings said until a full link has been measured for about half a second
    /// (`LinkEstimator.saturatedSeconds`): a Chromium viewer whose wide link fell to 1.2 Mbit/s
    /// as its first picture showed was paced and windowed at the 3.8 Mbit/s its catch-up had
    /// read for 0.4 s after feedback showed the queue, with 118 KB in flight against a
    /// 30-packet queue, and lost 65 packets (run EL). Packets that waited at the bottleneck
    /// leave it back to back, so what they arrived at is the link's rate, never the sender's.
    public func carriedRate(estimate: Double) -> Double {
        guard let queued = queuedDeliveryRate, queued.isFinite, queued > 0 else { return estimate }
        return min(estimate, queued)
    }

    /// The rate the queue ahead drains at: `queuedDeliveryRate` while feedback shows a queue,
    /// else `drainRate` (bit/s).
    public func queueDrainRate(drainRate: Double) -> Double {
        queuedDeliveryRate ?? drainRate
    }

    /// One feedback, taken at `now` (the node's clock); nil when it names nothing the node sent.
    public mutating func receive(_ feedback: TransportFeedback, at now: Double) -> LinkObservation? {
        var reported = 0
        var lost = 0
        var firstArrival: Int64?
        var lastArrival: Int64?
        var bytesInSpan = 0
        var latestDelay: Double?
        var smallestDelay = Double.infinity
        var largestDelay = -Double.infinity
        var newest: Sent?
        for packet in feedback.packets {
            let slot = Int(packet.sequence) % Self.capacity
            guard var record = records[slot], record.sequence == packet.sequence else { continue }
            if !record.padding { reported += 1 }
            reportedThrough = max(reportedThrough, record.sentThrough)
            guard let arrival = packet.arrival else {
                if !record.lost, record.sentThrough > latestReported?.sentThrough ?? 0 {
                    // Bounded as the send records are: a viewer whose feedback says all is lost
                    // does not grow it.
                    if lostSinceReported.count == Self.capacity, let oldest = lostSinceReported.popFirst() { lostBytesSinceReported -= oldest.bytes }
                    lostSinceReported.append((record.sentThrough, record.bytes))
                    lostBytesSinceReported += record.bytes
                }
                record.lost = true
                records[slot] = record
                if !record.padding {
                    lost += 1
                    // The newest feedback's losses teach the path's depth now; within it, the least.
                    if lossInFlight.map({ $0.time < now || record.inFlight < $0.bytes }) ?? true { lossInFlight = (record.inFlight, now) }
                }
                continue
            }
            if !record.acknowledged {
                record.acknowledged = true
                records[slot] = record
                delivered += UInt64(record.bytes)
            }
            if firstArrival == nil { firstArrival = arrival } else { bytesInSpan += record.bytes }
            lastArrival = arrival
            // Arrival on the viewer's clock minus departure on the node's: a constant offset plus
            // the path's delay, of which only changes matter.
            latestDelay = Double(arrival) / 1e6 - record.time
            smallestDelay = min(smallestDelay, latestDelay!)
            largestDelay = max(largestDelay, latestDelay!)
            if newest.map({ record.time >= $0.time }) ?? true { newest = record }
        }
        guard reported > 0 || latestDelay != nil else { return nil }
        if let newest, now >= newest.time { Self.keepLeast(&leastReportDelays, adding: now - newest.time, at: now, over: baseWindow) }
        var queue = 0.0
        if let delay = latestDelay {
            // The least delay over the window (a queue kept increasing, so its first is the least).
            Self.keepLeast(&leastDelay, adding: smallestDelay, at: now, over: baseWindow)
            let base = leastDelay.first?.delay ?? delay
            queue = max(0, delay - base)
            if lost > 0 { lossQueue = (max(0, largestDelay - base), now) }
            if let newest, newest.time >= latestReported?.time ?? -.infinity {
                latestReported = (newest.time, newest.sentThrough, queue)
                while let oldest = lostSinceReported.first, oldest.sentThrough <= newest.sentThrough {
                    lostSinceReported.removeFirst()
                    lostBytesSinceReported -= oldest.bytes
                }
            }
        }
        deliveries.append((now, delivered))
        while deliveries.count > 2, let second = deliveries.dropFirst().first, now - second.time >= 0.5 { deliveries.removeFirst() }
        lossCounts.append((now, reported, lost))
        while let first = lossCounts.first, now - first.time > lossWindow { lossCounts.removeFirst() }
        let reportedInWindow = lossCounts.reduce(0) { $0 + $1.reported }
        let lossFraction = reportedInWindow > 0 ? Double(lossCounts.reduce(0) { $0 + $1.lost }) / Double(reportedInWindow) : 0
        let saturated = queue > saturatedQueue || lost > 0
        var rate: Double?
        if let first = firstArrival, let last = lastArrival, last > first, bytesInSpan > 0 {
            rate = Double(bytesInSpan) * 8 / (Double(last - first) / 1e6)
        }
        if queue <= saturatedQueue {
            queuedDeliveryRate = nil
        } else if let rate {
            queuedDeliveryRate = rate
        }
        return LinkObservation(time: now, deliveredBytes: delivered, senderWaiting: saturated, backlogSeconds: queue,
                               rateSample: rate, rateSampleAppLimited: !saturated, lossFraction: lossFraction)
    }

    /// Adds a reading to a list whose first entry is the least of the last `window` seconds: what
    /// expired and every entry no less than the new one go, so each entry is larger than those
    /// before it and takes over as they expire. At most `leastEntries`, the least kept.
    private static func keepLeast(_ entries: inout [(time: Double, delay: Double)], adding delay: Double, at now: Double, over window: Double) {
        entries.removeAll { now - $0.time > window || $0.delay >= delay }
        if entries.count >= leastEntries { entries.remove(at: 1) }
        entries.append((now, delay))
    }
}
