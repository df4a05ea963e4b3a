/// The fields of an MPEG-4 AudioSpecificConfig (ISO/IEC 14496-3 §1.6.2.1) the node needs, and
/// where it ends: in an LATM StreamMuxConfig it is not byte-aligned and has no length of its own.
///
/// Only the General Audio object types (AAC Main, LC, SSR, LTP, Scalable, TwinVQ, with SBR or PS
/// signalled explicitly) are read; anything else is nil, and the publisher's audio is not taken.
public struct AudioSpecificConfig: Sendable, Hashable {
    public var objectType: Int
    public var sampleRate: Int
    /// From channelConfiguration 1–7 (7 is 7.1, eight channels).
    public var channels: Int
    /// The config alone, padded with zero bits to whole bytes: what MP4's esds and RFC 3640's
    /// `config=` carry.
    public var bytes: [UInt8]

    static let generalAudioTypes: Set<Int> = [1, 2, 3, 4, 6, 7]

    public init?(_ bytes: [UInt8]) {
        var reader = BitReader(bytes)
        self.init(reading: &reader, from: bytes, startingAt: 0)
    }

    /// Reads a config from `reader`, which stands `start` bits into `source`.
    init?(reading reader: inout BitReader, from source: [UInt8], startingAt start: Int) {
        guard var objectType = Self.objectType(&reader), let sampleRate = Self.sampleRate(&reader),
              let channelConfiguration = reader.bits(4) else { return nil }
        if objectType == 5 || objectType == 29 {
            // Explicit SBR/PS: the core's object type follows the extension's sample rate.
            guard Self.sampleRate(&reader) != nil, let core = Self.objectType(&reader) else { return nil }
            objectType = core
        }
        guard Self.generalAudioTypes.contains(objectType), (1...7).contains(channelConfiguration) else { return nil }
        // GASpecificConfig (§4.4.1): frameLengthFlag, dependsOnCoreCoder (+ coreCoderDelay), extensionFlag.
        guard reader.bits(1) != nil, let dependsOnCore = reader.bits(1) else { return nil }
        if dependsOnCore == 1, reader.bits(14) == nil { return nil }
        guard let extensionFlag = reader.bits(1), extensionFlag == 0 else { return nil }
        if objectType == 6, reader.bits(3) == nil { return nil }
        // Backward-compatible SBR/PS signalling (§1.6.6.2) may follow; ffmpeg's encoder writes
        // it ("no SBR"), and an LATM config goes on after it.
        var extensionReader = reader
        if extensionReader.bits(11) == 0x2B7, Self.objectType(&extensionReader) == 5, let sbrPresent = extensionReader.bits(1) {
            if sbrPresent == 0 || Self.sampleRate(&extensionReader) != nil {
                var psReader = extensionReader
                if sbrPresent == 1, psReader.bits(11) == 0x548, psReader.bits(1) != nil { extensionReader = psReader }
                reader = extensionReader
            }
        }
        self.objectType = objectType
        self.sampleRate = sampleRate
        channels = channelConfiguration == 7 ? 8 : channelConfiguration
        var copy = BitReader(source)
        guard copy.skip(start) else { return nil }
        var length = reader.position - start
        var config: [UInt8] = []
        while length > 0 {
            let take = min(8, length)
            guard let value = copy.bits(take) else { return nil }
            config.append(UInt8(value << (8 - take)))
            length -= take
        }
        self.bytes = config
    }

    private static func objectType(_ reader: inout BitReader) -> Int? {
        guard let type = reader.bits(5) else { return nil }
        guard type == 31 else { return type }
        return reader.bits(6).map { 32 + $0 }
    }

    private static func sampleRate(_ reader: inout BitReader) -> Int? {
        guard let index = reader.bits(4) else { return nil }
        if index == 15 { return reader.bits(24).flatMap { (1...96000).contains($0) ? $0 : nil } }
        return index < AAC.sampleRates.count ? AAC.sampleRates[index] : nil
    }
}

/// An LATM StreamMuxConfig (ISO/IEC 14496-3 §1.7.3), as RFC 6416's `MP4A-LATM` carries it out of
/// band (`cpresent=0;config=…`): GStreamer's `rtspclientsink` publishes AAC this way. The node takes
/// the common case: version 0, one program, one layer, all streams framed alike, and frame
/// lengths given per frame.
public struct LATMStreamMuxConfig: Sendable, Hashable {
    public var audio: AudioSpecificConfig
    /// Frames in each audioMuxElement (numSubFrames + 1).
    public var framesPerElement: Int

    public init?(_ bytes: [UInt8]) {
        var reader = BitReader(bytes)
        guard reader.bits(1) == 0,                                  // audioMuxVersion 0
              reader.bits(1) == 1,                                  // allStreamsSameTimeFraming
              let subFrames = reader.bits(6),
              reader.bits(4) == 0, reader.bits(3) == 0              // one program, one layer
        else { return nil }
        let start = reader.position
        guard let audio = AudioSpecificConfig(reading: &reader, from: bytes, startingAt: start) else { return nil }
        // frameLengthType 0: lengths in the payload. GStreamer's rtpmp4apay ends its config with
        // the AudioSpecificConfig's last byte, so a config that stops here is taken as 0.
        guard (reader.bits(3) ?? 0) == 0 else { return nil }
        self.audio = audio
        framesPerElement = subFrames + 1
    }
}
