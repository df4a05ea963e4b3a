/// H.264 bitstream facts needed for packaging and hints (ITU-T H.264 §7.3).
public enum H264 {
    public enum NALType: UInt8, Sendable {
        case nonIDRSlice = 1
        case idrSlice = 5
        case sei = 6
        case sps = 7
        case pps = 8
        case accessUnitDelimiter = 9
    }

    /// Splits an Annex B byte stream (00 00 01 / 00 00 00 01 start codes) into NAL units,
    /// without their start codes. Trailing zero bytes belong to the next start code.
    /// Generic so a packet's payload can be split in place, without copying it out first.
    /// `@inlinable` (like the other splitters) so callers in other modules get a copy specialized
    /// for their buffer type: unspecialized, every byte went through a witness table and a heap-
    /// allocated accessor frame, and splitting encoded packets cost about 5 % of a live node's CPU.
    @inlinable
    public static func annexBUnits<Bytes: RandomAccessCollection<UInt8>>(_ bytes: Bytes) -> [Bytes.SubSequence] where Bytes.Index == Int {
        annexBUnits(bytes, maximumUnits: .max)!
    }

    /// The most NAL units one access unit may hold when it comes from a publisher, whatever the
    /// protocol (RTSP, RTMP, SRT): a picture has a few (delimiter, parameter sets, SEI, slices),
    /// and splitting megabytes of 1-byte units costs many times their size before anything could
    /// refuse them.
    public static let maximumNALUnitsPerAccessUnit = 1024

    /// `annexBUnits`, stopping as soon as there are more than `maximumUnits` (nil then): the cost
    /// of splitting hostile bytes stays bounded by the limit, not by how many units they hold.
    @inlinable
    public static func annexBUnits<Bytes: RandomAccessCollection<UInt8>>(_ bytes: Bytes, maximumUnits: Int) -> [Bytes.SubSequence]?
    where Bytes.Index == Int {
        var units: [Bytes.SubSequence] = []
        var index = bytes.startIndex
        var unitStart: Int? = nil
        let end = bytes.endIndex
        while index + 2 < end {
            // A start code 00 00 01 at index, index + 1 or index + 2 needs the byte at index + 2
            // to be 0 or 1; anything larger rules all three out (the usual Annex B scan).
            let third = bytes[index + 2]
            if third > 1 {
                index += 3
            } else if third == 0 {
                index += 1
            } else if bytes[index] == 0, bytes[index + 1] == 0 {
                if let start = unitStart {
                    var unitEnd = index
                    while unitEnd > start, bytes[unitEnd - 1] == 0 { unitEnd -= 1 }
                    if unitEnd > start {
                        guard units.count < maximumUnits else { return nil }
                        units.append(bytes[start..<unitEnd])
                    }
                }
                index += 3
                unitStart = index
            } else {
                // A 1 at index + 2 that ends no start code: neither index + 1 nor index + 2 can begin one.
                index += 3
            }
        }
        if let start = unitStart, start < end {
            guard units.count < maximumUnits else { return nil }
            units.append(bytes[start..<end])
        }
        return units
    }

    /// Splits length-prefixed NAL units (the MP4/avcC form) with the given length size; nil when
    /// the lengths do not add up, or when there are more than `maximumUnits`.
    @inlinable
    public static func lengthPrefixedUnits<Bytes: RandomAccessCollection<UInt8>>(_ bytes: Bytes, lengthSize: Int = 4,
                                                                                maximumUnits: Int = .max) -> [Bytes.SubSequence]?
    where Bytes.Index == Int {
        var units: [Bytes.SubSequence] = []
        var index = bytes.startIndex
        let end = bytes.endIndex
        while index < end {
            guard index + lengthSize <= end else { return nil }
            var length = 0
            for offset in 0..<lengthSize { length = length << 8 | Int(bytes[index + offset]) }
            index += lengthSize
            guard length > 0, length <= end - index, units.count < maximumUnits else { return nil }
            units.append(bytes[index..<index + length])
            index += length
        }
        return units
    }

    /// How many length-prefixed NAL units the bytes hold, nil when the lengths do not add up;
    /// nothing is allocated, so hostile bytes can be measured before they are split.
    public static func lengthPrefixedUnitCount(_ bytes: [UInt8], lengthSize: Int = 4) -> Int? {
        var index = 0, count = 0
        while index < bytes.count {
            guard index + lengthSize <= bytes.count else { return nil }
            var length = 0
            for offset in 0..<lengthSize { length = length << 8 | Int(bytes[index + offset]) }
            index += lengthSize
            guard length > 0, length <= bytes.count - index else { return nil }
            index += length
            count += 1
        }
        return count
    }

    /// The NAL units of one access unit in either form: Annex B when it starts with a start code,
    /// length-prefixed (4 bytes) otherwise; nil when it is neither.
    @inlinable
    public static func accessUnitNALUnits<Bytes: RandomAccessCollection<UInt8>>(_ bytes: Bytes) -> [Bytes.SubSequence]? where Bytes.Index == Int {
        isAnnexB(bytes) ? annexBUnits(bytes) : lengthPrefixedUnits(bytes)
    }

    /// Whether the bytes start with a start code (Annex B) rather than a length prefix.
    @inlinable
    public static func isAnnexB<Bytes: RandomAccessCollection<UInt8>>(_ bytes: Bytes) -> Bool where Bytes.Index == Int {
        let start = bytes.startIndex
        return bytes.count >= 3 && bytes[start] == 0 && bytes[start + 1] == 0
            && (bytes[start + 2] == 1 || (bytes.count >= 4 && bytes[start + 2] == 0 && bytes[start + 3] == 1))
    }

    /// SPS and PPS NAL units from codec extradata, in either avcC (ISO/IEC 14496-15) or Annex B form.
    public static func parameterSets(fromExtradata extradata: [UInt8]) -> (sps: [[UInt8]], pps: [[UInt8]]) {
        if let record = AVCDecoderConfigurationRecord(extradata) {
            return (record.sequenceParameterSets, record.pictureParameterSets)
        }
        return parameterSets(inAnnexB: extradata)
    }

    /// SPS and PPS NAL units among Annex B bytes: extradata, or an access unit that carries them in-band.
    public static func parameterSets<Bytes: RandomAccessCollection<UInt8>>(inAnnexB bytes: Bytes) -> (sps: [[UInt8]], pps: [[UInt8]])
    where Bytes.Index == Int {
        let units = annexBUnits(bytes)
        return (units.filter { $0.first.map { $0 & 0x1F } == NALType.sps.rawValue }.map(Array.init),
                units.filter { $0.first.map { $0 & 0x1F } == NALType.pps.rawValue }.map(Array.init))
    }

    /// The RFC 6381 `avc1.PPCCLL` string from an SPS NAL unit (with its one-byte header):
    /// profile_idc, the constraint flag byte and level_idc, in hex.
    public static func codecString(sps: some Collection<UInt8>) -> String? {
        let bytes = Array(sps)
        guard bytes.count >= 4, bytes[0] & 0x1F == NALType.sps.rawValue else { return nil }
        // The first three payload bytes cannot contain an emulation-prevention sequence
        // unless profile and constraints are both zero, which no real profile is.
        let payload = removingEmulationPrevention(bytes[1...])
        guard payload.count >= 3 else { return nil }
        return "avc1." + lowercaseHex(payload[0..<3])
    }

    /// Removes the 0x03 in every 00 00 03 sequence (§7.4.1) to get the RBSP.
    public static func removingEmulationPrevention(_ bytes: some Collection<UInt8>) -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(bytes.count)
        var zeros = 0
        for byte in bytes {
            if zeros >= 2, byte == 3 {
                zeros = 0
                continue
            }
            output.append(byte)
            zeros = byte == 0 ? zeros + 1 : 0
        }
        return output
    }

    /// Builds Annex B extradata (start code + unit each) from parameter sets.
    public static func annexB(_ units: [[UInt8]]) -> [UInt8] {
        units.flatMap { [0, 0, 0, 1] + $0 }
    }
}

/// The `avcC` box payload that MP4 and Matroska carry as H.264 extradata.
public struct AVCDecoderConfigurationRecord: Sendable, Hashable {
    public var lengthSize: Int
    public var sequenceParameterSets: [[UInt8]]
    public var pictureParameterSets: [[UInt8]]

    public init?(_ bytes: [UInt8]) {
        guard bytes.count >= 7, bytes[0] == 1 else { return nil }
        lengthSize = Int(bytes[4] & 0x03) + 1
        // byte 5 holds the SPS count; the sets start at byte 6.
        var index = 6
        func readSets(count: Int) -> [[UInt8]]? {
            var sets: [[UInt8]] = []
            for _ in 0..<count {
                guard index + 2 <= bytes.count else { return nil }
                let length = Int(bytes[index]) << 8 | Int(bytes[index + 1])
                index += 2
                guard index + length <= bytes.count else { return nil }
                sets.append(Array(bytes[index..<index + length]))
                index += length
            }
            return sets
        }
        guard let sps = readSets(count: Int(bytes[5] & 0x1F)) else { return nil }
        guard index < bytes.count else { return nil }
        let ppsCount = Int(bytes[index])
        index += 1
        guard let pps = readSets(count: ppsCount) else { return nil }
        sequenceParameterSets = sps
        pictureParameterSets = pps
    }
}
