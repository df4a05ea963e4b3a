import NIOCore
import Testing
import WebRTC

/// A viewer's RTP sequence numbers are given as packets leave its pacer: what the pacer drops
/// (the old rung's video on a move, stale media) leaves no gap for the browser to count lost.
@Suite struct LeavingSequenceNumbersTests {
    static func packet(sequence: UInt16, video: Bool) -> MediaPacer.Item {
        var header = ViewerRTPHeader()
        header.append(UInt8(0x80))
        header.append(UInt8(video ? 102 : 111))
        header.append(sequence)
        header.append(UInt32(0))
        header.append(UInt32(7))
        var item = MediaPacer.Item(header: header, payload: ByteBuffer(bytes: [UInt8](repeating: 0, count: video ? 1000 : 100)),
                                   carriesTransportSequence: false, isVideo: video)
        item.numberedAsItLeaves = true
        return item
    }

    @Test func videoDroppedOnAMoveLeavesNoGap() {
        var pacer = MediaPacer()
        var numbers = LeavingSequenceNumbers()
        var sent: [UInt16] = []
        // The player numbers 40 packets of the old rung from 65530 (wrapping); a few leave.
        for index in 0..<40 { pacer.enqueue(Self.packet(sequence: 65530 &+ UInt16(index), video: true), at: 0) }
        sent += pacer.release(at: 0, window: 3500).compactMap { numbers.next(for: $0) }
        #expect(sent.count >= 3 && sent.count < 40)
        // The viewer moves: the rest of the old rung is dropped; the new rung's packets come
        // numbered after all 40 by the player.
        pacer.dropVideo()
        for index in 40..<50 { pacer.enqueue(Self.packet(sequence: 65530 &+ UInt16(index), video: true), at: 0.01) }
        for step in 1...20 { sent += pacer.release(at: 0.01 + Double(step) * 0.05).compactMap { numbers.next(for: $0) } }
        #expect(sent.first == 65530)
        #expect(zip(sent, sent.dropFirst()).allSatisfy { $1 == $0 &+ 1 }, "\(sent)")
        #expect(sent.count > 10)
    }

    @Test func eachTrackCountsOnItsOwnAndResendsKeepTheirNumbers() {
        var numbers = LeavingSequenceNumbers()
        #expect(numbers.next(for: Self.packet(sequence: 100, video: true)) == 100)
        #expect(numbers.next(for: Self.packet(sequence: 9000, video: false)) == 9000)
        #expect(numbers.next(for: Self.packet(sequence: 180, video: true)) == 101)
        #expect(numbers.next(for: Self.packet(sequence: 9050, video: false)) == 9001)
        var resend = Self.packet(sequence: 100, video: false)
        resend.numberedAsItLeaves = false
        resend.isRetransmission = true
        #expect(numbers.next(for: resend) == nil)
        #expect(numbers.next(for: Self.packet(sequence: 181, video: true)) == 102)
    }
}
