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

    public init(root: URL) {
        self.root = root.standardizedFileURL
    }

    /// - Parameter rawPath: the request path after `/hls/`, still percent-encoded.
    public func resolve(rawPath: Substring) -> File? {
        let encoded = rawPath.split(separator: "/", omittingEmptySubsequences: false)
        guard !encoded.isEmpty, encoded.count <= 8 else { return nil }
        var components: [String] = []
        for part in encoded {
            guard let decoded = String(part).removingPercentEncoding, isPlainName(decoded) else { return nil }
            components.append(decoded)
        }
        guard let type = Self.contentTypes[(components.last! as NSString).pathExtension.lowercased()] else { return nil }
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

    private func isPlainName(_ name: String) -> Bool {
        !name.isEmpty && !name.hasPrefix(".") && name.utf8.count <= 255
            && !name.contains("/") && !name.contains("\\") && !name.unicodeScalars.contains { $0.value < 0x20 || $0 == "\u{7f}" }
    }
}
