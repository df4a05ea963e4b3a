import MediaCore

/// What a viewer's link carries beyond its rung's video payload, from what the node sent it:
/// the video's RTP headers, header extension and SRTP tag, and the audio beside it. Transport-wide
/// feedback counts those bytes too, so the rungs the switching policy compares with its estimate
/// must (`SwitchingPolicy.LinkCost`).
///
/// Audio's rate is taken per second of audio sent, not per second of wall clock: a new viewer's
/// catch-up sends a second or two of cached audio at once, which a wall-clock rate would read as
/// twice the real one.
public struct WireCostMeter: Sendable {
    private var videoPayloadBytes = 0
    private var videoWireBytes = 0
    private var audioWireBytes = 0
    private var audioSeconds = 0.0

    public init() {}

    /// A video packet of `payload` bytes left as `wire` bytes (header, extension, tag included).
    public mutating func sentVideo(payload: Int, wire: Int) {
        videoPayloadBytes += max(0, payload)
        videoWireBytes += max(0, wire)
    }

    /// An audio packet carrying `seconds` of audio left as `wire` bytes.
    public mutating func sentAudio(wire: Int, seconds: Double) {
        guard seconds.isFinite, seconds > 0 else { return }
        audioWireBytes += max(0, wire)
        audioSeconds += seconds
    }

    /// The cost so far; none until there is a few kilobytes of video to read a ratio from.
    public var cost: SwitchingPolicy.LinkCost {
        let factor = videoPayloadBytes >= 4096 ? Double(videoWireBytes) / Double(videoPayloadBytes) : 1
        let audio = audioSeconds >= 0.2 ? Double(audioWireBytes) * 8 / audioSeconds : 0
        return SwitchingPolicy.LinkCost(videoFactor: factor, besides: audio)
    }
}

/// An Opus packet's duration from its TOC byte (RFC 6716 §3.1), so audio is counted per second
/// of sound whatever frame size the encoder chose.
public enum OpusPacket {
    /// Seconds of audio in `packet`; 0 for an empty or malformed one.
    public static func duration<Bytes: Collection>(_ packet: Bytes) -> Double where Bytes.Element == UInt8 {
        guard let toc = packet.first else { return 0 }
        let configuration = Int(toc >> 3)
        let frame: Double
        switch configuration {
        case 0...11: frame = [0.010, 0.020, 0.040, 0.060][configuration % 4]  // SILK
        case 12...15: frame = [0.010, 0.020][configuration % 2]  // hybrid
        default: frame = [0.0025, 0.005, 0.010, 0.020][configuration % 4]  // CELT
        }
        switch toc & 0x03 {
        case 0: return frame
        case 1, 2: return 2 * frame
        default:
            // Code 3: the frame count is the next byte's low six bits.
            guard packet.count >= 2 else { return 0 }
            return Double(packet[packet.index(after: packet.startIndex)] & 0x3F) * frame
        }
    }
}
