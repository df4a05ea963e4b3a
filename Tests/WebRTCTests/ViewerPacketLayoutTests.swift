import NIOCore
import RTSP
import Testing
import WebRTC
@testable import WebRTCServer

/// The RTP a viewer is sent: one-byte header extensions (RFC 8285) with the transport-wide
/// sequence number where `leave` stamps it (bytes 17–18), and the playout delay after it.
@Suite struct ViewerPacketLayoutTests {
    static let packet = RTPPacket(marker: true, payloadType: 96, sequenceNumber: 0x1234, timestamp: 9000, ssrc: 1,
                                  payload: ByteBuffer(bytes: [0x65, 1, 2, 3]))

    @Test func theTransportSequenceAloneTakesOneWord() {
        let bytes = WebRTCViewer.serialize(Self.packet, payloadType: 102, ssrc: 7, transportSequence: (3, 0xABCD))
        #expect(bytes[0] == 0x90 && bytes[1] == 0x80 | 102)
        #expect(Array(bytes[12..<20]) == [0xBE, 0xDE, 0, 1, 0x31, 0xAB, 0xCD, 0])
        #expect(Array(bytes[20...]) == [0x65, 1, 2, 3])
    }

    @Test func thePlayoutDelayFollowsTheTransportSequence() {
        let bytes = WebRTCViewer.serialize(Self.packet, payloadType: 102, ssrc: 7, transportSequence: (3, 0xABCD), playoutDelay: (5, 0.19, KeyframePlayoutDelay.maximum))
        // 19 × 10 ms minimum, 1000 × 10 ms maximum (0x3E8).
        #expect(Array(bytes[12..<24]) == [0xBE, 0xDE, 0, 2, 0x31, 0xAB, 0xCD, 0x52, 0x01, 0x33, 0xE8, 0])
        #expect(Array(bytes[17...18]) == [0xAB, 0xCD])
        #expect(Array(bytes[24...]) == [0x65, 1, 2, 3])
        let alone = WebRTCViewer.serialize(Self.packet, payloadType: 102, ssrc: 7, transportSequence: nil, playoutDelay: (5, 0, KeyframePlayoutDelay.maximum))
        #expect(alone[0] == 0x90 && Array(alone[12..<20]) == [0xBE, 0xDE, 0, 1, 0x52, 0, 0x03, 0xE8])
    }

    @Test func theFixedHeaderCarriesTheViewersOwnFields() {
        let header = WebRTCViewer.header(Self.packet, payloadType: 111, ssrc: 0xA1B2_C3D4, transportSequence: nil)
        #expect(header.bytes == [0x80, 0x80 | 111, 0x12, 0x34, 0, 0, 0x23, 0x28, 0xA1, 0xB2, 0xC3, 0xD4])
        #expect(header.timestamp == 9000)
    }

    /// The pacer holds the viewer's header and the rung's payload apart, sharing the payload's
    /// storage: the packet it lets go is the same as one serialized whole.
    @Test func aQueuedPacketSharesTheRungsPayload() {
        let header = WebRTCViewer.header(Self.packet, payloadType: 102, ssrc: 7, transportSequence: (3, 0), playoutDelay: (5, 0.19, KeyframePlayoutDelay.maximum))
        let item = MediaPacer.Item(header: header, payload: Self.packet.payload, carriesTransportSequence: true, isVideo: true)
        #expect(item.bytes == WebRTCViewer.serialize(Self.packet, payloadType: 102, ssrc: 7, transportSequence: (3, 0), playoutDelay: (5, 0.19, KeyframePlayoutDelay.maximum)))
        #expect(item.count == 24 + 4)
        item.payload.withUnsafeReadableBytes { queued in
            Self.packet.payload.withUnsafeReadableBytes { shared in #expect(queued.baseAddress == shared.baseAddress) }
        }
    }
}
