/// AAC in ADTS framing (ISO/IEC 13818-7), as MPEG-TS and raw .aac carry it. MP4 wants raw
/// access units plus an AudioSpecificConfig instead, so the packager converts.
public struct ADTSHeader: Sendable, Hashable {
    public var profile: Int            // audioObjectType - 1
    public var samplingFrequencyIndex: Int
    public var channelConfiguration: Int
    public var headerLength: Int       // 7, or 9 with CRC
    public var frameLength: Int        // header included

    public init?(_ bytes: some Collection<UInt8>) {
        let b = Array(bytes.prefix(9))
        guard b.count >= 7, b[0] == 0xFF, b[1] & 0xF0 == 0xF0 else { return nil }
        let protectionAbsent = b[1] & 0x01 == 1
        profile = Int(b[2] >> 6)
        samplingFrequencyIndex = Int((b[2] >> 2) & 0x0F)
        channelConfiguration = Int((b[2] & 0x01) << 2 | b[3] >> 6)
        frameLength = Int(b[3] & 0x03) << 11 | Int(b[4]) << 3 | Int(b[5] >> 5)
        headerLength = protectionAbsent ? 7 : 9
        guard samplingFrequencyIndex < 13, frameLength >= headerLength else { return nil }
    }

    /// The two-byte AudioSpecificConfig for this stream.
    public var audioSpecificConfig: [UInt8] {
        AAC.audioSpecificConfig(objectType: profile + 1, samplingFrequencyIndex: samplingFrequencyIndex, channels: channelConfiguration)
    }
}

public enum AAC {
    /// ISO/IEC 14496-3 Table 1.18, indexed by samplingFrequencyIndex.
    public static let sampleRates = [96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000, 7350]

    /// The two-byte AudioSpecificConfig (ISO/IEC 14496-3 §1.6.2.1).
    public static func audioSpecificConfig(objectType: Int, samplingFrequencyIndex: Int, channels: Int) -> [UInt8] {
        [UInt8((objectType & 0x1F) << 3 | samplingFrequencyIndex >> 1),
         UInt8((samplingFrequencyIndex & 1) << 7 | (channels & 0x0F) << 3)]
    }

    public static func audioSpecificConfig(objectType: Int, sampleRate: Int, channels: Int) -> [UInt8] {
        audioSpecificConfig(objectType: objectType, samplingFrequencyIndex: sampleRates.firstIndex(of: sampleRate) ?? 3, channels: channels)
    }
}
