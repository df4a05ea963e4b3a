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
        /// Its partial segments (Low-Latency HLS), in order: together they are the segment.
        public var parts: [Part]
        public init(uri: String, duration: Double, discontinuity: Bool = false, mapURI: String? = nil, parts: [Part] = []) {
            self.uri = uri
            self.duration = duration
            self.discontinuity = discontinuity
            self.mapURI = mapURI
            self.parts = parts
        }
    }

    /// A partial segment (`EXT-X-PART`): a few frames of a segment, its own file.
    public struct Part: Sendable, Hashable {
        public var uri: String
        public var duration: Double
        /// It starts with an IDR (only a segment's first part, on the keyframe grid).
        public var independent: Bool
        public init(uri: String, duration: Double, independent: Bool) {
            self.uri = uri
            self.duration = duration
            self.independent = independent
        }
    }

    /// Another rung's latest segment and part (`EXT-X-RENDITION-REPORT`), so a player switching to
    /// it can ask for its next part at once.
    public struct RenditionReport: Sendable, Hashable {
        /// The rung's media playlist, relative to this one (`../stream1_2/index.m3u8`).
        public var uri: String
        public var lastMediaSequence: Int
        public var lastPart: Int
        public init(uri: String, lastMediaSequence: Int, lastPart: Int) {
            self.uri = uri
            self.lastMediaSequence = lastMediaSequence
            self.lastPart = lastPart
        }
    }

    /// What makes a live playlist a Low-Latency one (draft-pantos-hls-rfc8216bis §4.4.3.7–8,
    /// §4.4.4.9, §4.4.5.2–3).
    public struct LowLatency: Sendable, Hashable {
        /// `PART-TARGET`: no part is longer.
        public var partTarget: Double
        /// Parts of the segment still being written, after the last complete one.
        public var openParts: [Part]
        /// The next part's name (`EXT-X-PRELOAD-HINT`), which a player may ask for before it exists.
        public var preloadHint: String?
        public var renditionReports: [RenditionReport]
        /// Parts are listed for the segments ending within this many target durations of the end
        /// (the spec's "three target durations"); older segments are listed whole.
        public static let partsListedForTargetDurations = 3.0
        public init(partTarget: Double, openParts: [Part] = [], preloadHint: String? = nil, renditionReports: [RenditionReport] = []) {
            self.partTarget = partTarget
            self.openParts = openParts
            self.preloadHint = preloadHint
            self.renditionReports = renditionReports
        }

        /// `PART-HOLD-BACK`: three part targets, the spec's least, so players sit as near live as it lets them.
        public var partHoldBack: Double { 3 * partTarget }
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

    /// nil: a plain live or VOD playlist, as RFC 8216 has it.
    public var lowLatency: LowLatency?

    public init(kind: Kind, mapURI: String, segments: [Segment], ended: Bool, minimumTargetDuration: Int = 1, independentSegments: Bool = true,
                lowLatency: LowLatency? = nil) {
        self.lowLatency = lowLatency
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

    /// The target duration this playlist declares.
    public var targetDuration: Int { max(minimumTargetDuration, Self.targetDuration(for: segments.map(\.duration))) }

    /// `CAN-SKIP-UNTIL`: six target durations, the least the spec allows. A delta update
    /// (`render(skippingOlderThanBoundary:)`) leaves out the segments that end before it.
    public var skipBoundary: Double { 6 * Double(targetDuration) }

    /// The last complete segment's media sequence number, and how many parts of the next one exist.
    public var lastMediaSequence: Int {
        guard case let .live(sequence, _) = kind else { return segments.count - 1 }
        return sequence + segments.count - 1
    }

    /// The playlist's text. `skipping`: a delta update (`_HLS_skip=YES`), the segments that end
    /// more than `skipBoundary` before the playlist's end replaced by `EXT-X-SKIP`.
    public func render(skipping: Bool = false) -> String {
        var lines = ["#EXTM3U", "#EXT-X-VERSION:\(skipping && lowLatency != nil ? 9 : 7)"]
        let target = targetDuration
        lines.append("#EXT-X-TARGETDURATION:\(target)")
        if let lowLatency {
            lines.append("#EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,CAN-SKIP-UNTIL=\(Self.decimal(skipBoundary)),PART-HOLD-BACK=\(Self.decimal(lowLatency.partHoldBack))")
            lines.append("#EXT-X-PART-INF:PART-TARGET=\(Self.decimal(lowLatency.partTarget))")
        }
        switch kind {
        case .vod:
            lines.append("#EXT-X-PLAYLIST-TYPE:VOD")
            lines.append("#EXT-X-MEDIA-SEQUENCE:0")
        case let .live(mediaSequence, discontinuitySequence):
            lines.append("#EXT-X-MEDIA-SEQUENCE:\(mediaSequence)")
            if discontinuitySequence > 0 { lines.append("#EXT-X-DISCONTINUITY-SEQUENCE:\(discontinuitySequence)") }
        }
        if independentSegments { lines.append("#EXT-X-INDEPENDENT-SEGMENTS") }
        // Where each segment ends, counted back from the playlist's end (open parts included).
        let openSeconds = lowLatency?.openParts.reduce(0) { $0 + $1.duration } ?? 0
        var endsBeforeEnd: [Double] = Array(repeating: 0, count: segments.count)
        var running = openSeconds
        for index in segments.indices.reversed() {
            endsBeforeEnd[index] = running
            running += segments[index].duration
        }
        var skipped = 0
        if skipping, lowLatency != nil {
            // Whole segments only, and never a discontinuity or a new init segment among them: the
            // player could not know of it from `EXT-X-SKIP`.
            while skipped < segments.count - 1, endsBeforeEnd[skipped] > skipBoundary,
                  !segments[skipped + 1].discontinuity, segments[skipped + 1].mapURI == nil || segments[skipped + 1].mapURI == segments[0].mapURI {
                skipped += 1
            }
            if skipped > 0 { lines.append("#EXT-X-SKIP:SKIPPED-SEGMENTS=\(skipped)") }
        }
        var currentMap = segments.first?.mapURI ?? mapURI
        lines.append("#EXT-X-MAP:URI=\"\(currentMap)\"")
        let partsWithin = LowLatency.partsListedForTargetDurations * Double(target)
        for (index, segment) in segments.enumerated() where index >= skipped {
            if segment.discontinuity { lines.append("#EXT-X-DISCONTINUITY") }
            if let map = segment.mapURI, map != currentMap {
                lines.append("#EXT-X-MAP:URI=\"\(map)\"")
                currentMap = map
            }
            if lowLatency != nil, endsBeforeEnd[index] < partsWithin {
                for part in segment.parts { lines.append(Self.partLine(part)) }
            }
            lines.append("#EXTINF:\(DecimalText.fixed(segment.duration, places: 5)),")
            lines.append(segment.uri)
        }
        if let lowLatency {
            for part in lowLatency.openParts { lines.append(Self.partLine(part)) }
            if let hint = lowLatency.preloadHint, !ended { lines.append("#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"\(hint)\"") }
            for report in lowLatency.renditionReports {
                lines.append("#EXT-X-RENDITION-REPORT:URI=\"\(report.uri)\",LAST-MSN=\(report.lastMediaSequence),LAST-PART=\(report.lastPart)")
            }
        }
        if ended { lines.append("#EXT-X-ENDLIST") }
        return lines.joined(separator: "\n") + "\n"
    }

    /// Forgets the parts of the segments a playlist of `targetDuration` no longer lists them for
    /// (ending `partsListedForTargetDurations` target durations or more before the end, open
    /// parts included). A live writer calls it as its playlist grows: parts left out once stay
    /// out, where a target duration that grew (one segment ran long) would otherwise list the
    /// parts of an older segment again, after players had read past them and the preload hint.
    public static func forgetUnlistedParts<Segments: MutableCollection & BidirectionalCollection>(
        in segments: inout Segments, openSeconds: Double, targetDuration: Int
    ) where Segments.Element == Segment {
        let partsWithin = LowLatency.partsListedForTargetDurations * Double(targetDuration)
        var endsBeforeEnd = openSeconds
        var index = segments.endIndex
        while index != segments.startIndex {
            segments.formIndex(before: &index)
            // Every one, not up to the first without parts: a segment whose parts could not be
            // written has none, and older ones may still have theirs.
            if endsBeforeEnd >= partsWithin, !segments[index].parts.isEmpty { segments[index].parts = [] }
            endsBeforeEnd += segments[index].duration
        }
    }

    private static func partLine(_ part: Part) -> String {
        "#EXT-X-PART:DURATION=\(DecimalText.fixed(part.duration, places: 5)),URI=\"\(part.uri)\"" + (part.independent ? ",INDEPENDENT=YES" : "")
    }

    /// Up to five decimals, no trailing zeros: attribute values players compare.
    static func decimal(_ value: Double) -> String {
        var text = DecimalText.fixed(value, places: 5)
        while text.hasSuffix("0") { text.removeLast() }
        if text.hasSuffix(".") { text.removeLast() }
        return text
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
