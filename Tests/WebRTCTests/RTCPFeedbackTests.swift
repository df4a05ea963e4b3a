import NIOCore
import RTSP
import Testing
@testable import WebRTC

/// A viewer's feedback as browsers write it, and as a viewer that lies writes it.
@Suite struct RTCPFeedbackTests {
    static func packet(format: UInt8, type: UInt8, _ body: [UInt8]) -> [UInt8] {
        var padded = body
        while padded.count % 4 != 0 { padded.append(0) }
        let words = UInt16(padded.count / 4)
        return [0x80 | format, type, UInt8(words >> 8), UInt8(words & 0xFF)] + padded
    }

    static let sender: [UInt8] = [0, 0, 0, 1]
    static let media: [UInt8] = [0xAB, 0xCD, 0xEF, 0x01]

    @Test func nackPliFirAndRembAreRead() {
        let nack = Self.packet(format: 1, type: 205, Self.sender + Self.media + [0, 100, 0, 0b101])
        let pli = Self.packet(format: 1, type: 206, Self.sender + Self.media)
        let fir = Self.packet(format: 4, type: 206, Self.sender + [0, 0, 0, 0] + Self.media + [7, 0, 0, 0])
        // 1 Mbit/s: mantissa 250 000, exponent 2.
        let remb = Self.packet(format: 15, type: 206, Self.sender + [0, 0, 0, 0] + Array("REMB".utf8) + [1, 0x0B, 0xD0, 0x90] + Self.media)
        let parsed = RTCPFeedback.parseCompound(nack + pli + fir + remb)
        #expect(parsed == [.nack(mediaSSRC: 0xABCD_EF01, sequences: [100, 101, 103]), .pictureLoss(mediaSSRC: 0xABCD_EF01),
                           .fullIntraRequest(mediaSSRC: 0xABCD_EF01, sequence: 7), .receiverEstimate(bitRate: 1_000_000, ssrcs: [0xABCD_EF01])])
    }

    /// A receiver report inside the compound comes out through RTSP's parser.
    @Test func reportsBesideFeedbackAreKept() {
        var buffer = ByteBuffer()
        RTCPPacket.receiverReport(ssrc: 1, blocks: [.init(ssrc: 0xABCD_EF01, fractionLost: 64, cumulativeLost: 3, highestSequence: 900,
                                                          jitter: 2, lastSenderReport: 0, delaySinceLastSenderReport: 0)]).write(to: &buffer)
        let pli = Self.packet(format: 1, type: 206, Self.sender + Self.media)
        let parsed = RTCPFeedback.parseCompound(Array(buffer.readableBytesView) + pli)
        guard case let .report(.receiverReport(_, blocks))? = parsed.first else {
            Issue.record("no report in \(parsed)")
            return
        }
        #expect(blocks.first?.fractionLost == 64 && parsed.last == .pictureLoss(mediaSSRC: 0xABCD_EF01))
    }

    /// Base 10, four packets: three arrived 1, 2 and 1 ms apart after 64 ms, the fourth did not.
    @Test func transportFeedbackGivesArrivalsAndLosses() throws {
        let body = Self.sender + Self.media + [0, 10, 0, 4, 0, 0, 1, 5] + [0x20, 0x03, 0x00, 0x01] + [4, 8, 4]
        guard case let .transportFeedback(feedback)? = RTCPFeedback.parseCompound(Self.packet(format: 15, type: 205, body)).first else {
            Issue.record("not read")
            return
        }
        #expect(feedback.baseSequence == 10 && feedback.feedbackCount == 5)
        #expect(feedback.packets == [.init(sequence: 10, arrival: 65_000), .init(sequence: 11, arrival: 67_000),
                                     .init(sequence: 12, arrival: 68_000), .init(sequence: 13, arrival: nil)])
        // The same in status-vector chunks: two-bit symbols (1, 2, 0) and a large negative delta.
        let vector = Self.sender + Self.media + [0, 10, 0, 3, 0, 0, 1, 0] + [0xD8, 0x00] + [4] + [0xFF, 0xFC]
        guard case let .transportFeedback(second)? = RTCPFeedback.parseCompound(Self.packet(format: 15, type: 205, vector)).first else {
            Issue.record("vector not read")
            return
        }
        #expect(second.packets.map(\.arrival) == [65_000, 64_000, nil])
    }

    /// A NACK for every packet, a REMB of exabits, a feedback claiming 65 535 statuses in one
    /// run, truncated and damaged packets: bounded answers, never a crash, never a stall.
    @Test func feedbackThatLiesIsBounded() {
        let everything = Self.packet(format: 1, type: 205, Self.sender + Self.media + Array(repeating: [0, 0, 0xFF, 0xFF], count: 300).flatMap { $0 })
        guard case let .nack(_, sequences)? = RTCPFeedback.parseCompound(everything).first else {
            Issue.record("not read")
            return
        }
        #expect(sequences.count == RTCPFeedback.maximumNackedSequences)
        let huge = Self.packet(format: 15, type: 206, Self.sender + [0, 0, 0, 0] + Array("REMB".utf8) + [0, 0xFF, 0xFF, 0xFF])
        #expect(RTCPFeedback.parseCompound(huge) == [.receiverEstimate(bitRate: RTCPFeedback.maximumBitRate, ssrcs: [])])
        let endless = Self.packet(format: 15, type: 205, Self.sender + Self.media + [0, 0, 0xFF, 0xFF, 0, 0, 0, 0] + [0x1F, 0xFF])
        #expect(RTCPFeedback.parseCompound(endless).isEmpty)
        let zeroRun = Self.packet(format: 15, type: 205, Self.sender + Self.media + [0, 0, 0, 4, 0, 0, 0, 0] + [0x00, 0x00])
        #expect(RTCPFeedback.parseCompound(zeroRun).isEmpty)
        let missingDeltas = Self.packet(format: 15, type: 205, Self.sender + Self.media + [0, 0, 0, 4, 0, 0, 0, 0] + [0x20, 0x04])
        #expect(RTCPFeedback.parseCompound(missingDeltas).isEmpty)
        var truncated = Self.packet(format: 1, type: 206, Self.sender + Self.media)
        truncated[3] = 200
        #expect(RTCPFeedback.parseCompound(truncated).isEmpty)
        #expect(RTCPFeedback.parseCompound([0x00, 0xC8, 0, 0]).isEmpty)
    }
}
