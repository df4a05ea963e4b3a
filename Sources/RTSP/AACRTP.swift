import NIOCore

/// AAC access units in RFC 3640 `mpeg4-generic` AAC-hbr mode: a 16-bit AU-headers-length, then a
/// 13-bit size and 3-bit index per unit, then the units.
public struct AACDepacketizer: Sendable {
    public let samplesPerFrame: UInt32
    private var partial: [UInt8] = []
    private var partialSize = 0
    private var partialTimestamp: UInt32 = 0

    public init(samplesPerFrame: UInt32 = 1024) {
        self.samplesPerFrame = samplesPerFrame
    }

    public struct Frame: Sendable, Equatable {
        public var timestamp: UInt32
        public var data: [UInt8]
        public init(timestamp: UInt32, data: [UInt8]) {
            self.timestamp = timestamp
            self.data = data
        }
    }

    public mutating func push(_ packet: RTPPacket, lostBefore: Bool = false) -> [Frame] {
        if lostBefore { partial = [] }
        var payload = packet.payload
        guard let headerBits = payload.readInteger(as: UInt16.self), headerBits % 16 == 0 else { return [] }
        let count = Int(headerBits) / 16
        guard count > 0, payload.readableBytes >= count * 2 else { return [] }
        var sizes: [Int] = []
        for _ in 0..<count {
            sizes.append(Int(payload.readInteger(as: UInt16.self)! >> 3))
        }
        // One unit larger than a packet arrives in fragments, the last with the marker bit.
        if count == 1, sizes[0] > payload.readableBytes || !partial.isEmpty {
            if partial.isEmpty {
                partialSize = sizes[0]
                partialTimestamp = packet.timestamp
            }
            partial += payload.readableBytesView
            guard packet.marker || partial.count >= partialSize else { return [] }
            defer { partial = [] }
            return partial.count == partialSize ? [Frame(timestamp: partialTimestamp, data: partial)] : []
        }
        var frames: [Frame] = []
        for (index, size) in sizes.enumerated() {
            guard let data = payload.readBytes(length: size) else { break }
            frames.append(Frame(timestamp: packet.timestamp &+ UInt32(index) &* samplesPerFrame, data: data))
        }
        return frames
    }
}

public struct AACPacketizer: Sendable {
    public var sequencer: RTPSequencer

    public init(payloadType: UInt8 = 97, ssrc: UInt32, initialSequence: UInt16 = 0) {
        sequencer = RTPSequencer(payloadType: payloadType, ssrc: ssrc, initialSequence: initialSequence)
    }

    public var ssrc: UInt32 { sequencer.ssrc }
    public var sequenceNumber: UInt16 {
        get { sequencer.sequenceNumber }
        set { sequencer.sequenceNumber = newValue }
    }

    /// One access unit per packet (units are at most 8191 bytes, so they always fit).
    public mutating func packetize(_ frame: ArraySlice<UInt8>, timestamp: UInt32, allocator: ByteBufferAllocator = ByteBufferAllocator()) -> RTPPacket? {
        guard let payload = Self.payload(frame, allocator: allocator) else { return nil }
        return sequencer.packets([payload], timestamp: timestamp).first
    }

    /// The RFC 3640 AAC-hbr payload of one access unit (its AU header, then the unit): made once
    /// per stream, stamped by each receiver's `RTPSequencer`. nil for an empty or oversized unit.
    public static func payload(_ frame: some Collection<UInt8>, allocator: ByteBufferAllocator = ByteBufferAllocator()) -> ByteBuffer? {
        guard !frame.isEmpty, frame.count < 8192 else { return nil }
        var buffer = allocator.buffer(capacity: frame.count + 4)
        buffer.writeInteger(UInt16(16))
        buffer.writeInteger(UInt16(frame.count << 3))
        buffer.writeBytes(frame)
        return buffer
    }
}

/// AAC in RFC 6416 `MP4A-LATM` with the StreamMuxConfig out of band (`cpresent=0`), as GStreamer
/// sends it: each audioMuxElement holds `framesPerElement` frames, each behind its length in bytes
/// (as many 255s as it takes, then a byte below 255). An element larger than a packet comes in
/// fragments with one timestamp, the last with the marker bit.
public struct LATMDepacketizer: Sendable {
    public let framesPerElement: Int
    public let samplesPerFrame: UInt32
    /// Eight channels at AAC's largest frame (6144 bits each) fit several times over.
    public static let maximumElementBytes = 16 * 1024
    private var partial: [UInt8] = []
    private var partialTimestamp: UInt32 = 0

    public init(framesPerElement: Int, samplesPerFrame: UInt32 = 1024) {
        self.framesPerElement = max(1, framesPerElement)
        self.samplesPerFrame = samplesPerFrame
    }

    public mutating func push(_ packet: RTPPacket, lostBefore: Bool = false) -> [AACDepacketizer.Frame] {
        if lostBefore { partial = [] }
        // A sender that never sets the marker still ends an element with a new timestamp.
        var frames = !partial.isEmpty && packet.timestamp != partialTimestamp ? takeElement() : []
        if partial.isEmpty { partialTimestamp = packet.timestamp }
        guard partial.count + packet.payload.readableBytes <= Self.maximumElementBytes else {
            partial = []
            return frames
        }
        partial += packet.payload.readableBytesView
        if packet.marker { frames += takeElement() }
        return frames
    }

    private mutating func takeElement() -> [AACDepacketizer.Frame] {
        defer { partial = [] }
        var frames: [AACDepacketizer.Frame] = []
        var index = 0
        for frame in 0..<framesPerElement {
            var length = 0
            while index < partial.count {
                let byte = partial[index]
                index += 1
                length += Int(byte)
                if byte != 255 { break }
            }
            guard length > 0, length <= partial.count - index else { break }
            frames.append(AACDepacketizer.Frame(timestamp: partialTimestamp &+ UInt32(frame) &* samplesPerFrame,
                                                data: Array(partial[index..<index + length])))
            index += length
        }
        return frames
    }
}
