/// What a receiver tells a sender in RTCP receiver reports (RFC 3550 §6.4.1, Appendix A.1, A.3, A.8):
/// extended highest sequence number, cumulative and fractional loss, interarrival jitter.
public struct ReceptionStatistics: Sendable, Equatable {
    public private(set) var ssrc: UInt32?
    private var baseSequence: UInt16 = 0
    private var maximumSequence: UInt16 = 0
    private var cycles: UInt32 = 0
    public private(set) var received: UInt32 = 0
    private var expectedPrior: UInt32 = 0
    private var receivedPrior: UInt32 = 0
    private var transit: Double?
    /// Interarrival jitter in timestamp units.
    public private(set) var jitter: Double = 0

    public init() {}

    /// - Parameters:
    ///   - arrival: when the packet arrived, in seconds on any steady clock.
    ///   - clockRate: the payload's RTP clock rate.
    public mutating func record(_ packet: RTPPacket, arrival: Double, clockRate: Int) {
        if ssrc == nil {
            ssrc = packet.ssrc
            baseSequence = packet.sequenceNumber
            maximumSequence = packet.sequenceNumber
        }
        received &+= 1
        let delta = SequenceNumber.distance(packet.sequenceNumber, after: maximumSequence)
        if delta > 0 {
            if packet.sequenceNumber < maximumSequence { cycles &+= 1 << 16 }
            maximumSequence = packet.sequenceNumber
        }
        let transitNow = arrival * Double(clockRate) - Double(packet.timestamp)
        if let previous = transit {
            var difference = abs(transitNow - previous)
            // A timestamp wrap shows as a huge jump, which is not jitter.
            if difference > Double(UInt32.max) / 2 { difference = 0 }
            jitter += (difference - jitter) / 16
        }
        transit = transitNow
    }

    public var extendedHighestSequence: UInt32 { cycles &+ UInt32(maximumSequence) }

    public var expected: UInt32 { extendedHighestSequence &- UInt32(baseSequence) &+ 1 }

    /// The report block for this source, and the interval counters reset for the next one.
    public mutating func reportBlock() -> RTCPPacket.ReportBlock? {
        guard let ssrc else { return nil }
        let expectedInterval = expected &- expectedPrior
        let receivedInterval = received &- receivedPrior
        expectedPrior = expected
        receivedPrior = received
        let lostInterval = Int64(expectedInterval) - Int64(receivedInterval)
        let fraction: UInt8 = expectedInterval == 0 || lostInterval <= 0 ? 0 : UInt8(min(255, (lostInterval << 8) / Int64(expectedInterval)))
        let cumulative = max(0, min(Int64(0x7FFFFF), Int64(expected) - Int64(received)))
        return RTCPPacket.ReportBlock(ssrc: ssrc, fractionLost: fraction, cumulativeLost: UInt32(cumulative),
                                      highestSequence: extendedHighestSequence, jitter: UInt32(min(jitter, Double(UInt32.max))))
    }
}
