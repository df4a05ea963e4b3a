import ExtrasBase64
import MediaCore
import NIOCore

/// One H.264 picture as NAL units (no start codes), with its 90 kHz RTP timestamp.
public struct H264AccessUnit: Sendable, Equatable {
    public var timestamp: UInt32
    public var nalUnits: [[UInt8]]

    public init(timestamp: UInt32, nalUnits: [[UInt8]]) {
        self.timestamp = timestamp
        self.nalUnits = nalUnits
    }

    public var containsIDR: Bool { nalUnits.contains { ($0.first ?? 0) & 0x1F == H264.NALType.idrSlice.rawValue } }
    public var annexB: [UInt8] { H264.annexB(nalUnits) }
}

/// Reassembles access units from RTP (RFC 6184: single NAL, STAP-A, FU-A). After any loss it
/// drops everything up to the next IDR, so the decoder never gets a picture with missing references.
public struct H264Depacketizer: Sendable {
    private var timestamp: UInt32?
    private var units: [[UInt8]] = []
    private var fragment: [UInt8]?
    private var damaged = false
    public private(set) var waitingForKeyframe = true
    /// The latest parameter sets seen in-band.
    public private(set) var sps: [UInt8]?
    public private(set) var pps: [UInt8]?
    /// Access units dropped because of loss or while waiting for an IDR.
    public private(set) var droppedAccessUnits = 0
    /// Largest NAL unit accepted; a larger FU-A sequence is treated as corrupt.
    public static let maximumNALSize = 4 * 1024 * 1024
    /// Largest access unit accepted (all its NAL units together), and the most NAL units in one:
    /// a publisher that never sets the marker bit nor changes the timestamp cannot grow one without bound.
    public static let maximumAccessUnitSize = 8 * 1024 * 1024
    public static let maximumNALUnitsPerAccessUnit = H264.maximumNALUnitsPerAccessUnit
    private var unitBytes = 0
    private var oversized = false

    public init(sps: [UInt8]? = nil, pps: [UInt8]? = nil) {
        self.sps = sps
        self.pps = pps
    }

    /// Goes back to parameter sets the receiver accepted after refusing newer in-band ones; what
    /// follows is dropped until the next IDR, since it may refer to the refused sets.
    public mutating func restoreParameterSets(sps: [UInt8]?, pps: [UInt8]?) {
        self.sps = sps
        self.pps = pps
        waitingForKeyframe = true
    }

    /// - Parameter lostBefore: packets are missing before this one (from the reorder buffer).
    public mutating func push(_ packet: RTPPacket, lostBefore: Bool = false) -> [H264AccessUnit] {
        var output: [H264AccessUnit] = []
        if lostBefore {
            damaged = true
            fragment = nil
        }
        if let current = timestamp, current != packet.timestamp, !units.isEmpty || damaged {
            if let unit = finish() { output.append(unit) }
        }
        timestamp = packet.timestamp
        var payload = packet.payload
        guard let header = payload.getInteger(at: payload.readerIndex, as: UInt8.self) else { return output }
        let type = header & 0x1F
        switch type {
        case 1...23:
            append(payload.readBytes(length: payload.readableBytes) ?? [])
        case 24:  // STAP-A
            payload.moveReaderIndex(forwardBy: 1)
            while payload.readableBytes >= 2, let size = payload.readInteger(as: UInt16.self) {
                guard size > 0, let unit = payload.readBytes(length: Int(size)) else {
                    damaged = true
                    break
                }
                append(unit)
            }
        case 28:  // FU-A
            guard payload.readableBytes >= 2, let fuHeader = payload.getInteger(at: payload.readerIndex + 1, as: UInt8.self) else {
                damaged = true
                break
            }
            payload.moveReaderIndex(forwardBy: 2)
            let start = fuHeader & 0x80 != 0
            let end = fuHeader & 0x40 != 0
            if start {
                fragment = [(header & 0xE0) | (fuHeader & 0x1F)]
            }
            if fragment == nil {
                // A middle or end without its start: that NAL unit is lost.
                damaged = true
            } else {
                fragment!.append(contentsOf: payload.readableBytesView)
                if fragment!.count > Self.maximumNALSize {
                    fragment = nil
                    damaged = true
                } else if end {
                    append(fragment!)
                    fragment = nil
                }
            }
        default:
            // STAP-B, MTAP and FU-B need interleaved mode, which SDP never offers us.
            damaged = true
        }
        if packet.marker, let unit = finish() { output.append(unit) }
        return output
    }

    private mutating func append(_ unit: [UInt8]) {
        guard let first = unit.first, first & 0x80 == 0 else {
            damaged = true
            return
        }
        guard !oversized else { return }
        guard unitBytes + unit.count <= Self.maximumAccessUnitSize, units.count < Self.maximumNALUnitsPerAccessUnit else {
            // Keep nothing more of a unit that is too large; it is counted as dropped once, here.
            oversized = true
            damaged = true
            units = []
            unitBytes = 0
            droppedAccessUnits += 1
            return
        }
        switch first & 0x1F {
        case H264.NALType.sps.rawValue: sps = unit
        case H264.NALType.pps.rawValue: pps = unit
        default: break
        }
        units.append(unit)
        unitBytes += unit.count
    }

    private mutating func finish() -> H264AccessUnit? {
        defer {
            units = []
            unitBytes = 0
            oversized = false
            fragment = nil
            damaged = false
        }
        guard let timestamp, !units.isEmpty else {
            if damaged { waitingForKeyframe = true }
            return nil
        }
        let unit = H264AccessUnit(timestamp: timestamp, nalUnits: units)
        if damaged {
            waitingForKeyframe = true
            droppedAccessUnits += 1
            return nil
        }
        if waitingForKeyframe {
            guard unit.containsIDR else {
                droppedAccessUnits += 1
                return nil
            }
            waitingForKeyframe = false
        }
        return unit
    }
}

/// Gives RTP payloads the header of one sender's stream: its SSRC, payload type and sequence
/// numbers, and the packet's timestamp. Payloads are made once per stream and shared (slices of
/// one buffer); each receiver's packets differ only in what this writes.
public struct RTPSequencer: Sendable {
    public let payloadType: UInt8
    public let ssrc: UInt32
    public var sequenceNumber: UInt16

    public init(payloadType: UInt8, ssrc: UInt32, initialSequence: UInt16 = 0) {
        self.payloadType = payloadType
        self.ssrc = ssrc
        self.sequenceNumber = initialSequence
    }

    /// One packet per payload, in order, the last with the marker bit (the end of an access unit).
    public mutating func packets(_ payloads: [ByteBuffer], timestamp: UInt32) -> [RTPPacket] {
        var packets: [RTPPacket] = []
        packets.reserveCapacity(payloads.count)
        for (index, payload) in payloads.enumerated() {
            packets.append(RTPPacket(marker: index == payloads.count - 1, payloadType: payloadType, sequenceNumber: sequenceNumber,
                                     timestamp: timestamp, ssrc: ssrc, payload: payload))
            sequenceNumber &+= 1
        }
        return packets
    }
}

/// Splits access units into RTP packets: a NAL unit that fits goes alone, a larger one as FU-A.
public struct H264Packetizer: Sendable {
    public var sequencer: RTPSequencer
    public let maximumPayload: Int

    public init(payloadType: UInt8 = 96, ssrc: UInt32, initialSequence: UInt16 = 0, maximumPayload: Int = 1400) {
        sequencer = RTPSequencer(payloadType: payloadType, ssrc: ssrc, initialSequence: initialSequence)
        self.maximumPayload = maximumPayload
    }

    public var ssrc: UInt32 { sequencer.ssrc }
    public var sequenceNumber: UInt16 {
        get { sequencer.sequenceNumber }
        set { sequencer.sequenceNumber = newValue }
    }

    public mutating func packetize(_ nalUnits: [ArraySlice<UInt8>], timestamp: UInt32, allocator: ByteBufferAllocator = ByteBufferAllocator()) -> [RTPPacket] {
        sequencer.packets(Self.payloads(nalUnits, maximumPayload: maximumPayload, allocator: allocator), timestamp: timestamp)
    }

    /// Whether an RTP payload carries the start of an IDR picture or its parameter sets (a
    /// single NAL unit, the first unit of a STAP-A, or the first fragment of an FU-A): where a
    /// player that lost pictures can decode again.
    public static func startsKeyframe(_ payload: ByteBuffer) -> Bool {
        guard let header = payload.getInteger(at: payload.readerIndex, as: UInt8.self) else { return false }
        func isKeyframeUnit(_ type: UInt8) -> Bool { type == 5 || type == 7 || type == 8 }
        switch header & 0x1F {
        case 24:
            return payload.getInteger(at: payload.readerIndex + 3, as: UInt8.self).map { isKeyframeUnit($0 & 0x1F) } ?? false
        case 28:
            guard let fragment = payload.getInteger(at: payload.readerIndex + 1, as: UInt8.self) else { return false }
            return fragment & 0x80 != 0 && isKeyframeUnit(fragment & 0x1F)
        case let type:
            return isKeyframeUnit(type)
        }
    }

    /// An access unit's RTP payloads (RFC 6184 single NAL unit and FU-A packets), written into
    /// one buffer and returned as slices of it: one allocation per picture, however many
    /// receivers send it.
    public static func payloads<Unit: Collection<UInt8>>(_ nalUnits: [Unit], maximumPayload: Int = 1400,
                                                          allocator: ByteBufferAllocator = ByteBufferAllocator()) -> [ByteBuffer] {
        let fragmentPayload = max(1, maximumPayload - 2)
        var capacity = 0
        for unit in nalUnits where !unit.isEmpty {
            capacity += unit.count <= maximumPayload ? unit.count : unit.count - 1 + 2 * ((unit.count - 1 + fragmentPayload - 1) / fragmentPayload)
        }
        var buffer = allocator.buffer(capacity: capacity)
        var ranges: [Range<Int>] = []
        for unit in nalUnits where !unit.isEmpty {
            let start = buffer.writerIndex
            if unit.count <= maximumPayload {
                buffer.writeBytes(unit)
                ranges.append(start..<buffer.writerIndex)
                continue
            }
            let header = unit.first!
            var offset = unit.index(after: unit.startIndex)
            var first = true
            while offset != unit.endIndex {
                let chunkEnd = unit.index(offset, offsetBy: fragmentPayload, limitedBy: unit.endIndex) ?? unit.endIndex
                let last = chunkEnd == unit.endIndex
                let packetStart = buffer.writerIndex
                buffer.writeInteger((header & 0xE0) | 28)
                buffer.writeInteger((first ? UInt8(0x80) : 0) | (last ? 0x40 : 0) | (header & 0x1F))
                buffer.writeBytes(unit[offset..<chunkEnd])
                ranges.append(packetStart..<buffer.writerIndex)
                offset = chunkEnd
                first = false
            }
        }
        return ranges.map { buffer.getSlice(at: $0.lowerBound, length: $0.count)! }
    }
}

extension H264 {
    /// `sprop-parameter-sets` (base64 SPS,PPS) from SDP, decoded.
    public static func parameterSets(fromSprop sprop: String) -> [[UInt8]] {
        sprop.split(separator: ",").compactMap { Base64.decodeLenient($0.trimmed) }.filter { !$0.isEmpty }
    }

    public static func sprop(_ units: [[UInt8]]) -> String {
        units.map { Base64.encodeToString(bytes: $0) }.joined(separator: ",")
    }
}
