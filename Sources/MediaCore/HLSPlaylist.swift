import Foundation

/// A media playlist for one variant (RFC 8216 §4.3.3), with fMP4 segments behind an `EXT-X-MAP`.
public struct HLSMediaPlaylist: Sendable, Hashable {
    public struct Segment: Sendable, Hashable {
        public var uri: String
        public var duration: Double
        /// The source changed before this segment (size, codec parameters, timestamps).
        public var discontinuity: Bool
        /// The init segment for this and following segments, when it differs from the playlist's first.
        public var mapURI: String?
        public init(uri: String, duration: Double, discontinuity: Bool = false, mapURI: String? = nil) {
            self.uri = uri
            self.duration = duration
            self.discontinuity = discontinuity
            self.mapURI = mapURI
        }
    }

    public enum Kind: Sendable, Hashable {
        case vod
        /// A sliding window; `mediaSequence` is the sequence number of the first listed segment.
        case live(mediaSequence: Int, discontinuitySequence: Int)
    }

    public var kind: Kind
    public var mapURI: String
    public var segments: [Segment]
    public var ended: Bool
    /// At least this target duration, so a live playlist's target never shrinks.
    public var minimumTargetDuration: Int
    /// Every segment starts with an IDR (`EXT-X-INDEPENDENT-SEGMENTS`); false once a segment had
    /// to be cut between keyframes (a source whose GOP is far longer than the target).
    public var independentSegments: Bool

    public init(kind: Kind, mapURI: String, segments: [Segment], ended: Bool, minimumTargetDuration: Int = 1, independentSegments: Bool = true) {
        self.kind = kind
        self.mapURI = mapURI
        self.segments = segments
        self.ended = ended
        self.minimumTargetDuration = minimumTargetDuration
        self.independentSegments = independentSegments
    }

    /// EXT-X-TARGETDURATION: every EXTINF rounded to the nearest integer must not exceed it;
    /// rounding the longest up satisfies that for every parser.
    public static func targetDuration(for durations: [Double]) -> Int {
        max(1, Int((durations.max() ?? 1).rounded(.up)))
    }

    public func render() -> String {
        var lines = ["#EXTM3U", "#EXT-X-VERSION:7"]
        lines.append("#EXT-X-TARGETDURATION:\(max(minimumTargetDuration, Self.targetDuration(for: segments.map(\.duration))))")
        switch kind {
        case .vod:
            lines.append("#EXT-X-PLAYLIST-TYPE:VOD")
            lines.append("#EXT-X-MEDIA-SEQUENCE:0")
        case let .live(mediaSequence, discontinuitySequence):
            lines.append("#EXT-X-MEDIA-SEQUENCE:\(mediaSequence)")
            if discontinuitySequence > 0 { lines.append("#EXT-X-DISCONTINUITY-SEQUENCE:\(discontinuitySequence)") }
        }
        if independentSegments { lines.append("#EXT-X-INDEPENDENT-SEGMENTS") }
        var currentMap = segments.first?.mapURI ?? mapURI
        lines.append("#EXT-X-MAP:URI=\"\(currentMap)\"")
        for segment in segments {
            if segment.discontinuity { lines.append("#EXT-X-DISCONTINUITY") }
            if let map = segment.mapURI, map != currentMap {
                lines.append("#EXT-X-MAP:URI=\"\(map)\"")
                currentMap = map
            }
            lines.append("#EXTINF:\(String(format: "%.5f", segment.duration)),")
            lines.append(segment.uri)
        }
        if ended { lines.append("#EXT-X-ENDLIST") }
        return lines.joined(separator: "\n") + "\n"
    }
}

/// The master (multivariant) playlist (RFC 8216 §4.3.4), variants in the order given: highest first.
public struct HLSMasterPlaylist: Sendable, Hashable {
    public struct Entry: Sendable, Hashable {
        public var uri: String
        public var bandwidth: Int
        public var averageBandwidth: Int
        public var width: Int
        public var height: Int
        public var frameRate: Double
        public var codecs: String
        public init(uri: String, bandwidth: Int, averageBandwidth: Int, width: Int, height: Int, frameRate: Double, codecs: String) {
            self.uri = uri
            self.bandwidth = bandwidth
            self.averageBandwidth = averageBandwidth
            self.width = width
            self.height = height
            self.frameRate = frameRate
            self.codecs = codecs
        }
    }

    public var entries: [Entry]

    public init(entries: [Entry]) {
        self.entries = entries
    }

    public func render() -> String {
        var lines = ["#EXTM3U", "#EXT-X-VERSION:7", "#EXT-X-INDEPENDENT-SEGMENTS"]
        for entry in entries {
            var attributes = ["BANDWIDTH=\(max(1, entry.bandwidth))"]
            if entry.averageBandwidth > 0 { attributes.append("AVERAGE-BANDWIDTH=\(entry.averageBandwidth)") }
            attributes.append("RESOLUTION=\(entry.width)x\(entry.height)")
            if entry.frameRate > 0 { attributes.append("FRAME-RATE=\(String(format: "%.3f", entry.frameRate))") }
            attributes.append("CODECS=\"\(entry.codecs)\"")
            lines.append("#EXT-X-STREAM-INF:" + attributes.joined(separator: ","))
            lines.append(entry.uri)
        }
        return lines.joined(separator: "\n") + "\n"
    }
}
