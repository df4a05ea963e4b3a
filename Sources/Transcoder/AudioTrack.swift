import FFmpegBridge
import MediaCore

/// The source's first audio stream, prepared once for MP4 packaging and then shared by every
/// variant unchanged. AAC in ADTS framing (MPEG-TS, raw .aac) loses its 7–9 byte headers and
/// gets an AudioSpecificConfig, which MP4 requires instead.
final class AudioTrack {
    let stream: StreamInfo
    let parameters: CodecParameters
    private let stripsADTS: Bool

    /// Codecs an MP4/fMP4 track can carry as they are.
    static let mp4Codecs: Set<String> = ["aac", "mp3", "opus", "ac3", "eac3", "alac", "flac"]

    init?(stream: StreamInfo) throws(FFmpegError) {
        guard stream.kind == .audio, Self.mp4Codecs.contains(stream.codecName) else { return nil }
        self.stream = stream
        self.parameters = try stream.parameters.copy()
        stripsADTS = stream.parameters.isAAC && stream.parameters.extradata.isEmpty
        if stripsADTS {
            try parameters.setExtradata(AAC.audioSpecificConfig(
                objectType: max(1, parameters.profile + 1), sampleRate: parameters.sampleRate, channels: parameters.channelCount))
        }
    }

    /// True when the AAC is plain LC (for `mp4a.40.2` in CODECS).
    var codecsEntry: String? {
        guard parameters.isAAC else { return nil }
        let objectType = parameters.extradata.first.map { Int($0 >> 3) } ?? 2
        return "mp4a.40.\(objectType == 0 ? 2 : objectType)"
    }

    /// Removes ADTS framing in place (the packet's buffer is shared, not copied).
    func prepare(_ packet: Packet) {
        guard stripsADTS, let header = ADTSHeader(packet.prefix(9)) else { return }
        packet.truncate(to: min(packet.size, header.frameLength))
        packet.dropFirst(header.headerLength)
    }
}
