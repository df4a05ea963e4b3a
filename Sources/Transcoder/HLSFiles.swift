import Foundation

/// Maps `/hls/...` request paths to files under `DATA_DIR/hls`, and nothing else: no `..`, no
/// encoded slashes or backslashes, no hidden files, no symbolic links anywhere on the way, only
/// the file kinds HLS serves.
public struct HLSFiles: Sendable {
    public struct File: Sendable, Equatable {
        public var url: URL
        public var contentType: String
        /// Playlists change every segment; segments never change once written.
        public var cacheControl: String
    }

    public static let contentTypes: [String: String] = [
        "m3u8": "application/vnd.apple.mpegurl",
        "m4s": "video/iso.segment",
        "mp4": "video/mp4",
        "m4a": "audio/mp4",
        "ts": "video/mp2t",
        "aac": "audio/aac",
        "vtt": "text/vtt",
        "json": "application/json",
    ]

    public let root: URL

    /// `root`'s path without a trailing slash, computed once.
    private let rootPath: String

    public init(root: URL) {
        self.root = root.standardizedFileURL
        let path = self.root.path
        rootPath = path.hasSuffix("/") ? String(path.dropLast()) : path
    }

    /// - Parameter rawPath: the request path after `/hls/`, still percent-encoded.
    public func resolve(rawPath: Substring) -> File? {
        guard let components = components(rawPath: rawPath),
              let type = Self.contentTypes[(components.last! as NSString).pathExtension.lowercased()] else { return nil }
        var url = root
        var status = stat()
        guard lstat(url.path, &status) == 0, status.st_mode & S_IFMT == S_IFDIR else { return nil }
        for (index, component) in components.enumerated() {
            url.appendPathComponent(component)
            guard lstat(url.path, &status) == 0 else { return nil }
            let kind = status.st_mode & S_IFMT
            let isLast = index == components.count - 1
            guard isLast ? kind == S_IFREG : kind == S_IFDIR else { return nil }
        }
        return File(url: url, contentType: type,
                    cacheControl: type == Self.contentTypes["m3u8"] || type == Self.contentTypes["json"] ? "no-cache" : "max-age=3600")
    }

    /// The absolute path a request names, decoded and checked as `resolve` does, without looking
    /// at the file system: the same string as `resolve(rawPath:)?.url.standardizedFileURL.path`
    /// when that file exists. Only for finding what the node itself published under that path
    /// (a live playlist, held in memory); a file to open goes through `resolve`. Blocking
    /// playlist reloads arrive by the hundred a second, and `resolve`'s walk, one `lstat` per
    /// folder, was most of their cost.
    public func livePath(rawPath: Substring) -> String? {
        guard let components = components(rawPath: rawPath) else { return nil }
        return rootPath + "/" + components.joined(separator: "/")
    }

    /// The path's names, percent-decoded, or nil if any is not a plain file or folder name.
    private func components(rawPath: Substring) -> [String]? {
        let encoded = rawPath.split(separator: "/", omittingEmptySubsequences: false)
        guard !encoded.isEmpty, encoded.count <= 8 else { return nil }
        var components: [String] = []
        for part in encoded {
            // Most names have nothing encoded, and Foundation's decoding is the slow part of this.
            guard let decoded = part.utf8.contains(UInt8(ascii: "%")) ? String(part).removingPercentEncoding : String(part),
                  isPlainName(decoded) else { return nil }
            components.append(decoded)
        }
        return components
    }

    private func isPlainName(_ name: String) -> Bool {
        // Byte by byte: `String.contains(String)` is Foundation's search, and this runs per request.
        !name.isEmpty && !name.hasPrefix(".") && name.utf8.count <= 255
            && !name.utf8.contains { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "\\") || $0 < 0x20 || $0 == 0x7f }
    }
}
