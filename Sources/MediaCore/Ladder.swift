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

    public init(streamGuid: String, level: Int, width: Int, height: Int, bitRate: Int) {
        self.streamGuid = streamGuid
        self.level = level
        self.width = width
        self.height = height
        self.bitRate = bitRate
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

    public init(streamGuid: String, variants: [Variant], publisherCredentials: StreamCredentials? = nil) {
        self.streamGuid = streamGuid
        self.variants = variants.sorted { $0.level < $1.level }
        self.publisherCredentials = publisherCredentials
    }

    public var top: Variant { variants[0] }

    /// The last path component of the top guid (`stream1` for `live/stream1`): the stem of output file names.
    public var name: String {
        String(streamGuid.split(separator: "/").last ?? Substring(streamGuid))
    }
}
