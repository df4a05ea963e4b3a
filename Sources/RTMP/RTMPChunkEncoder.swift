import NIOCore

/// Writes messages as chunks (RTMP 1.0 §5.3): a type 0 header on each message's first chunk,
/// type 3 on the rest. Protocol control goes on chunk stream 2, the connection's commands on 3,
/// and a message stream's on 5, as Flash Media Server and its clients use them.
public struct RTMPChunkEncoder: Sendable {
    public private(set) var chunkSize = 128

    public init() {}

    public mutating func encode(_ message: RTMPMessage, into buffer: inout ByteBuffer) {
        let chunkStream: UInt8 = message.typeID <= RTMPMessage.Kind.setPeerBandwidth ? 2 : message.streamID == 0 ? 3 : 5
        var payload = message.payload
        let extended = message.timestamp >= 0xFF_FFFF
        buffer.writeInteger(chunkStream)
        buffer.writeUInt24(extended ? 0xFF_FFFF : message.timestamp)
        buffer.writeUInt24(UInt32(payload.readableBytes))
        buffer.writeInteger(message.typeID)
        buffer.writeInteger(message.streamID, endianness: .little)
        if extended { buffer.writeInteger(message.timestamp) }
        var first = true
        while first || payload.readableBytes > 0 {
            if !first {
                buffer.writeInteger(0xC0 | chunkStream)
                if extended { buffer.writeInteger(message.timestamp) }
            }
            var piece = payload.readSlice(length: min(chunkSize, payload.readableBytes))!
            buffer.writeBuffer(&piece)
            first = false
        }
        // What follows a Set Chunk Size the node sent goes out in chunks of that size.
        if message.typeID == RTMPMessage.Kind.setChunkSize, let size = message.payload.getInteger(at: message.payload.readerIndex, as: UInt32.self) {
            chunkSize = Int(min(max(size, 1), 65_536))
        }
    }
}

extension ByteBuffer {
    mutating func writeUInt24(_ value: UInt32) {
        writeInteger(UInt8(truncatingIfNeeded: value >> 16))
        writeInteger(UInt8(truncatingIfNeeded: value >> 8))
        writeInteger(UInt8(truncatingIfNeeded: value))
    }
}
