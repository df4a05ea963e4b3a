import DequeModule

/// When a live rung's files may go. RFC 8216 (6.2.2): a segment removed from the playlist stays
/// available for its own duration plus the duration of the playlist that listed it, since a
/// player that read an older playlist, or fell behind, still asks for it. A 404 there makes
/// players skip or stall, and GStreamer 1.22's hlsdemux2 abort.
///
/// The time since a segment left is counted in the durations of the segments that left after
/// it (one leaves as each new one is listed), so the rule needs no clock.
public struct HLSSegmentRetention: Sendable {
    /// Segments that left the playlist and are still on disk, oldest first.
    public private(set) var retired = Deque<HLSMediaPlaylist.Segment>()

    public init() {}

    /// `removed` left the playlist, which now lists `listed` with `currentMap` as the init segment
    /// being written: returns the files to delete now (segments, and init segments nothing kept needs).
    public mutating func retire(_ removed: [HLSMediaPlaylist.Segment], listed: some Collection<HLSMediaPlaylist.Segment>,
                                currentMap: String) -> [String] {
        retired.append(contentsOf: removed)
        let playlistDuration = listed.reduce(0) { $0 + $1.duration }
        var leftSince = retired.dropFirst().reduce(0) { $0 + $1.duration }
        var expired: [HLSMediaPlaylist.Segment] = []
        while let oldest = retired.first, leftSince >= oldest.duration + playlistDuration {
            expired.append(retired.removeFirst())
            if let next = retired.first { leftSince -= next.duration }
        }
        var files = expired.map(\.uri)
        let mapsInUse = Set((listed.map(\.mapURI) + retired.map(\.mapURI)).compactMap { $0 } + [currentMap])
        for map in Set(expired.compactMap(\.mapURI)) where !mapsInUse.contains(map) {
            files.append(map)
        }
        return files
    }
}
