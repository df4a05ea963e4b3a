import NIOCore

/// One RTMP message, reassembled from its chunks (RTMP 1.0 §5.4 and §6).
public struct RTMPMessage: Sendable, Equatable {
    public var typeID: UInt8
    /// The message stream (0 for the connection's own commands; a published stream's id otherwise).
    public var streamID: UInt32
    /// Milliseconds on the sender's clock, as sent (32 bits, so it wraps after 49.7 days).
    public var timestamp: UInt32
    public var payload: ByteBuffer

    public init(typeID: UInt8, streamID: UInt32 = 0, timestamp: UInt32 = 0, payload: ByteBuffer) {
        self.typeID = typeID
        self.streamID = streamID
        self.timestamp = timestamp
        self.payload = payload
    }

    /// Message types this server reads or writes.
    public enum Kind {
        public static let setChunkSize: UInt8 = 1
        public static let abort: UInt8 = 2
        public static let acknowledgement: UInt8 = 3
        public static let userControl: UInt8 = 4
        public static let windowAcknowledgementSize: UInt8 = 5
        public static let setPeerBandwidth: UInt8 = 6
        public static let audio: UInt8 = 8
        public static let video: UInt8 = 9
        public static let amf3Data: UInt8 = 15
        public static let amf3Command: UInt8 = 17
        public static let amf0Data: UInt8 = 18
        public static let amf0Command: UInt8 = 20
    }

    /// An AMF0 command (`connect`, `publish`, ...) on `streamID`.
    public static func command(_ values: [AMF0Value], streamID: UInt32 = 0) -> RTMPMessage {
        RTMPMessage(typeID: Kind.amf0Command, streamID: streamID, payload: AMF0.encode(values))
    }

    /// A protocol control message carrying one 32-bit value (set chunk size, acknowledgement, window size).
    public static func control(_ typeID: UInt8, _ value: UInt32) -> RTMPMessage {
        var payload = ByteBuffer()
        payload.writeInteger(value)
        return RTMPMessage(typeID: typeID, payload: payload)
    }

    /// Set Peer Bandwidth: the window and its limit type (2: dynamic).
    public static func peerBandwidth(_ window: UInt32, limitType: UInt8 = 2) -> RTMPMessage {
        var payload = ByteBuffer()
        payload.writeInteger(window)
        payload.writeInteger(limitType)
        return RTMPMessage(typeID: Kind.setPeerBandwidth, payload: payload)
    }

    /// User Control Stream Begin (event 0) for a message stream.
    public static func streamBegin(_ streamID: UInt32) -> RTMPMessage {
        var payload = ByteBuffer()
        payload.writeInteger(UInt16(0))
        payload.writeInteger(streamID)
        return RTMPMessage(typeID: Kind.userControl, payload: payload)
    }
}
