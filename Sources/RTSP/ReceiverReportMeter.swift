/// What one UDP player's RTCP receiver reports (RFC 3550 §6.4.2) say about its link, measured
/// against what the node really sent it: the sender keeps the running byte count of every RTP
/// packet it sent on the track, so a report's extended highest sequence number tells how many
/// bytes arrived, its cumulative loss how many packets did not, and the bytes sent after that
/// sequence are still in flight (queued somewhere on the path).
///
/// A report is advisory and can be forged, so the meter believes only what it can check: the
/// sequence must name a packet it sent recently and may not go back, a report less than
/// `minimumInterval` after the last one it used is ignored (a report every millisecond measures
/// nothing), losses are taken from the cumulative count against the packets expected and bounded
/// by them, and a round trip is computed only when the report echoes a sender report this node
/// sent. A player that lies can move only itself, and only within what its own reports claim.
public struct ReceiverReportMeter: Sendable {
    /// One checked report.
    public struct Reading: Sendable, Equatable {
        /// When the report arrived (the caller's monotonic seconds).
        public var time: Double
        /// What arrived since the previous reading (bit/s); nil for the first.
        public var bitRate: Double?
        /// Seconds since the previous reading; nil for the first.
        public var interval: Double?
        /// Packets lost among those expected since the previous reading, 0...1.
        public var lossFraction: Double
        /// Bytes sent after the reported highest sequence: on the path, or lost after it.
        public var inFlightBytes: Int
        /// Seconds, from the echoed sender report (LSR/DLSR); nil when the report echoes none of ours.
        public var roundTrip: Double?
    }

    private let capacity: Int
    private let minimumInterval: Double
    /// Bytes sent up to and including each of the last `capacity` packets, by packet index.
    private var cumulative: [Int64]
    private var sentCount: Int64 = 0
    private var lastSequence: UInt16 = 0
    private var totalBytes: Int64 = 0
    /// The last sender reports sent: NTP middle 32 bits and when.
    private var senderReports: [(middle: UInt32, time: Double)] = []
    private var previous: (index: Int64, lost: UInt32, time: Double)?
    /// Reports that named packets never sent, went back, or came too soon.
    public private(set) var ignoredReports = 0

    /// - Parameters:
    ///   - capacity: packets remembered (8192 is over 40 s of a 2 Mbit/s rung; players report every few seconds).
    ///   - minimumInterval: reports closer than this to the last one used are ignored.
    public init(capacity: Int = 8192, minimumInterval: Double = 0.2) {
        self.capacity = max(16, capacity)
        self.minimumInterval = minimumInterval
        cumulative = Array(repeating: 0, count: self.capacity)
    }

    /// An RTP packet of `bytes` on the wire with this sequence number was sent.
    public mutating func sent(sequence: UInt16, bytes: Int) {
        totalBytes += Int64(max(0, bytes))
        cumulative[Int(sentCount % Int64(capacity))] = totalBytes
        sentCount += 1
        lastSequence = sequence
    }

    /// A sender report with this NTP timestamp was sent at `time`.
    public mutating func sentReport(ntpTimestamp: UInt64, at time: Double) {
        senderReports.append((UInt32(truncatingIfNeeded: ntpTimestamp >> 16), time))
        if senderReports.count > 8 { senderReports.removeFirst() }
    }

    /// Bytes sent so far on the track.
    public var sentBytes: Int64 { totalBytes }

    /// Checks a report block about this track; nil when it is ignored.
    public mutating func receive(_ block: RTCPPacket.ReportBlock, at time: Double) -> Reading? {
        guard time.isFinite, sentCount > 0 else { return nil }
        // Which packet the report's highest sequence is: the latest sent with those 16 bits.
        let behind = Int64(lastSequence &- UInt16(truncatingIfNeeded: block.highestSequence))
        let index = sentCount - 1 - behind
        guard index >= max(0, sentCount - Int64(capacity)) else { return ignore() }
        let inFlight = Int(totalBytes - bytes(through: index))
        var roundTrip: Double?
        if block.lastSenderReport != 0, let report = senderReports.last(where: { $0.middle == block.lastSenderReport }) {
            let value = time - report.time - Double(block.delaySinceLastSenderReport) / 65536
            if value >= 0, value < 10 { roundTrip = value }
        }
        // A baseline older than what is remembered (no report for a long time) starts again.
        guard let previous, previous.index >= sentCount - Int64(capacity) else {
            self.previous = (index, block.cumulativeLost, time)
            return Reading(time: time, bitRate: nil, interval: nil, lossFraction: Double(block.fractionLost) / 256, inFlightBytes: inFlight, roundTrip: roundTrip)
        }
        guard index >= previous.index else { return ignore() }
        guard time - previous.time >= minimumInterval else {
            ignoredReports += 1
            return nil
        }
        let expected = index - previous.index
        // The cumulative count is a signed 24-bit number (duplicates can make it fall).
        let change = Int64(Int32(bitPattern: (block.cumulativeLost &- previous.lost) << 8) >> 8)
        let lost = min(max(0, change), expected)
        let loss = expected > 0 ? Double(lost) / Double(expected) : 0
        let sent = bytes(through: index) - bytes(through: previous.index)
        let rate = Double(sent) * (1 - loss) * 8 / (time - previous.time)
        self.previous = (index, block.cumulativeLost, time)
        return Reading(time: time, bitRate: rate, interval: time - previous.time, lossFraction: loss, inFlightBytes: inFlight, roundTrip: roundTrip)
    }

    private func bytes(through index: Int64) -> Int64 {
        cumulative[Int(index % Int64(capacity))]
    }

    private mutating func ignore() -> Reading? {
        ignoredReports += 1
        return nil
    }
}
