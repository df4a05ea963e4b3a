/// The fields of an H.264 sequence parameter set a packager needs (ITU-T H.264 §7.3.2.1.1):
/// picture size after cropping, profile and level.
public struct H264SPS: Sendable, Hashable {
    public var profile: UInt8
    public var constraints: UInt8
    public var level: UInt8
    public var width: Int
    public var height: Int
    /// From the VUI's bitstream restriction: how many pictures may precede another in decode order
    /// but follow it in output (B-frames). nil when the SPS does not say.
    public var maxNumReorderFrames: Int?

    /// Parses an SPS NAL unit including its one-byte header; nil if it is not a readable SPS.
    public init?(_ nal: some Collection<UInt8>) {
        let bytes = Array(nal)
        guard bytes.count >= 4, bytes[0] & 0x1F == H264.NALType.sps.rawValue else { return nil }
        var reader = BitReader(H264.removingEmulationPrevention(bytes[1...]))
        guard let profile = reader.bits(8), let constraints = reader.bits(8), let level = reader.bits(8),
              reader.unsignedExpGolomb() != nil else { return nil }
        self.profile = UInt8(profile)
        self.constraints = UInt8(constraints)
        self.level = UInt8(level)
        var chromaFormat = 1
        var separateColourPlanes = false
        if [100, 110, 122, 244, 44, 83, 86, 118, 128, 138, 139, 134, 135].contains(profile) {
            guard let format = reader.unsignedExpGolomb(), format <= 3 else { return nil }
            chromaFormat = format
            if chromaFormat == 3 { separateColourPlanes = reader.bits(1) == 1 }
            guard reader.unsignedExpGolomb() != nil, reader.unsignedExpGolomb() != nil, reader.bits(1) != nil,
                  let scalingMatrixPresent = reader.bits(1) else { return nil }
            if scalingMatrixPresent == 1 {
                for index in 0..<(chromaFormat == 3 ? 12 : 8) {
                    guard let present = reader.bits(1) else { return nil }
                    if present == 1, !reader.skipScalingList(size: index < 6 ? 16 : 64) { return nil }
                }
            }
        }
        guard reader.unsignedExpGolomb() != nil, let pocType = reader.unsignedExpGolomb() else { return nil }
        if pocType == 0 {
            guard reader.unsignedExpGolomb() != nil else { return nil }
        } else if pocType == 1 {
            guard reader.bits(1) != nil, reader.signedExpGolomb() != nil, reader.signedExpGolomb() != nil,
                  let cycle = reader.unsignedExpGolomb(), cycle <= 255 else { return nil }
            for _ in 0..<cycle where reader.signedExpGolomb() == nil { return nil }
        }
        guard reader.unsignedExpGolomb() != nil, reader.bits(1) != nil,
              let widthInMacroblocks = reader.unsignedExpGolomb(), let heightInMapUnits = reader.unsignedExpGolomb(),
              let frameMacroblocksOnly = reader.bits(1) else { return nil }
        if frameMacroblocksOnly == 0, reader.bits(1) == nil { return nil }
        guard reader.bits(1) != nil, let cropping = reader.bits(1) else { return nil }
        var crop = (left: 0, right: 0, top: 0, bottom: 0)
        if cropping == 1 {
            guard let left = reader.unsignedExpGolomb(), let right = reader.unsignedExpGolomb(),
                  let top = reader.unsignedExpGolomb(), let bottom = reader.unsignedExpGolomb() else { return nil }
            crop = (left, right, top, bottom)
        }
        let arrayType = separateColourPlanes ? 0 : chromaFormat
        let cropUnitX = arrayType == 0 ? 1 : (chromaFormat == 3 ? 1 : 2)
        let cropUnitY = (arrayType == 0 ? 1 : (chromaFormat == 1 ? 2 : 1)) * (2 - frameMacroblocksOnly)
        let fullWidth = (widthInMacroblocks + 1) * 16
        let fullHeight = (2 - frameMacroblocksOnly) * (heightInMapUnits + 1) * 16
        width = fullWidth - cropUnitX * (crop.left + crop.right)
        height = fullHeight - cropUnitY * (crop.top + crop.bottom)
        guard width > 0, height > 0, width <= 16384, height <= 16384 else { return nil }
        if reader.bits(1) == 1 { maxNumReorderFrames = Self.readReorderFrames(&reader) }
    }

    /// The reorder depth a decoder must allow for: the SPS's own figure, or what the profile permits.
    public var reorderDepth: Int {
        if let maxNumReorderFrames { return maxNumReorderFrames }
        // Baseline and Constrained Baseline have no B-slices; assume x264's default pyramid otherwise.
        return profile == 66 ? 0 : 2
    }

    /// VUI (Annex E.1.1) up to bitstream_restriction; nil when absent or unreadable.
    private static func readReorderFrames(_ reader: inout BitReader) -> Int? {
        guard let aspectInfo = reader.bits(1) else { return nil }
        if aspectInfo == 1, let idc = reader.bits(8), idc == 255 { guard reader.bits(32) != nil else { return nil } }
        if reader.bits(1) == 1 { guard reader.bits(1) != nil else { return nil } }                 // overscan
        if reader.bits(1) == 1 {                                                                     // video signal type
            guard reader.bits(4) != nil, let colour = reader.bits(1) else { return nil }
            if colour == 1 { guard reader.bits(24) != nil else { return nil } }
        }
        if reader.bits(1) == 1 { guard reader.unsignedExpGolomb() != nil, reader.unsignedExpGolomb() != nil else { return nil } }
        if reader.bits(1) == 1 { guard reader.bits(32) != nil, reader.bits(32) != nil, reader.bits(1) != nil else { return nil } }
        guard let nalHRD = reader.bits(1) else { return nil }
        if nalHRD == 1, !skipHRD(&reader) { return nil }
        guard let vclHRD = reader.bits(1) else { return nil }
        if vclHRD == 1, !skipHRD(&reader) { return nil }
        if nalHRD == 1 || vclHRD == 1 { guard reader.bits(1) != nil else { return nil } }           // low_delay_hrd
        guard reader.bits(1) != nil, let restriction = reader.bits(1), restriction == 1 else { return nil }
        guard reader.bits(1) != nil, reader.unsignedExpGolomb() != nil, reader.unsignedExpGolomb() != nil,
              reader.unsignedExpGolomb() != nil, reader.unsignedExpGolomb() != nil,
              let reorder = reader.unsignedExpGolomb(), reorder <= 16 else { return nil }
        return reorder
    }

    private static func skipHRD(_ reader: inout BitReader) -> Bool {
        guard let count = reader.unsignedExpGolomb(), count < 32, reader.bits(8) != nil else { return false }
        for _ in 0...count {
            guard reader.unsignedExpGolomb() != nil, reader.unsignedExpGolomb() != nil, reader.bits(1) != nil else { return false }
        }
        return reader.bits(20) != nil
    }
}

/// Reads bits most significant first, with Exp-Golomb codes; every read is bounds-checked.
struct BitReader {
    private let bytes: [UInt8]
    /// Bits read so far.
    private(set) var position = 0

    init(_ bytes: [UInt8]) {
        self.bytes = bytes
    }

    mutating func bits(_ count: Int) -> Int? {
        guard count <= 32, position + count <= bytes.count * 8 else { return nil }
        var value = 0
        for _ in 0..<count {
            let bit = (bytes[position >> 3] >> (7 - UInt8(position & 7))) & 1
            value = value << 1 | Int(bit)
            position += 1
        }
        return value
    }

    /// Moves `count` bits on; false (and no move) past the end.
    mutating func skip(_ count: Int) -> Bool {
        guard count >= 0, position + count <= bytes.count * 8 else { return false }
        position += count
        return true
    }

    mutating func unsignedExpGolomb() -> Int? {
        var zeros = 0
        while let bit = bits(1), bit == 0 {
            zeros += 1
            if zeros > 31 { return nil }
        }
        guard position <= bytes.count * 8, let rest = bits(zeros) else { return nil }
        return (1 << zeros) - 1 + rest
    }

    mutating func signedExpGolomb() -> Int? {
        guard let code = unsignedExpGolomb() else { return nil }
        return code % 2 == 1 ? (code + 1) / 2 : -(code / 2)
    }

    mutating func skipScalingList(size: Int) -> Bool {
        var last = 8
        var next = 8
        for _ in 0..<size where next != 0 {
            guard let delta = signedExpGolomb() else { return false }
            next = (last + delta + 256) % 256
            last = next == 0 ? last : next
        }
        return true
    }
}
