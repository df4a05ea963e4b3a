import Foundation

/// Every HLS name the node writes, serves and reads back, in one place: a ladder's folder holds
/// `master.m3u8`, `abr.json` and a folder per variant (`stream1_2/`) with `index.m3u8`, init
/// segments (`init.mp4`, then `init_1.mp4`, … after a format change or a restart) and media
/// segments (`segment_00042.m4s`). Live ladders live under `DATA_DIR/hls/<ladder guid>/` and are
/// served at `/hls/<ladder guid>/…`; offline ones under `OUTPUT/hls/`.
public struct HLSLayout: Sendable, Equatable {
    public static let masterPlaylist = "master.m3u8"
    public static let hintsFile = "abr.json"
    public static let mediaPlaylist = "index.m3u8"
    /// The folder under a node's data directory, and the URL prefix, of live HLS.
    public static let liveRoot = "hls"

    /// The ladder's guid (`live/stream1`).
    public let ladderGuid: String

    public init(ladderGuid: String) {
        self.ladderGuid = ladderGuid
    }

    /// The last path component of the guid (`stream1`): the stem of variant folders.
    public var name: String { String(ladderGuid.split(separator: "/").last ?? Substring(ladderGuid)) }

    /// `stream1_2`: a variant's folder, relative to the ladder's.
    public func variantFolder(level: Int) -> String { "\(name)_\(level)" }

    /// `stream1_2/index.m3u8`: a variant's media playlist, relative to the master playlist.
    public func variantPlaylist(level: Int) -> String { "\(variantFolder(level: level))/\(Self.mediaPlaylist)" }

    /// `DATA_DIR/hls/live/stream1`: where a live ladder's files go.
    public func liveDirectory(dataDirectory: URL) -> URL {
        dataDirectory.appendingPathComponent(Self.liveRoot).appendingPathComponent(ladderGuid)
    }

    /// `/hls/live/stream1/master.m3u8` (or any other file of the ladder): where the node serves it.
    public func liveURLPath(_ relative: String = HLSLayout.masterPlaylist) -> String { "/\(Self.liveRoot)/\(ladderGuid)/\(relative)" }

    // MARK: Segment names

    /// The init segment a variant's playlist maps: `init.mp4` first, `init_N.mp4` after.
    public static func initSegment(_ index: Int) -> String { index == 0 ? "init.mp4" : "init_\(index).mp4" }

    public static func mediaSegment(_ index: Int) -> String { "segment_" + DecimalText.padded(index, width: 5) + ".m4s" }

    /// A Low-Latency HLS part of segment `index`: `part_00042_3.m4s`.
    public static func partialSegment(_ index: Int, part: Int) -> String { "part_" + DecimalText.padded(index, width: 5) + "_\(part).m4s" }

    /// Whether `name` is a part's file (`part_00042_3.m4s`), which a request may ask for before it exists.
    public static func isPartialSegment(_ name: String) -> Bool { partialSegmentIndex(name) != nil }

    /// `part_00042_3.m4s` → 42, the segment it belongs to; nil for any other name.
    public static func partialSegmentIndex(_ name: String) -> Int? {
        guard name.hasPrefix("part_"), name.hasSuffix(".m4s"), name.utf8.count <= 40 else { return nil }
        let middle = name.dropFirst(5).dropLast(4).split(separator: "_", omittingEmptySubsequences: false)
        guard middle.count == 2, middle.allSatisfy({ !$0.isEmpty && $0.count <= 12 && $0.allSatisfy { $0.isASCII && $0.isNumber } }),
              let index = Int(middle[0]), index <= maximumIndex else { return nil }
        return index
    }

    /// `init_3.mp4` → 3; nil for any other name (`init.mp4` is 0 but needs no continuation).
    public static func initSegmentIndex(_ name: String) -> Int? { index(of: name, prefix: "init_", suffix: ".mp4") }

    /// `segment_00042.m4s` → 42; nil for any other name (which is then left alone).
    public static func mediaSegmentIndex(_ name: String) -> Int? { index(of: name, prefix: "segment_", suffix: ".m4s") }

    /// Numbers are only trusted within sane bounds, so a damaged playlist cannot trap or mislead.
    public static let maximumIndex = 1 << 40

    private static func index(of name: String, prefix: String, suffix: String) -> Int? {
        guard name.hasPrefix(prefix), name.hasSuffix(suffix), name.count <= prefix.count + suffix.count + 12 else { return nil }
        let digits = name.dropFirst(prefix.count).dropLast(suffix.count)
        guard !digits.isEmpty, digits.allSatisfy({ $0.isASCII && $0.isNumber }), let value = Int(digits), value <= maximumIndex else { return nil }
        return value
    }
}
