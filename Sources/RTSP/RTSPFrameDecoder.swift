import NIOCore

/// Frames an RTSP connection's bytes into requests, responses and `$`-interleaved RTP/RTCP, for
/// a `ByteToMessageHandler`. The limits are `RTSPMessageParser`'s; bytes that cannot be framed
/// throw its `RTSPParseError`, which reaches the next handler's `errorCaught` (a server answers
/// with the error's status and closes).
public struct RTSPFrameDecoder: ByteToMessageDecoder {
    public typealias InboundOut = RTSPInbound

    private var parser: RTSPMessageParser

    public init(limits: RTSPMessageParser.Limits = .init()) {
        parser = RTSPMessageParser(limits: limits)
    }

    public mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let item = try parser.parse(&buffer) else { return .needMoreData }
        context.fireChannelRead(Self.wrapInboundOut(item))
        return .continue
    }

    public mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        // A partial message at the end of the connection is dropped: nobody is left to answer.
        try decode(context: context, buffer: &buffer)
    }
}
