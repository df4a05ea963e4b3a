/// Paths and track controls in RTSP request URIs, as real clients write them.
enum RTSPURL {
    /// `rtsp://host:port/live/a_1/trackID=0?x` → `live/a_1/trackID=0`; a bare `/live/a_1` works too.
    static func path(of uri: String) -> String? {
        var rest = Substring(uri)
        if let scheme = rest.range(of: "://") {
            rest = rest[scheme.upperBound...]
            guard let slash = rest.firstIndex(of: "/") else { return "" }
            rest = rest[slash...]
        } else if uri == "*" {
            return ""
        } else {
            guard rest.hasPrefix("/") else { return nil }
        }
        if let query = rest.firstIndex(where: { $0 == "?" || $0 == "#" }) { rest = rest[..<query] }
        let segments = rest.split(separator: "/").filter { !$0.isEmpty }
        guard !segments.contains(where: { $0 == ".." || $0 == "." }) else { return nil }
        return segments.joined(separator: "/")
    }

    /// Whether the URI's query pins the player to the rung it names (`?abr=off` or `?abr=0`).
    static func pinsRung(_ uri: String) -> Bool {
        guard let query = uri.firstIndex(of: "?") else { return false }
        return uri[uri.index(after: query)...].split(separator: "&").contains { parameter in
            let pair = parameter.split(separator: "=", maxSplits: 1).map { $0.lowercased() }
            return pair.first == "abr" && (pair.count > 1 && ["off", "0", "false", "no"].contains(pair[1].prefix { $0 != "/" }))
        }
    }

    /// The value of query parameter `name` (`?token=…&abr=off`), up to the next `&`, `/` or `#`
    /// (clients append track controls after the query); nil when absent.
    static func queryValue(_ uri: String, name: String) -> String? {
        guard let query = uri.firstIndex(of: "?") else { return nil }
        for parameter in uri[uri.index(after: query)...].split(separator: "&") {
            let pair = parameter.split(separator: "=", maxSplits: 1)
            guard pair.count == 2, pair[0] == name else { continue }
            return String(pair[1].prefix { $0 != "/" && $0 != "#" })
        }
        return nil
    }

    /// `scheme://host:port/<path>` from a request URI, for Content-Base and RTP-Info.
    static func base(of uri: String, path: String) -> String {
        guard let scheme = uri.range(of: "://") else { return "/" + path }
        let afterScheme = uri[scheme.upperBound...]
        let authority = afterScheme.prefix { $0 != "/" }
        return uri[..<scheme.upperBound] + authority + "/" + path
    }

    /// Drops a trailing track control (`trackID=0`, `streamid=1`, `stream=0`) from a path.
    static func stripControl(_ path: String) -> String {
        guard let slash = path.lastIndex(of: "/"), path[path.index(after: slash)...].contains("=") else { return path }
        return String(path[..<slash])
    }

    /// Which track a SETUP names: by its control (relative or absolute), by `name=N`, or the
    /// only track when the URL is the stream itself.
    static func trackIndex(requestURI: String, urlPath: String, sessionPath: String, controls: [String?]) -> Int? {
        let suffix = urlPath == sessionPath ? "" : String(urlPath.dropFirst(sessionPath.count + 1))
        for (index, control) in controls.enumerated() {
            guard let control else { continue }
            if control == requestURI || control == suffix { return index }
            if control.contains("://"), let controlPath = path(of: control), controlPath == urlPath { return index }
        }
        if suffix.isEmpty { return controls.count == 1 ? 0 : nil }
        if let equals = suffix.lastIndex(of: "="), let number = Int(suffix[suffix.index(after: equals)...]),
           number >= 0, number < controls.count {
            return number
        }
        return nil
    }
}
