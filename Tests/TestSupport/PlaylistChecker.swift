import Foundation

/// A strict reader of the HLS playlists we write, following RFC 8216's grammar rather than our
/// own writer, so a malformed attribute list fails the test.
public struct PlaylistChecker {
    public struct StreamInf: Sendable {
        public var attributes: [String: String]
        public var uri: String
    }

    public struct MediaSegment: Sendable {
        public var duration: Double
        public var uri: String
        /// The EXT-X-MAP in effect for this segment.
        public var map: String?
    }

    public enum Problem: Error, CustomStringConvertible {
        case invalid(String)
        public var description: String { if case let .invalid(text) = self { return text }; return "" }
    }

    /// RFC 8216 §4.2: AttributeName=AttributeValue pairs, comma-separated; quoted strings may hold commas.
    public static func attributes(_ list: Substring) throws -> [String: String] {
        var result: [String: String] = [:]
        var rest = list[...]
        while !rest.isEmpty {
            guard let equals = rest.firstIndex(of: "=") else { throw Problem.invalid("attribute without '=' in \(list)") }
            let name = String(rest[..<equals])
            guard !name.isEmpty, name.allSatisfy({ $0.isUppercase || $0.isNumber || $0 == "-" }) else {
                throw Problem.invalid("bad attribute name '\(name)'")
            }
            guard result[name] == nil else { throw Problem.invalid("duplicate attribute \(name)") }
            rest = rest[rest.index(after: equals)...]
            var value: Substring
            if rest.first == "\"" {
                let afterQuote = rest.index(after: rest.startIndex)
                guard let close = rest[afterQuote...].firstIndex(of: "\"") else { throw Problem.invalid("unterminated quoted string") }
                value = rest[rest.startIndex...close]
                rest = rest[rest.index(after: close)...]
            } else {
                let end = rest.firstIndex(of: ",") ?? rest.endIndex
                value = rest[..<end]
                rest = rest[end...]
                guard !value.isEmpty, !value.contains(" ") else { throw Problem.invalid("bad value for \(name)") }
            }
            result[name] = String(value)
            if rest.first == "," {
                rest = rest.dropFirst()
                guard !rest.isEmpty else { throw Problem.invalid("trailing comma") }
            } else if !rest.isEmpty {
                throw Problem.invalid("junk after \(name)")
            }
        }
        return result
    }

    public static func master(_ text: String) throws -> [StreamInf] {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .init(charactersIn: "\r")) }
        guard lines.first == "#EXTM3U" else { throw Problem.invalid("missing #EXTM3U") }
        var streams: [StreamInf] = []
        var index = 1
        while index < lines.count {
            let line = lines[index]
            if line.hasPrefix("#EXT-X-STREAM-INF:") {
                let attributes = try attributes(line.dropFirst("#EXT-X-STREAM-INF:".count)[...])
                guard let bandwidth = attributes["BANDWIDTH"], Int(bandwidth).map({ $0 > 0 }) == true else {
                    throw Problem.invalid("BANDWIDTH missing or not a positive decimal-integer")
                }
                if let average = attributes["AVERAGE-BANDWIDTH"], Int(average) == nil { throw Problem.invalid("bad AVERAGE-BANDWIDTH") }
                if let resolution = attributes["RESOLUTION"] {
                    let parts = resolution.split(separator: "x")
                    guard parts.count == 2, parts.allSatisfy({ Int($0) != nil }) else { throw Problem.invalid("bad RESOLUTION \(resolution)") }
                }
                if let rate = attributes["FRAME-RATE"], Double(rate) == nil { throw Problem.invalid("bad FRAME-RATE") }
                if let codecs = attributes["CODECS"], !(codecs.hasPrefix("\"") && codecs.hasSuffix("\"")) {
                    throw Problem.invalid("CODECS must be a quoted-string")
                }
                index += 1
                guard index < lines.count, !lines[index].isEmpty, !lines[index].hasPrefix("#") else {
                    throw Problem.invalid("EXT-X-STREAM-INF not followed by a URI")
                }
                streams.append(StreamInf(attributes: attributes, uri: lines[index]))
            } else if !line.isEmpty, !line.hasPrefix("#EXT-X-VERSION:"), line != "#EXT-X-INDEPENDENT-SEGMENTS" {
                throw Problem.invalid("unexpected line in master playlist: \(line)")
            }
            index += 1
        }
        return streams
    }

    public static func media(_ text: String) throws -> (targetDuration: Int, segments: [MediaSegment], ended: Bool, map: String?) {
        let lines = text.split(separator: "\n").map(String.init)
        guard lines.first == "#EXTM3U" else { throw Problem.invalid("missing #EXTM3U") }
        var target: Int?
        var segments: [MediaSegment] = []
        var pendingDuration: Double?
        var ended = false
        var map: String?
        for line in lines.dropFirst() {
            if line.hasPrefix("#EXT-X-TARGETDURATION:") {
                target = Int(line.dropFirst("#EXT-X-TARGETDURATION:".count))
            } else if line.hasPrefix("#EXTINF:") {
                let value = line.dropFirst("#EXTINF:".count).split(separator: ",", omittingEmptySubsequences: false).first ?? ""
                guard let duration = Double(value) else { throw Problem.invalid("bad EXTINF \(line)") }
                pendingDuration = duration
            } else if line.hasPrefix("#EXT-X-MAP:") {
                map = try attributes(line.dropFirst("#EXT-X-MAP:".count)[...])["URI"]?.trimmingCharacters(in: .init(charactersIn: "\""))
            } else if line == "#EXT-X-ENDLIST" {
                ended = true
            } else if !line.hasPrefix("#") {
                guard let duration = pendingDuration else { throw Problem.invalid("URI without EXTINF") }
                segments.append(MediaSegment(duration: duration, uri: line, map: map))
                pendingDuration = nil
            }
        }
        guard let target else { throw Problem.invalid("missing EXT-X-TARGETDURATION") }
        for segment in segments where Int(segment.duration.rounded()) > target {
            throw Problem.invalid("segment \(segment.uri) of \(segment.duration) s exceeds target duration \(target)")
        }
        return (target, segments, ended, map)
    }
}
