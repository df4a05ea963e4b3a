/// One rung of an ABR ladder: what a stream manager provisioned for `<top guid>_<level>`.
public struct Variant: Sendable, Hashable, Codable {
    /// `<top guid>_<level>`, e.g. `live/stream1_2`.
    public var streamGuid: String
    /// 1 is the top (highest quality); larger numbers are lower rungs.
    public var level: Int
    public var width: Int
    public var height: Int
    /// Declared video bit rate in bit/s.
    public var bitRate: Int
    /// The x264 preset for this rung (`videoParams.preset`); nil lets the node choose.
    public var preset: String?
    /// The H.264 profile for this rung (`videoParams.profile`: baseline, main or high); nil is high.
    public var profile: String?

    public init(streamGuid: String, level: Int, width: Int, height: Int, bitRate: Int, preset: String? = nil, profile: String? = nil) {
        self.streamGuid = streamGuid
        self.level = level
        self.width = width
        self.height = height
        self.bitRate = bitRate
        self.preset = preset
        self.profile = profile
    }

    public var pixelCount: Int { width * height }
}

/// A validated ladder: variants sorted by level, level 1 first.
public struct Ladder: Sendable, Hashable, Codable {
    /// The provision's own guid, e.g. `live/stream1`; variants are `<streamGuid>_<level>`.
    public var streamGuid: String
    public var variants: [Variant]
    /// What the top variant's publisher must authenticate with; nil lets anyone publish it.
    public var publisherCredentials: StreamCredentials?
    /// Whether a viewer needs a signed playback token (the provision's `playback.signed`).
    public var requiresSignedPlayback: Bool
    /// `"playback": {"webrtcSafe": true}`: every rung must be one WebRTC can carry, so a source
    /// with B-frames (or that may have them) is encoded at the top rather than passed through.
    public var webRTCSafe = false
    /// The node group and provision the ladder came from: what its playback tokens are bound to.
    public var scope: ProvisionScope

    public init(streamGuid: String, variants: [Variant], publisherCredentials: StreamCredentials? = nil,
                requiresSignedPlayback: Bool = false, scope: ProvisionScope = ProvisionScope()) {
        self.streamGuid = streamGuid
        self.variants = variants.sorted { $0.level < $1.level }
        self.publisherCredentials = publisherCredentials
        self.requiresSignedPlayback = requiresSignedPlayback
        self.scope = scope
    }

    /// Whether `path` names this ladder or one of its variants.
    public func holds(_ path: String) -> Bool {
        path == streamGuid || variants.contains { $0.streamGuid == path }
    }

    public var top: Variant { variants[0] }

    /// The last path component of the top guid (`stream1` for `live/stream1`): the stem of output file names.
    public var name: String {
        String(streamGuid.split(separator: "/").last ?? Substring(streamGuid))
    }
}

/// Where a provision was made: its node group, and when it was stored (milliseconds since 1970),
/// so that a stream deleted and provisioned again is a new provision to every token.
public struct ProvisionScope: Sendable, Hashable, Codable {
    public var nodeGroup: String
    public var epoch: Int64

    public init(nodeGroup: String = "default", epoch: Int64 = 0) {
        self.nodeGroup = nodeGroup
        self.epoch = epoch
    }
}

/// What a provision may ask of a rung's encoder.
public enum EncoderChoices {
    /// x264's presets, fastest first.
    public static let presets = ["ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow", "placebo"]
    /// H.264 profiles libx264 makes for 8-bit 4:2:0: baseline (no B-frames, CAVLC: old phones and
    /// set-top boxes), main, high.
    public static let profiles = ["baseline", "main", "high"]

    /// The RFC 6381 CODECS string a rung of `profile` is announced with before its encoder has
    /// said (level 4.0; x264 sets constraint_set0 and 1 for baseline, 1 for main).
    public static func announcedCodecs(profile: String?) -> String {
        switch profile {
        case "baseline": "avc1.42c028"
        case "main": "avc1.4d4028"
        default: "avc1.640028"
        }
    }
}
