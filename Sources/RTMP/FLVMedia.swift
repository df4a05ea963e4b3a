import MediaCore
import NIOCore

/// What an RTMP video message (an FLV VIDEODATA tag body) carries.
public enum FLVVideo: Sendable, Equatable {
    /// The AVC sequence header: the decoder configuration (parameter sets, NAL length size).
    case sequenceHeader(AVCDecoderConfigurationRecord)
    /// One picture: its NAL units in decode order, its composition time offset (presentation
    /// minus decoding time, in ms; B-frames make it positive) and whether it is a keyframe.
    case picture(nalUnits: [[UInt8]], compositionTime: Int32, isKeyframe: Bool)
    case endOfSequence
    /// Something carried for players that a publish does not need (a video info/command frame).
    case ignored

    /// Why a video message is not taken: the node reads H.264 (AVC) only.
    public enum Problem: Error, Sendable, Equatable, CustomStringConvertible {
        case empty
        case unsupportedCodec(Int)
        /// Enhanced RTMP (veovera): HEVC, AV1, VP9 and others, by FourCC.
        case enhanced(fourCC: String)
        case malformed(String)

        public var description: String {
            switch self {
            case .empty: "an empty video message"
            case let .unsupportedCodec(id): "video codec \(FLVVideo.codecName(id)) (FLV codec id \(id)) is not supported; publish H.264"
            case let .enhanced(fourCC): "Enhanced RTMP video '\(fourCC)' is not supported; publish H.264 (avc1)"
            case let .malformed(what): "malformed H.264 video message: \(what)"
            }
        }
    }

    static func codecName(_ id: Int) -> String {
        switch id {
        case 2: "Sorenson H.263"
        case 3: "Screen video"
        case 4: "VP6"
        case 5: "VP6 with alpha"
        case 6: "Screen video 2"
        case 12: "HEVC"
        case 13: "AV1"
        default: "#\(id)"
        }
    }

    /// Reads a video message's payload. `lengthSize` is the NAL length size the last sequence header gave.
    public static func parse(_ payload: ByteBuffer, lengthSize: Int) throws(Problem) -> FLVVideo {
        var payload = payload
        guard let first = payload.readInteger(as: UInt8.self) else { throw .empty }
        if first & 0x80 != 0 {
            // IsExHeader: the codec is named by a FourCC after the first byte.
            let fourCC = payload.readBytes(length: 4).map { String(decoding: $0, as: UTF8.self) } ?? "?"
            throw .enhanced(fourCC: fourCC.unicodeScalars.allSatisfy { $0.value >= 0x20 && $0.value < 0x7F } ? fourCC : "?")
        }
        let frameType = Int(first >> 4)
        let codec = Int(first & 0x0F)
        if frameType == 5 { return .ignored }
        guard codec == 7 else { throw .unsupportedCodec(codec) }
        guard let packetType = payload.readInteger(as: UInt8.self), payload.readableBytes >= 3 else { throw .malformed("header cut short") }
        let raw = payload.readUInt24()
        // Composition time is a signed 24-bit number.
        let compositionTime = Int32(bitPattern: raw & 0x80_0000 != 0 ? raw | 0xFF00_0000 : raw)
        let body = Array(payload.readableBytesView)
        switch packetType {
        case 0:
            guard let record = AVCDecoderConfigurationRecord(body), !record.sequenceParameterSets.isEmpty,
                  !record.pictureParameterSets.isEmpty else { throw .malformed("unreadable AVC decoder configuration record") }
            return .sequenceHeader(record)
        case 1:
            guard let units = H264.lengthPrefixedUnits(body, lengthSize: lengthSize, maximumUnits: H264.maximumNALUnitsPerAccessUnit) else {
                if H264.lengthPrefixedUnitCount(body, lengthSize: lengthSize) != nil {
                    throw .malformed("more than \(H264.maximumNALUnitsPerAccessUnit) NAL units in one picture")
                }
                throw .malformed("NAL unit lengths do not add up to the message (\(body.count) bytes)")
            }
            let nalUnits = units.map(Array.init)
            let isKeyframe = frameType == 1 || nalUnits.contains { ($0.first ?? 0) & 0x1F == H264.NALType.idrSlice.rawValue }
            return .picture(nalUnits: nalUnits, compositionTime: compositionTime, isKeyframe: isKeyframe)
        case 2:
            return .endOfSequence
        default:
            throw .malformed("AVC packet type \(packetType)")
        }
    }
}

/// What an RTMP audio message (an FLV AUDIODATA tag body) carries.
public enum FLVAudio: Sendable, Equatable {
    /// AAC's AudioSpecificConfig.
    case configuration(AudioSpecificConfig)
    /// One raw AAC access unit.
    case frame([UInt8])

    public enum Problem: Error, Sendable, Equatable, CustomStringConvertible {
        case empty
        case unsupportedFormat(Int)
        case malformed(String)

        public var description: String {
            switch self {
            case .empty: "an empty audio message"
            case let .unsupportedFormat(format): "audio format \(FLVAudio.formatName(format)) (FLV sound format \(format)) is not supported; publish AAC"
            case let .malformed(what): "malformed AAC audio message: \(what)"
            }
        }
    }

    static func formatName(_ format: Int) -> String {
        switch format {
        case 0, 3: "linear PCM"
        case 1: "ADPCM"
        case 2, 14: "MP3"
        case 4, 5, 6: "Nellymoser"
        case 7: "G.711 A-law"
        case 8: "G.711 mu-law"
        case 9: "ExHeader (Enhanced RTMP)"
        case 11: "Speex"
        default: "#\(format)"
        }
    }

    public static func parse(_ payload: ByteBuffer) throws(Problem) -> FLVAudio {
        var payload = payload
        guard let first = payload.readInteger(as: UInt8.self) else { throw .empty }
        let format = Int(first >> 4)
        guard format == 10 else { throw .unsupportedFormat(format) }
        guard let packetType = payload.readInteger(as: UInt8.self) else { throw .malformed("header cut short") }
        let body = Array(payload.readableBytesView)
        switch packetType {
        case 0:
            guard let config = AudioSpecificConfig(body) else { throw .malformed("unreadable AudioSpecificConfig") }
            return .configuration(config)
        case 1:
            guard !body.isEmpty, body.count < 8192 else { throw .malformed("an access unit of \(body.count) bytes") }
            return .frame(body)
        default:
            throw .malformed("AAC packet type \(packetType)")
        }
    }
}
