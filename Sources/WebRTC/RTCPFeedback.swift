import NIOCore
import RTSP

/// What a WebRTC viewer sends back about the media: reports (parsed by RTSP's `RTCPPacket`) and
/// the feedback messages of RFC 4585/5104 and the transport-wide congestion control draft. Every
/// count in a packet is bounded by the packet's own bytes and by the limits below, so a viewer
/// that lies (a NACK for every packet ever sent, a REMB of exabits) costs what it sent.
public enum RTCPFeedback: Sendable, Equatable {
    /// SR, RR, BYE and anything else RTSP's parser knows.
    case report(RTCPPacket)
    /// Generic NACK (RTPFB 1): sequence numbers the viewer did not get.
    case nack(mediaSSRC: UInt32, sequences: [UInt16])
    /// Picture Loss Indication (PSFB 1).
    case pictureLoss(mediaSSRC: UInt32)
    /// Full Intra Request (PSFB 4), one per FCI entry.
    case fullIntraRequest(mediaSSRC: UInt32, sequence: UInt8)
    /// REMB (PSFB 15, "REMB"): the viewer's estimate of what it can receive, bit/s (at most
    /// `maximumBitRate`).
    case receiverEstimate(bitRate: UInt64, ssrcs: [UInt32])
    /// Transport-wide feedback (RTPFB 15).
    case transportFeedback(TransportFeedback)

    /// The most sequence numbers one NACK packet may name (a 1500-byte datagram of NACK FCIs
    /// names about 6000; the node answers from a short history anyway).
    public static let maximumNackedSequences = 1024
    /// A REMB above this (100 Gbit/s) is taken as this.
    public static let maximumBitRate: UInt64 = 100_000_000_000

    /// Parses a compound packet (already decrypted); stops quietly at anything malformed, as
    /// RTCP is advisory: what came before the damage counts.
    public static func parseCompound(_ bytes: [UInt8]) -> [RTCPFeedback] {
        var feedback: [RTCPFeedback] = []
        for (first, type, packet) in RTCPPacket.splitCompound(ByteBuffer(bytes: bytes)) {
            switch type {
            case 205, 206:
                var body = packet
                body.moveReaderIndex(forwardBy: 4)
                guard let _ = body.readInteger(as: UInt32.self), let media = body.readInteger(as: UInt32.self) else { return feedback }
                if let parsed = parseFeedback(type: type, format: first & 0x1F, mediaSSRC: media, body: &body) { feedback += parsed }
            default:
                feedback += RTCPPacket.parseCompound(packet).map { .report($0) }
            }
        }
        return feedback
    }

    private static func parseFeedback(type: UInt8, format: UInt8, mediaSSRC: UInt32, body: inout ByteBuffer) -> [RTCPFeedback]? {
        switch (type, format) {
        case (205, 1):
            var sequences: [UInt16] = []
            while sequences.count < maximumNackedSequences, let packetID = body.readInteger(as: UInt16.self),
                  let bitmask = body.readInteger(as: UInt16.self) {
                sequences.append(packetID)
                for bit in 0..<16 where bitmask & (1 << bit) != 0 { sequences.append(packetID &+ UInt16(bit + 1)) }
            }
            return [.nack(mediaSSRC: mediaSSRC, sequences: Array(sequences.prefix(maximumNackedSequences)))]
        case (205, 15):
            return TransportFeedback(parsing: &body).map { [.transportFeedback($0)] }
        case (206, 1):
            return [.pictureLoss(mediaSSRC: mediaSSRC)]
        case (206, 4):
            var requests: [RTCPFeedback] = []
            while requests.count < 16, let ssrc = body.readInteger(as: UInt32.self), let sequence = body.readInteger(as: UInt8.self) {
                body.moveReaderIndex(forwardBy: min(3, body.readableBytes))
                requests.append(.fullIntraRequest(mediaSSRC: ssrc, sequence: sequence))
            }
            return requests
        case (206, 15):
            guard body.readString(length: 4) == "REMB", let count = body.readInteger(as: UInt8.self),
                  let exponentAndMantissa = body.readBytes(length: 3) else { return nil }
            let exponent = UInt64(exponentAndMantissa[0] >> 2)
            let mantissa = UInt64(exponentAndMantissa[0] & 0x03) << 16 | UInt64(exponentAndMantissa[1]) << 8 | UInt64(exponentAndMantissa[2])
            // 18 bits shifted by up to 63: anything past the cap (or past 64 bits) is the cap.
            let bitRate = exponent > 45 ? (mantissa == 0 ? 0 : maximumBitRate) : min(maximumBitRate, mantissa << exponent)
            let ssrcs = (0..<Int(count)).compactMap { _ in body.readInteger(as: UInt32.self) }
            return [.receiverEstimate(bitRate: bitRate, ssrcs: ssrcs)]
        default:
            return nil
        }
    }
}

/// One transport-wide feedback packet (draft-holmer-rmcat-transport-wide-cc-extensions-01 §3.1):
/// for a run of the node's transport-wide sequence numbers, which arrived and when.
public struct TransportFeedback: Sendable, Equatable {
    public struct Packet: Sendable, Equatable {
        public var sequence: UInt16
        /// Arrival at the viewer in microseconds on the viewer's clock (reference time plus the
        /// deltas so far); nil: not received.
        public var arrival: Int64?

        public init(sequence: UInt16, arrival: Int64?) {
            self.sequence = sequence
            self.arrival = arrival
        }
    }

    public var baseSequence: UInt16
    /// Counts feedback packets, so a lost one shows.
    public var feedbackCount: UInt8
    public var packets: [Packet]

    /// The most packet statuses one feedback may carry. The field allows 65 535; a real viewer
    /// reports what arrived in the last 100 ms or so, a few hundred at most.
    public static let maximumStatuses = 8192

    public init(baseSequence: UInt16, feedbackCount: UInt8, packets: [Packet]) {
        self.baseSequence = baseSequence
        self.feedbackCount = feedbackCount
        self.packets = packets
    }

    init?(parsing body: inout ByteBuffer) {
        guard let base = body.readInteger(as: UInt16.self), let statusCount = body.readInteger(as: UInt16.self),
              let referenceBytes = body.readBytes(length: 3), let count = body.readInteger(as: UInt8.self),
              Int(statusCount) <= Self.maximumStatuses else { return nil }
        // 24-bit signed, in multiples of 64 ms.
        var reference = Int64(referenceBytes[0]) << 16 | Int64(referenceBytes[1]) << 8 | Int64(referenceBytes[2])
        if reference & 0x80_0000 != 0 { reference -= 0x100_0000 }
        var statuses: [UInt8] = []
        statuses.reserveCapacity(Int(statusCount))
        while statuses.count < Int(statusCount) {
            guard let chunk = body.readInteger(as: UInt16.self) else { return nil }
            let remaining = Int(statusCount) - statuses.count
            if chunk & 0x8000 == 0 {
                // Run length: one status for up to 8191 packets.
                let status = UInt8((chunk >> 13) & 0x3)
                statuses += repeatElement(status, count: min(remaining, Int(chunk & 0x1FFF)))
                if chunk & 0x1FFF == 0 { return nil }
            } else if chunk & 0x4000 == 0 {
                // Fourteen one-bit symbols: received (small delta) or not.
                for bit in (0..<14).reversed() where statuses.count < Int(statusCount) { statuses.append(UInt8((chunk >> UInt16(bit)) & 1)) }
            } else {
                // Seven two-bit symbols.
                for pair in (0..<7).reversed() where statuses.count < Int(statusCount) { statuses.append(UInt8((chunk >> UInt16(pair * 2)) & 0x3)) }
            }
        }
        var time = reference * 64_000
        var packets: [Packet] = []
        packets.reserveCapacity(statuses.count)
        for (index, status) in statuses.enumerated() {
            let sequence = base &+ UInt16(truncatingIfNeeded: index)
            switch status {
            case 1:
                guard let delta = body.readInteger(as: UInt8.self) else { return nil }
                time += Int64(delta) * 250
                packets.append(Packet(sequence: sequence, arrival: time))
            case 2:
                guard let delta = body.readInteger(as: Int16.self) else { return nil }
                time += Int64(delta) * 250
                packets.append(Packet(sequence: sequence, arrival: time))
            case 0:
                packets.append(Packet(sequence: sequence, arrival: nil))
            default:
                return nil
            }
        }
        baseSequence = base
        feedbackCount = count
        self.packets = packets
    }
}
