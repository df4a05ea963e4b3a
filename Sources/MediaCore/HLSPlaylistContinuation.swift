/// Where a live media playlist left off, so a new job writing into the same folder (after a
/// restart, or a new job for the same provision) carries the numbering on instead of starting
/// again at 0: players and caches never see a media sequence go back or a segment name reused.
public struct HLSPlaylistContinuation: Sendable, Equatable {
    /// The media sequence number the next segment gets: every segment listed has left the window.
    public var mediaSequence = 0
    /// The discontinuity sequence after the listed segments' discontinuities have left too.
    public var discontinuitySequence = 0
    /// The number the next `segment_NNNNN.m4s` takes.
    public var segmentIndex = 0
    /// The number the next `init_N.mp4` takes.
    public var initIndex = 0
    /// Files the old playlist named, which nothing references any more.
    public var staleFiles: [String] = []

    public init() {}

    /// Reads a playlist this writer produced; any line it does not understand is skipped, and
    /// numbers are only trusted within sane bounds, so a damaged file cannot trap or mislead it.
    public init(playlistText text: String) {
        var mediaSequence = 0, discontinuitySequence = 0, segments = 0, discontinuities = 0
        var highestSegment = -1, highestInit = 0
        var files: [String] = []
        for rawLine in text.split(whereSeparator: \.isNewline).prefix(10_000) {
            let line = rawLine.drop { $0 == " " || $0 == "\t" }
            if let value = Self.number(after: "#EXT-X-MEDIA-SEQUENCE:", in: line) {
                mediaSequence = value
            } else if let value = Self.number(after: "#EXT-X-DISCONTINUITY-SEQUENCE:", in: line) {
                discontinuitySequence = value
            } else if line.hasPrefix("#EXT-X-DISCONTINUITY"), !line.hasPrefix("#EXT-X-DISCONTINUITY-") {
                discontinuities += 1
            } else if line.hasPrefix("#EXT-X-MAP:"), let start = line.firstIndex(of: "\""),
                      let end = line[line.index(after: start)...].firstIndex(of: "\"") {
                let name = String(line[line.index(after: start)..<end])
                if let index = HLSLayout.initSegmentIndex(name) { highestInit = max(highestInit, index) }
            } else if line.hasPrefix("#EXT-X-PRELOAD-HINT:"), let range = line.range(of: "URI=\""),
                      let end = line[range.upperBound...].firstIndex(of: "\""),
                      let index = HLSLayout.partialSegmentIndex(String(line[range.upperBound..<end])) {
                // The file on disk follows whole segments: the parts of the segment open at a
                // stop may have been served (and cached) under this segment's number since.
                highestSegment = max(highestSegment, index)
            } else if line.hasPrefix("#EXT-X-PART:"), let range = line.range(of: "URI=\""),
                      let end = line[range.upperBound...].firstIndex(of: "\"") {
                // A Low-Latency playlist's parts are files of their own, stale with their segments.
                let name = String(line[range.upperBound..<end])
                if let index = HLSLayout.partialSegmentIndex(name) {
                    files.append(name)
                    // The open segment's parts name a segment not complete yet: its number is
                    // taken too, so no part name (which a cache may hold) is ever reused.
                    highestSegment = max(highestSegment, index)
                }
            } else if !line.hasPrefix("#"), !line.isEmpty {
                segments += 1
                let name = String(line)
                if let index = HLSLayout.mediaSegmentIndex(name) {
                    highestSegment = max(highestSegment, index)
                    files.append(name)
                }
            }
        }
        self.mediaSequence = mediaSequence + segments
        self.discontinuitySequence = discontinuitySequence + discontinuities
        segmentIndex = highestSegment + 1
        initIndex = highestInit + 1
        staleFiles = files
    }

    /// Of the files in the rung's folder, those the carried-on numbering leaves behind: what the
    /// playlist listed, and every segment, part and init segment numbered below where numbering
    /// resumes, which covers segments kept a while after they left the window (RFC 8216's rule,
    /// `HLSSegmentRetention`) that the playlist no longer names. Other names are left alone.
    public func supersededFiles(among folder: some Sequence<String>) -> [String] {
        let below = folder.filter { name in
            if let index = HLSLayout.mediaSegmentIndex(name) ?? HLSLayout.partialSegmentIndex(name) { return index < segmentIndex }
            if name == HLSLayout.initSegment(0) { return initIndex > 0 }
            return HLSLayout.initSegmentIndex(name).map { $0 < initIndex } ?? false
        }
        return Array(Set(staleFiles + below)).sorted()
    }

    static let maximumNumber = HLSLayout.maximumIndex

    private static func number(after prefix: String, in line: Substring) -> Int? {
        guard line.hasPrefix(prefix), let value = Int(line.dropFirst(prefix.count).prefix(16)), (0...maximumNumber).contains(value) else { return nil }
        return value
    }
}
