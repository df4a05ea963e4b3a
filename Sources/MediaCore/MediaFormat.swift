/// What a stream's video track is, as decoders and players need it: the parameter sets (sent in
/// SDP, in-band before every IDR, and as a decoder's extradata) and what they announce.
public struct VideoFormat: Sendable, Equatable {
    public var sps: [UInt8]
    public var pps: [UInt8]
    public var width: Int
    public var height: Int
    /// Pictures per second where the source says (SDP `a=framerate`) or the encoder was set.
    public var frameRate: Double?

    /// nil when the SPS cannot be read or there is no PPS: nothing can decode such a stream.
    public init?(sps: [UInt8], pps: [UInt8], frameRate: Double? = nil) {
        guard let parsed = H264SPS(sps), !pps.isEmpty else { return nil }
        self.sps = sps
        self.pps = pps
        self.width = parsed.width
        self.height = parsed.height
        self.frameRate = frameRate
    }

    /// `profile-level-id` for SDP: the SPS's profile, constraint and level bytes in hex.
    public var profileLevelID: String { H264.codecString(sps: sps).map { String($0.dropFirst(5)) } ?? "42e01f" }
}

/// An AAC track: what a decoder or player needs besides the frames.
public struct AudioFormat: Sendable, Equatable {
    public var sampleRate: Int
    public var channels: Int
    /// AudioSpecificConfig (ISO 14496-3 §1.6.2.1).
    public var config: [UInt8]

    public init(sampleRate: Int, channels: Int, config: [UInt8]) {
        self.sampleRate = sampleRate
        self.channels = channels
        self.config = config
    }

    /// The time base of this track's timestamps: one tick per sample.
    public var timeBase: Rational { Rational(1, Int32(clamping: max(1, sampleRate))) }
}
