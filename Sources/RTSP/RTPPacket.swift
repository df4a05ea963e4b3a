import NIOCore

/// An RTP packet (RFC 3550 §5.1). The payload is a slice of the received buffer (no copy).
public struct RTPPacket: Sendable, Equatable {
    public var marker: Bool
    public var payloadType: UInt8
    public var sequenceNumber: UInt16
    public var timestamp: UInt32
    public var ssrc: UInt32
    public var payload: ByteBuffer

    public init(marker: Bool, payloadType: UInt8, sequenceNumber: UInt16, timestamp: UInt32, ssrc: UInt32, payload: ByteBuffer) {
        self.marker = marker
        self.payloadType = payloadType
        self.sequenceNumber = sequenceNumber
        self.timestamp = timestamp
        self.ssrc = ssrc
        self.payload = payload
    }

    public enum ParseError: Error, Sendable, Equatable {
        case tooShort(Int)
        case badVersion(UInt8)
        case badLength
    }

    /// Parses one packet; CSRCs and header extensions are skipped, padding removed.
    public init(parsing buffer: ByteBuffer) throws(ParseError) {
        var buffer = buffer
        guard buffer.readableBytes >= 12, let b0 = buffer.readInteger(as: UInt8.self), let b1 = buffer.readInteger(as: UInt8.self),
              let sequence = buffer.readInteger(as: UInt16.self), let timestamp = buffer.readInteger(as: UInt32.self),
              let ssrc = buffer.readInteger(as: UInt32.self) else { throw .tooShort(buffer.readableBytes) }
        guard b0 >> 6 == 2 else { throw .badVersion(b0 >> 6) }
        let csrcCount = Int(b0 & 0x0F)
        guard buffer.readableBytes >= csrcCount * 4 else { throw .badLength }
        buffer.moveReaderIndex(forwardBy: csrcCount * 4)
        if b0 & 0x10 != 0 {
            guard buffer.readableBytes >= 4, let words = buffer.getInteger(at: buffer.readerIndex + 2, as: UInt16.self),
                  buffer.readableBytes >= 4 + Int(words) * 4 else { throw .badLength }
            buffer.moveReaderIndex(forwardBy: 4 + Int(words) * 4)
        }
        if b0 & 0x20 != 0 {
            guard let padding = buffer.getInteger(at: buffer.writerIndex - 1, as: UInt8.self), padding > 0,
                  Int(padding) <= buffer.readableBytes else { throw .badLength }
            buffer.moveWriterIndex(to: buffer.writerIndex - Int(padding))
        }
        self.init(marker: b1 & 0x80 != 0, payloadType: b1 & 0x7F, sequenceNumber: sequence, timestamp: timestamp, ssrc: ssrc,
                  payload: buffer)
    }

    public func write(to buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt8(0x80))
        buffer.writeInteger((marker ? UInt8(0x80) : 0) | (payloadType & 0x7F))
        buffer.writeInteger(sequenceNumber)
        buffer.writeInteger(timestamp)
        buffer.writeInteger(ssrc)
        var payload = payload
        buffer.writeBuffer(&payload)
    }

    public var serializedSize: Int { 12 + payload.readableBytes }
}

/// Serial-number arithmetic for 16-bit RTP sequence numbers (RFC 1982).
public enum SequenceNumber {
    /// Positive when `a` comes after `b`, allowing for wrap-around.
    public static func distance(_ a: UInt16, after b: UInt16) -> Int {
        Int(Int16(bitPattern: a &- b))
    }
}
