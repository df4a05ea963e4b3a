/// Carries a playback token into the URLs an HLS playlist lists: each URI line (variant
/// playlists, segments) and each `URI="…"` attribute (`EXT-X-MAP`, `EXT-X-MEDIA`, part and
/// preload hints), so a player that got the multivariant playlist with a token asks for
/// everything else with it, without knowing it does.
public enum PlaylistTokens {
    public static func carrying(_ token: String, in playlist: String) -> String {
        var lines: [Substring] = []
        for line in playlist.split(separator: "\n", omittingEmptySubsequences: false) {
            let trimmed = line.hasSuffix("\r") ? line.dropLast() : line
            if trimmed.isEmpty {
                lines.append(line)
            } else if trimmed.hasPrefix("#") {
                lines.append(Substring(attributes(of: String(line), carrying: token)))
            } else {
                lines.append(Substring(appending(token, to: String(trimmed)) + (line.hasSuffix("\r") ? "\r" : "")))
            }
        }
        return lines.joined(separator: "\n")
    }

    static func appending(_ token: String, to uri: String) -> String {
        uri + (uri.contains("?") ? "&" : "?") + "token=" + token
    }

    static func attributes(of line: String, carrying token: String) -> String {
        var result = ""
        var rest = Substring(line)
        while let start = rest.range(of: "URI=\"") {
            result += rest[..<start.upperBound]
            rest = rest[start.upperBound...]
            guard let end = rest.firstIndex(of: "\"") else { break }
            result += appending(token, to: String(rest[..<end]))
            rest = rest[end...]
        }
        return result + rest
    }
}
