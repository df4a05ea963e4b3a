/// What a publisher asks for, however its protocol spells it: the stream (`live/stream1_1`, no
/// query), whether it wants to publish, and the credentials it gave.
public struct PublishTarget: Sendable, Equatable {
    public var path: String
    public var isPublish: Bool
    public var username: String?
    public var password: String?

    public init(path: String, isPublish: Bool = true, username: String? = nil, password: String? = nil) {
        self.path = path
        self.isPublish = isPublish
        self.username = username
        self.password = password
    }

    /// Why a stream ID cannot be read.
    public enum Problem: Error, Sendable, Equatable, CustomStringConvertible {
        case empty
        case tooLong(Int)
        case badPath(String)
        case unknownKey(String)
        case malformed(String)

        public var description: String {
            switch self {
            case .empty: "the stream ID is empty; name the stream, e.g. #!::r=live/stream1_1,m=publish"
            case let .tooLong(length): "the stream ID is \(length) bytes, more than SRT's 512"
            case let .badPath(path): "'\(path)' is not a stream name (app/stream, letters, digits, - _ . only)"
            case let .unknownKey(key): "the stream ID has the key '\(key)', which this node does not know"
            case let .malformed(what): "malformed stream ID: \(what)"
            }
        }
    }

    /// An SRT stream ID, in any of the forms encoders send:
    /// - the access-control syntax (SRT's `access_control.md`): `#!::r=live/stream1_1,m=publish,u=user`,
    ///   with the password as `p=` (not a standard key, but what `u=` needs beside it);
    /// - MediaMTX's `publish:live/stream1_1` or `publish:live/stream1_1:user:password`;
    /// - a plain `live/stream1_1`, with `?user=…&password=…` if credentials are needed.
    public init(srtStreamID raw: String) throws(Problem) {
        // A URL-encoded access-control ID (`%23%21%3A%3A…`, as ffmpeg 6 and later decode it but 5.1
        // passes it on): no stream name starts with `%`, so decoding it first is safe.
        let text = raw.hasPrefix("%23") ? Self.percentDecoded(raw) : raw
        let bytes = Array(text.utf8)
        guard !bytes.isEmpty else { throw .empty }
        guard bytes.count <= 512 else { throw .tooLong(bytes.count) }
        if text.hasPrefix("#!::") {
            var path: String?, user: String?, password: String?, mode = "request"
            for item in text.dropFirst(4).split(separator: ",") {
                let pair = item.split(separator: "=", maxSplits: 1).map(String.init)
                guard pair.count == 2 else { throw .malformed("'\(item)' is not key=value") }
                switch pair[0] {
                case "r": path = pair[1]
                case "m": mode = pair[1]
                case "u": user = pair[1]
                case "p", "password": password = pair[1]
                case "s", "t", "h": break  // session id, type (stream), host: nothing to decide on here
                default: throw .unknownKey(pair[0])
                }
            }
            guard let path else { throw .malformed("no resource (r=)") }
            guard ["publish", "request", "bidirectional"].contains(mode) else { throw .malformed("mode m=\(mode)") }
            self.init(path: try Self.checked(path), isPublish: mode == "publish", username: user, password: password)
            return
        }
        for prefix in ["publish:", "read:"] where text.hasPrefix(prefix) {
            let parts = text.dropFirst(prefix.count).split(separator: ":", omittingEmptySubsequences: false).map(String.init)
            guard parts.count == 1 || parts.count == 3 else { throw .malformed("expected \(prefix)path or \(prefix)path:user:password") }
            self.init(path: try Self.checked(parts[0]), isPublish: prefix == "publish:",
                      username: parts.count == 3 ? parts[1] : nil, password: parts.count == 3 ? parts[2] : nil)
            return
        }
        let (path, query) = Self.splitQuery(text)
        let credentials = Self.credentials(query)
        self.init(path: try Self.checked(path), isPublish: true, username: credentials.user, password: credentials.password)
    }

    /// A stream path as the node names streams: segments of letters, digits, `-`, `_` and `.`
    /// (none of them `.` or `..`), joined by `/`.
    static func checked(_ path: String) throws(Problem) -> String {
        let segments = path.split(separator: "/", omittingEmptySubsequences: true)
        let allowed = { (c: Character) in c.isASCII && (c.isLetter || c.isNumber || c == "-" || c == "_" || c == "." || c == "~") }
        guard !segments.isEmpty, segments.count <= 8,
              segments.allSatisfy({ !$0.isEmpty && $0 != "." && $0 != ".." && $0.allSatisfy(allowed) }) else { throw .badPath(path) }
        return segments.joined(separator: "/")
    }

    /// `text` before and after its `?`.
    public static func splitQuery(_ text: String) -> (String, String) {
        guard let mark = text.firstIndex(of: "?") else { return (text, "") }
        return (String(text[..<mark]), String(text[text.index(after: mark)...]))
    }

    /// `user` (or `username`) and `password` (or `pass`) from a URL query, percent-decoded, as
    /// Red5 and Wowza clients put them on a stream name.
    public static func credentials(_ query: String) -> (user: String?, password: String?) {
        var user: String?
        var password: String?
        for pair in query.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1).map(String.init)
            guard parts.count == 2 else { continue }
            let value = percentDecoded(parts[1])
            switch parts[0].lowercased() {
            case "user", "username": user = value
            case "password", "pass": password = value
            default: break
            }
        }
        return (user, password)
    }

    public static func percentDecoded(_ text: String) -> String {
        var bytes: [UInt8] = []
        let input = Array(text.utf8)
        var index = 0
        while index < input.count {
            let byte = input[index]
            if byte == UInt8(ascii: "%"), index + 2 < input.count,
               let value = UInt8(String(decoding: input[index + 1...index + 2], as: UTF8.self), radix: 16) {
                bytes.append(value)
                index += 3
                continue
            }
            bytes.append(byte == UInt8(ascii: "+") ? UInt8(ascii: " ") : byte)
            index += 1
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
