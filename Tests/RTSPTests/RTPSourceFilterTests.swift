import RTSP
import Testing

/// Over UDP anyone can send a datagram with a publisher's source address: only its SSRC, in sequence, gets through.
@Suite struct RTPSourceFilterTests {
    @Test func theFirstSourceIsLearnedAndAnotherSSRCIsDropped() {
        var filter = RTPSourceFilter()
        #expect(filter.admit(ssrc: 7, sequence: 100, now: 0) == .accept)
        #expect(filter.admit(ssrc: 7, sequence: 101, now: 0.01) == .accept)
        #expect(filter.admit(ssrc: 99, sequence: 102, now: 0.02) == .foreignSource)
        #expect(filter.admit(ssrc: 7, sequence: 102, now: 0.03) == .accept)
        #expect(filter.ssrc == 7 && filter.foreignPackets == 1)
    }

    @Test func aForgerCannotDisplaceASourceThatIsStillSending() {
        var filter = RTPSourceFilter()
        _ = filter.admit(ssrc: 7, sequence: 0, now: 0)
        for index in 0..<50 {
            let now = Double(index) * 0.1
            #expect(filter.admit(ssrc: 7, sequence: UInt16(index + 1), now: now) == .accept)
            #expect(filter.admit(ssrc: 99, sequence: UInt16(500 + index), now: now) == .foreignSource)
        }
        #expect(filter.ssrc == 7)
    }

    /// A sender that restarts with a new SSRC (after silence) is followed once it sends in sequence.
    @Test func aNewSSRCAfterSilenceIsTakenOverAfterProbation() {
        var filter = RTPSourceFilter()
        _ = filter.admit(ssrc: 7, sequence: 10, now: 0)
        let later = RTPSourceFilter.ssrcTakeoverSilence + 1
        for step in 0..<(RTPSourceFilter.probation - 1) {
            #expect(filter.admit(ssrc: 8, sequence: UInt16(300 + step), now: later) == .foreignSource)
        }
        #expect(filter.admit(ssrc: 8, sequence: UInt16(300 + RTPSourceFilter.probation - 1), now: later) == .accept)
        #expect(filter.ssrc == 8)
        #expect(filter.admit(ssrc: 7, sequence: 11, now: later + 0.1) == .foreignSource)
    }

    @Test func sequenceNumbersFarOutOfTheWindowAreDroppedUnlessTheSenderRestarted() {
        var filter = RTPSourceFilter()
        _ = filter.admit(ssrc: 1, sequence: 65530, now: 0)
        #expect(filter.admit(ssrc: 1, sequence: 3, now: 0) == .accept, "a wrap is in order")
        #expect(filter.admit(ssrc: 1, sequence: 1, now: 0) == .accept, "reordering within the window")
        #expect(filter.admit(ssrc: 1, sequence: 30_000, now: 0) == .outOfSequence)
        #expect(filter.admit(ssrc: 1, sequence: 4, now: 0) == .accept)
        // A real restart: two in a row far away are followed.
        #expect(filter.admit(ssrc: 1, sequence: 40_000, now: 0) == .outOfSequence)
        #expect(filter.admit(ssrc: 1, sequence: 40_001, now: 0) == .accept)
        #expect(filter.admit(ssrc: 1, sequence: 40_002, now: 0) == .accept)
        #expect(filter.outOfSequencePackets == 2)
    }
}
