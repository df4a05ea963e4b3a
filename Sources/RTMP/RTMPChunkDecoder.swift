import NIOCore

/// What an RTMP connection's bytes become: the handshake's first message, then whole messages,
/// and the acknowledgements the node owes the peer as its window fills.
public enum RTMPInbound: Sendable, Equatable {
    /// The client's C0+C1 arrived: send this answer (S0+S1+S2).
    case handshake(answer: ByteBuffer)
    case message(RTMPMessage)
    /// The peer has sent another window's worth: acknowledge this many bytes received in all.
    case acknowledge(UInt32)
}

/// Why bytes on an RTMP connection cannot be read; the connection is closed with this reason.
public enum RTMPProtocolError: Error, Sendable, Equatable, CustomStringConvertible {
    case unsupportedVersion(UInt8)
    case chunkSizeOutOfRange(UInt32, limit: Int)
    case messageTooLarge(length: Int, limit: Int)
    case tooManyChunkStreams(limit: Int)
    case continuationWithoutHeader(chunkStream: UInt32)
    case messageLengthChanged(chunkStream: UInt32)
    case tooMuchInProgress(bytes: Int, limit: Int)

    public var description: String {
        switch self {
        case let .unsupportedVersion(version): "RTMP version \(version) is not supported (C0 must be 3)"
        case let .chunkSizeOutOfRange(size, limit): "chunk size \(size) is outside 1...\(limit)"
        case let .messageTooLarge(length, limit): "a message of \(length) bytes exceeds the limit of \(limit)"
        case let .tooManyChunkStreams(limit): "more than \(limit) chunk streams in use"
        case let .continuationWithoutHeader(stream): "chunk stream \(stream) continues a message it never started"
        case let .messageLengthChanged(stream): "chunk stream \(stream) changed a message's length before it was complete"
        case let .tooMuchInProgress(bytes, limit): "\(bytes) bytes of unfinished messages across chunk streams exceed the limit of \(limit)"
        }
    }
}

/// Frames an RTMP connection (RTMP 1.0 §5.2–5.4): the handshake (C0+C1, then C2), then chunks
/// reassembled into messages. Set Chunk Size and Abort are applied here, where they change how
/// the bytes that follow are read; Window Acknowledgement Size sets when an `.acknowledge` is due.
/// Nothing is buffered beyond one chunk per chunk stream and one message's declared length, both
/// bounded, and the unfinished messages of all chunk streams together are bounded too.
///
/// Costs stay proportional to what the peer sends: a chunk appends to its message in place (an
/// unfinished message lives in `messages`, apart from the header state copied per chunk, so its
/// buffer is never shared and never copied whole), room is not reserved ahead of bytes that have
/// not come, and the acknowledgement window has a floor so 1-byte chunks cannot each owe an answer.
public struct RTMPChunkDecoder: ByteToMessageDecoder {
    public typealias InboundOut = RTMPInbound

    public struct Limits: Sendable {
        /// The largest message (a keyframe of a 4K publisher is a few MiB).
        public var maximumMessageLength = 8 * 1024 * 1024
        /// The largest chunk size a peer may set.
        public var maximumChunkSize = 65_536
        /// Chunk streams with a message in progress or a header remembered.
        public var maximumChunkStreams = 64
        /// Bytes of unfinished messages across all chunk streams: one largest message and change.
        public var maximumBytesInProgress = 9 * 1024 * 1024
        /// The smallest acknowledgement window taken from a peer (bytes): a peer that asks for an
        /// acknowledgement every byte gets one every 64 KiB. Real clients ask for 2.5 MB.
        public var minimumAcknowledgementWindow: UInt32 = 65_536
        public init() {}
    }

    private enum Phase {
        case c0c1
        case c2
        case chunks
    }

    private struct ChunkStream {
        var timestamp: UInt32 = 0
        var delta: UInt32 = 0
        var length = 0
        var typeID: UInt8 = 0
        var streamID: UInt32 = 0
        var extended = false
        var started = false
    }

    /// Header sizes by chunk format (0 to 3).
    private static let headerSizes = [11, 7, 3, 0]

    public let limits: Limits
    private var phase = Phase.c0c1
    private var chunkSize = 128
    private var streams: [UInt32: ChunkStream] = [:]
    /// Each chunk stream's unfinished message, mutated in place (never through a copy).
    private var messages: [UInt32: ByteBuffer] = [:]
    private var bytesInProgress = 0
    private var received: UInt64 = 0
    private var window: UInt32 = 0
    private var acknowledged: UInt64 = 0
    private var pendingAcknowledgement: UInt32?

    public init(limits: Limits = .init()) {
        self.limits = limits
    }

    public mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let item = try next(&buffer) else { return .needMoreData }
        if let item = item { context.fireChannelRead(Self.wrapInboundOut(item)) }
        return .continue
    }

    public mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        // What is left of an unfinished message when the connection ends is dropped.
        try decode(context: context, buffer: &buffer)
    }

    /// The next step on `buffer`: nil when more bytes are needed, `.some(nil)` when a chunk was
    /// consumed without completing anything, else what it completed. For tests and fuzzing, which
    /// run it without a channel.
    public mutating func next(_ buffer: inout ByteBuffer) throws(RTMPProtocolError) -> RTMPInbound?? {
        switch phase {
        case .c0c1:
            guard buffer.readableBytes >= 1 + RTMPHandshake.packetSize else { return nil }
            let version = buffer.readInteger(as: UInt8.self)!
            guard version == 3 else { throw .unsupportedVersion(version) }
            let c1 = buffer.readSlice(length: RTMPHandshake.packetSize)!
            phase = .c2
            return .some(.handshake(answer: RTMPHandshake.answer(toC1: c1)))
        case .c2:
            guard buffer.readableBytes >= RTMPHandshake.packetSize else { return nil }
            // C2 echoes our S1; clients that send another one still get served (as ffmpeg's own server does).
            buffer.moveReaderIndex(forwardBy: RTMPHandshake.packetSize)
            phase = .chunks
            return .some(nil)
        case .chunks:
            if let sequence = pendingAcknowledgement {
                pendingAcknowledgement = nil
                return .some(.acknowledge(sequence))
            }
            let start = buffer.readerIndex
            guard let message = try chunk(&buffer) else {
                return buffer.readerIndex == start ? nil : .some(nil)
            }
            return .some(message)
        }
    }

    /// Reads one whole chunk, or nothing (the reader index stays) when it has not all arrived.
    private mutating func chunk(_ buffer: inout ByteBuffer) throws(RTMPProtocolError) -> RTMPInbound? {
        var view = buffer
        guard let first = view.readInteger(as: UInt8.self) else { return nil }
        let format = first >> 6
        var id = UInt32(first & 0x3F)
        if id == 0 {
            guard let byte = view.readInteger(as: UInt8.self) else { return nil }
            id = 64 + UInt32(byte)
        } else if id == 1 {
            guard let low = view.readInteger(as: UInt8.self), let high = view.readInteger(as: UInt8.self) else { return nil }
            id = 64 + UInt32(low) + UInt32(high) * 256
        }
        if streams[id] == nil, streams.count >= limits.maximumChunkStreams {
            // Chunk streams that hold nothing in progress make room first.
            if let idle = streams.first(where: { messages[$0.key] == nil })?.key { streams.removeValue(forKey: idle) } else {
                throw .tooManyChunkStreams(limit: limits.maximumChunkStreams)
            }
        }
        var stream = streams[id] ?? ChunkStream()
        guard view.readableBytes >= Self.headerSizes[Int(format)] else { return nil }
        var field: UInt32 = 0
        let have = messages[id]?.readableBytes
        var newMessage = have == nil
        var dropsUnfinished = false
        switch format {
        case 0:
            field = view.readUInt24()
            stream.length = Int(view.readUInt24())
            stream.typeID = view.readInteger(as: UInt8.self)!
            stream.streamID = view.readInteger(endianness: .little, as: UInt32.self)!
        case 1:
            field = view.readUInt24()
            stream.length = Int(view.readUInt24())
            stream.typeID = view.readInteger(as: UInt8.self)!
        case 2:
            field = view.readUInt24()
        default:
            guard stream.started else { throw .continuationWithoutHeader(chunkStream: id) }
        }
        if format < 3 {
            stream.extended = field == 0xFF_FFFF
            if !newMessage {
                // A new header in the middle of a message: what came so far is dropped (as Abort would).
                dropsUnfinished = true
                newMessage = true
            }
        }
        if stream.extended {
            guard let value = view.readInteger(as: UInt32.self) else { return nil }
            if format < 3 { field = value }
        }
        guard stream.length <= limits.maximumMessageLength else {
            throw .messageTooLarge(length: stream.length, limit: limits.maximumMessageLength)
        }
        let take = min(chunkSize, stream.length - (newMessage ? 0 : have ?? 0))
        guard view.readableBytes >= take else { return nil }
        // The whole chunk is here: commit.
        if dropsUnfinished, let dropped = messages.removeValue(forKey: id) { bytesInProgress -= dropped.readableBytes }
        if newMessage {
            switch format {
            case 0: stream.timestamp = field; stream.delta = 0
            case 1, 2: stream.delta = field; stream.timestamp &+= field
            default: stream.timestamp &+= stream.delta
            }
            stream.started = true
        }
        var body = view.readSlice(length: take)!
        received &+= UInt64(view.readerIndex - buffer.readerIndex)
        buffer = view
        streams[id] = stream
        var completed: RTMPMessage?
        if newMessage, take == stream.length {
            // A message in one chunk (most of them) is copied out once: a slice would pin the
            // channel's read buffer, and the next read appended to it would copy that buffer whole.
            var payload = ByteBufferAllocator().buffer(capacity: take)
            payload.writeBuffer(&body)
            completed = RTMPMessage(typeID: stream.typeID, streamID: stream.streamID, timestamp: stream.timestamp, payload: payload)
        } else {
            guard bytesInProgress + take <= limits.maximumBytesInProgress else {
                throw .tooMuchInProgress(bytes: bytesInProgress + take, limit: limits.maximumBytesInProgress)
            }
            bytesInProgress += take
            // In place: the dictionary's buffer is the only reference, so appending never copies it.
            messages[id, default: ByteBuffer()].writeBuffer(&body)
            if messages[id]!.readableBytes >= stream.length, let payload = messages.removeValue(forKey: id) {
                bytesInProgress -= payload.readableBytes
                completed = RTMPMessage(typeID: stream.typeID, streamID: stream.streamID, timestamp: stream.timestamp, payload: payload)
            }
        }
        if window > 0, received - acknowledged >= UInt64(window) {
            acknowledged = received
            pendingAcknowledgement = UInt32(truncatingIfNeeded: received)
        }
        if let completed {
            try apply(completed)
            return .message(completed)
        }
        return nil
    }

    /// Protocol control messages that change how the stream is read.
    private mutating func apply(_ message: RTMPMessage) throws(RTMPProtocolError) {
        switch message.typeID {
        case RTMPMessage.Kind.setChunkSize:
            guard let value = message.payload.getInteger(at: message.payload.readerIndex, as: UInt32.self) else { return }
            let size = value & 0x7FFF_FFFF
            guard size >= 1, size <= limits.maximumChunkSize else { throw .chunkSizeOutOfRange(size, limit: limits.maximumChunkSize) }
            chunkSize = Int(size)
        case RTMPMessage.Kind.abort:
            guard let id = message.payload.getInteger(at: message.payload.readerIndex, as: UInt32.self) else { return }
            if let dropped = messages.removeValue(forKey: id) { bytesInProgress -= dropped.readableBytes }
        case RTMPMessage.Kind.windowAcknowledgementSize:
            guard let value = message.payload.getInteger(at: message.payload.readerIndex, as: UInt32.self) else { return }
            window = max(value, limits.minimumAcknowledgementWindow)
        default:
            break
        }
    }

    /// Bytes of chunks read so far (handshake excluded).
    public var bytesReceived: UInt64 { received }
}

extension ByteBuffer {
    /// A 24-bit big-endian integer; the caller has checked three bytes are there.
    mutating func readUInt24() -> UInt32 {
        // Two integer reads, not readBytes: no array allocated per chunk header.
        let high = readInteger(as: UInt16.self)!
        let low = readInteger(as: UInt8.self)!
        return UInt32(high) << 8 | UInt32(low)
    }
}
