/// A Low-Latency HLS request's delivery directives (draft-pantos-hls-rfc8216bis §6.2.5):
/// `_HLS_msn` and `_HLS_part` (block until that segment or part exists), `_HLS_skip` (a delta
/// update). Pure: parsed from the query's values, judged against the playlist's latest part.
public struct HLSDeliveryDirectives: Sendable, Equatable {
    public var mediaSequence: Int?
    public var part: Int?
    public var skip: Bool

    /// How far past the latest part a request may ask (the spec's Advance Part Limit, and two segments).
    public static let advancePartLimit = 3
    public static let advanceSegmentLimit = 2

    public init(mediaSequence: Int? = nil, part: Int? = nil, skip: Bool = false) {
        self.mediaSequence = mediaSequence
        self.part = part
        self.skip = skip
    }

    /// From the query's values (nil: absent). Throws a sentence naming the parameter that is wrong.
    public init(msn: String?, part: String?, skip: String?) throws(HLSDirectiveProblem) {
        func number(_ text: String?, _ name: String) throws(HLSDirectiveProblem) -> Int? {
            guard let text else { return nil }
            guard text.utf8.count <= 12, !text.isEmpty, text.utf8.allSatisfy({ (48...57).contains($0) }), let value = Int(text) else {
                throw HLSDirectiveProblem("\(name): expected a whole number from 0 (got \"\(text.prefix(20))\")")
            }
            return value
        }
        mediaSequence = try number(msn, "_HLS_msn")
        self.part = try number(part, "_HLS_part")
        if self.part != nil, mediaSequence == nil { throw HLSDirectiveProblem("_HLS_part needs _HLS_msn") }
        switch skip {
        case nil: self.skip = false
        case "YES"?, "v2"?: self.skip = true
        case let other?: throw HLSDirectiveProblem("_HLS_skip: expected YES or v2 (got \"\(other.prefix(20))\")")
        }
    }

    /// Whether the request blocks at all.
    public var blocks: Bool { mediaSequence != nil }

    /// Why a request asks too far ahead of the playlist's latest part `latest` (nil: it may wait).
    public func tooFarAhead(of latest: LivePlaylists.Position) -> String? {
        guard let sequence = mediaSequence else { return nil }
        if sequence > latest.mediaSequence + Self.advanceSegmentLimit {
            return "_HLS_msn=\(sequence) is more than \(Self.advanceSegmentLimit) segments past the playlist's last (\(latest.mediaSequence))"
        }
        if let part, sequence == latest.mediaSequence, part > latest.part + Self.advancePartLimit {
            return "_HLS_part=\(part) is more than \(Self.advancePartLimit) parts past the playlist's last (\(latest.part))"
        }
        return nil
    }

    /// Whether `snapshot` answers the request: it holds the part asked for (a part index past a
    /// segment's last is the next segment's first, as the spec says), or the whole segment.
    public func isSatisfied(by snapshot: LivePlaylists.Snapshot) -> Bool {
        guard let sequence = mediaSequence else { return true }
        if let part { return snapshot.position >= LivePlaylists.Position(mediaSequence: sequence, part: part) }
        return snapshot.playlist.lastMediaSequence >= sequence
    }
}

/// What is wrong with a request's delivery directives.
public struct HLSDirectiveProblem: Error, Sendable, Equatable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
