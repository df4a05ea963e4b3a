import RTSP
import Testing

/// The meter reads a UDP player's receiver reports against what was sent: what arrived, what was
/// lost and what is still on the path. Forged or flooding reports measure nothing.
@Suite struct ReceiverReportMeterTests {
    /// 100 packets of 1000 bytes from sequence 65500 (the 16-bit number wraps on the way).
    static func meterWithHundredPackets() -> ReceiverReportMeter {
        var meter = ReceiverReportMeter()
        for index in 0..<100 { meter.sent(sequence: 65500 &+ UInt16(index), bytes: 1000) }
        return meter
    }

    static func block(highest: UInt16, lost: UInt32 = 0, fraction: UInt8 = 0, lsr: UInt32 = 0, dlsr: UInt32 = 0) -> RTCPPacket.ReportBlock {
        RTCPPacket.ReportBlock(ssrc: 1, fractionLost: fraction, cumulativeLost: lost, highestSequence: 0x1_0000 | UInt32(highest), jitter: 0,
                               lastSenderReport: lsr, delaySinceLastSenderReport: dlsr)
    }

    @Test func reportsGiveTheArrivalRateLossAndWhatIsStillInFlight() throws {
        var meter = Self.meterWithHundredPackets()
        let firstReading = meter.receive(Self.block(highest: 65500 &+ 19), at: 10)
        let first = try #require(firstReading)
        #expect(first.bitRate == nil)
        #expect(first.inFlightBytes == 80_000)
        // 60 more packets expected, 6 lost, in 2 s: 54 000 bytes, 216 kbit/s.
        let secondReading = meter.receive(Self.block(highest: 65500 &+ 79, lost: 6), at: 12)
        let second = try #require(secondReading)
        #expect(second.lossFraction == 0.1)
        #expect(abs((second.bitRate ?? 0) - 216_000) < 1)
        #expect(second.interval == 2)
        #expect(second.inFlightBytes == 20_000)
    }

    @Test func theRoundTripComesOnlyFromASenderReportThisNodeSent() throws {
        var meter = Self.meterWithHundredPackets()
        let ntp: UInt64 = 0x1234_5678_9ABC_DEF0
        meter.sentReport(ntpTimestamp: ntp, at: 100)
        let middle = UInt32(truncatingIfNeeded: ntp >> 16)
        // Answered 0.5 s after our report arrived, got back 0.8 s after we sent it: 300 ms.
        let echoedReading = meter.receive(Self.block(highest: 65500 &+ 10, lsr: middle, dlsr: 32768), at: 100.8)
        let echoed = try #require(echoedReading)
        #expect(abs((echoed.roundTrip ?? 0) - 0.3) < 0.001)
        var other = Self.meterWithHundredPackets()
        other.sentReport(ntpTimestamp: ntp, at: 100)
        let forgedReading = other.receive(Self.block(highest: 65500 &+ 10, lsr: middle &+ 1, dlsr: 0), at: 100.8)
        let forged = try #require(forgedReading)
        #expect(forged.roundTrip == nil)
        // A delay larger than the time since our report: no negative round trip.
        var early = Self.meterWithHundredPackets()
        early.sentReport(ntpTimestamp: ntp, at: 100)
        let late = early.receive(Self.block(highest: 65500 &+ 10, lsr: middle, dlsr: 65536 * 5), at: 101)
        #expect(late != nil && late?.roundTrip == nil)
    }

    @Test func reportsAboutPacketsNeverSentOrGoingBackAreIgnored() {
        var meter = Self.meterWithHundredPackets()
        let baseline = meter.receive(Self.block(highest: 65500 &+ 50), at: 1)
        #expect(baseline != nil)
        // Behind the last report, or a sequence far from anything sent lately.
        let backwards = meter.receive(Self.block(highest: 65500 &+ 40), at: 3)
        let neverSent = meter.receive(Self.block(highest: 30000), at: 5)
        #expect(backwards == nil && neverSent == nil)
        #expect(meter.ignoredReports == 2)
    }

    /// A report every millisecond: only those at least `minimumInterval` apart are used, so a
    /// flood measures nothing new and costs a comparison each.
    @Test func aFloodOfReportsIsThinnedToTheMinimumInterval() {
        var meter = ReceiverReportMeter()
        var used = 0
        var sequence: UInt16 = 0
        for step in 0..<5000 {
            meter.sent(sequence: sequence, bytes: 1200)
            if meter.receive(Self.block(highest: sequence, fraction: 255), at: Double(step) * 0.001) != nil { used += 1 }
            sequence &+= 1
        }
        #expect(used <= 26)
        #expect(meter.ignoredReports >= 4900)
    }

    /// Claimed losses are bounded by the packets expected, whatever the cumulative count says.
    @Test func claimedLossesAreBoundedByWhatWasExpected() throws {
        var meter = Self.meterWithHundredPackets()
        let baseline = meter.receive(Self.block(highest: 65500 &+ 10), at: 1)
        #expect(baseline != nil)
        let readingReading = meter.receive(Self.block(highest: 65500 &+ 20, lost: 0xFF_FFFF), at: 2)
        let reading = try #require(readingReading)
        // 0xFFFFFF is -1 as a signed 24-bit count: no loss, rather than 16 million.
        #expect(reading.lossFraction == 0)
        let hugeReading = meter.receive(Self.block(highest: 65500 &+ 30, lost: 0x3F_FFFF), at: 3)
        let huge = try #require(hugeReading)
        #expect(huge.lossFraction == 1)
        #expect(huge.bitRate == 0)
    }
}
