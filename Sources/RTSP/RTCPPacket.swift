import NIOCore

/// The RTCP packets the node sends and reads (RFC 3550 §6.4).
public enum RTCPPacket: Sendable, Equatable {
    /// Sender report: wall clock ↔ RTP timestamp mapping, and what was sent.
    case senderReport(ssrc: UInt32, ntpTimestamp: UInt64, rtpTimestamp: UInt32, packetCount: UInt32, octetCount: UInt32)
    /// Receiver report from a player or to a publisher: loss and jitter per source.
    case receiverReport(ssrc: UInt32, blocks: [ReportBlock])
    case goodbye(ssrcs: [UInt32])
    case other(type: UInt8)

    public struct ReportBlock: Sendable, Equatable {
        public var ssrc: UInt32
        public var fractionLost: UInt8
        public var cumulativeLost: UInt32
        public var highestSequence: UInt32
        public var jitter: UInt32
        /// The middle 32 bits of the NTP timestamp of the last sender report the reporter got (0: none).
        public var lastSenderReport: UInt32
        /// Time from that sender report to this report, in 1/65536 s.
        public var delaySinceLastSenderReport: UInt32
        public init(ssrc: UInt32, fractionLost: UInt8, cumulativeLost: UInt32, highestSequence: UInt32, jitter: UInt32,
                    lastSenderReport: UInt32 = 0, delaySinceLastSenderReport: UInt32 = 0) {
            self.ssrc = ssrc
            self.fractionLost = fractionLost
            self.cumulativeLost = cumulativeLost
            self.highestSequence = highestSequence
            self.jitter = jitter
            self.lastSenderReport = lastSenderReport
            self.delaySinceLastSenderReport = delaySinceLastSenderReport
        }
    }

    /// The packets of a compound packet, each whole (header included) with its first byte and
    /// type; stops quietly at anything malformed (RTCP is advisory: what came before counts).
    public static func splitCompound(_ buffer: ByteBuffer) -> [(first: UInt8, type: UInt8, packet: ByteBuffer)] {
        var buffer = buffer
        var packets: [(first: UInt8, type: UInt8, packet: ByteBuffer)] = []
        while buffer.readableBytes >= 4 {
            guard let first = buffer.getInteger(at: buffer.readerIndex, as: UInt8.self), first >> 6 == 2,
                  let type = buffer.getInteger(at: buffer.readerIndex + 1, as: UInt8.self),
                  let words = buffer.getInteger(at: buffer.readerIndex + 2, as: UInt16.self) else { break }
            let length = (Int(words) + 1) * 4
            guard buffer.readableBytes >= length, let packet = buffer.readSlice(length: length) else { break }
            packets.append((first, type, packet))
        }
        return packets
    }

    /// Parses a compound packet; stops quietly at anything malformed (RTCP is advisory).
    public static func parseCompound(_ buffer: ByteBuffer) -> [RTCPPacket] {
        var packets: [RTCPPacket] = []
        for (b0, type, packet) in splitCompound(buffer) {
            var body = packet
            body.moveReaderIndex(forwardBy: 4)
            let count = Int(b0 & 0x1F)
            switch type {
            case 200:
                guard let ssrc = body.readInteger(as: UInt32.self), let ntp = body.readInteger(as: UInt64.self),
                      let rtp = body.readInteger(as: UInt32.self), let packetsSent = body.readInteger(as: UInt32.self),
                      let octets = body.readInteger(as: UInt32.self) else { return packets }
                packets.append(.senderReport(ssrc: ssrc, ntpTimestamp: ntp, rtpTimestamp: rtp, packetCount: packetsSent, octetCount: octets))
            case 201:
                guard let ssrc = body.readInteger(as: UInt32.self) else { return packets }
                var blocks: [ReportBlock] = []
                for _ in 0..<count {
                    guard let source = body.readInteger(as: UInt32.self), let lost = body.readInteger(as: UInt32.self),
                          let highest = body.readInteger(as: UInt32.self), let jitter = body.readInteger(as: UInt32.self),
                          let lsr = body.readInteger(as: UInt32.self), let dlsr = body.readInteger(as: UInt32.self) else { break }
                    blocks.append(ReportBlock(ssrc: source, fractionLost: UInt8(lost >> 24), cumulativeLost: lost & 0xFFFFFF,
                                              highestSequence: highest, jitter: jitter, lastSenderReport: lsr, delaySinceLastSenderReport: dlsr))
                }
                packets.append(.receiverReport(ssrc: ssrc, blocks: blocks))
            case 203:
                packets.append(.goodbye(ssrcs: (0..<count).compactMap { _ in body.readInteger(as: UInt32.self) }))
            default:
                packets.append(.other(type: type))
            }
        }
        return packets
    }

    public func write(to buffer: inout ByteBuffer) {
        switch self {
        case let .senderReport(ssrc, ntp, rtp, packetCount, octetCount):
            buffer.writeInteger(UInt8(0x80))
            buffer.writeInteger(UInt8(200))
            buffer.writeInteger(UInt16(6))
            buffer.writeInteger(ssrc)
            buffer.writeInteger(ntp)
            buffer.writeInteger(rtp)
            buffer.writeInteger(packetCount)
            buffer.writeInteger(octetCount)
        case let .receiverReport(ssrc, blocks):
            buffer.writeInteger(UInt8(0x80 | UInt8(min(blocks.count, 31))))
            buffer.writeInteger(UInt8(201))
            buffer.writeInteger(UInt16(1 + 6 * min(blocks.count, 31)))
            buffer.writeInteger(ssrc)
            for block in blocks.prefix(31) {
                buffer.writeInteger(block.ssrc)
                buffer.writeInteger(UInt32(block.fractionLost) << 24 | (block.cumulativeLost & 0xFFFFFF))
                buffer.writeInteger(block.highestSequence)
                buffer.writeInteger(block.jitter)
                buffer.writeInteger(block.lastSenderReport)
                buffer.writeInteger(block.delaySinceLastSenderReport)
            }
        case let .goodbye(ssrcs):
            buffer.writeInteger(UInt8(0x80 | UInt8(min(ssrcs.count, 31))))
            buffer.writeInteger(UInt8(203))
            buffer.writeInteger(UInt16(min(ssrcs.count, 31)))
            for ssrc in ssrcs.prefix(31) { buffer.writeInteger(ssrc) }
        case .other:
            break
        }
    }

    /// NTP format (seconds since 1900 in the high 32 bits, fraction in the low) from Unix seconds.
    public static func ntpTimestamp(unixSeconds: Double) -> UInt64 {
        let seconds = unixSeconds + 2_208_988_800
        let whole = UInt64(seconds)
        let fraction = UInt64((seconds - Double(whole)) * 4_294_967_296)
        return whole << 32 | fraction
    }
}
