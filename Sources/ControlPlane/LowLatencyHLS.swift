import AccessTokens
import Foundation
import Hummingbird
import MediaCore
import Transcoder

/// Low-Latency HLS requests: a rung's playlist served from `LivePlaylists` (fresher than its file,
/// and rendered once for every player), blocking reloads (`_HLS_msn`, `_HLS_part`), delta updates
/// (`_HLS_skip`), and the hinted next part held until it is written. A waiting request holds a
/// connection and a suspended task, never a thread.
extension HTTPAPI {
    private static let playlistContentType = HLSFiles.contentTypes["m3u8"]!

    /// The answer, or nil when the request is an ordinary one (a file as it is on disk).
    static func lowLatencyHLS(_ plane: ControlPlane, rawPath: Substring, request: Request, access: HLSAccess) async -> Response? {
        let name = rawPath.split(separator: "/").last.map(String.init) ?? ""
        if name == HLSLayout.mediaPlaylist {
            // A live rung's playlist is in memory under its path; nothing on disk needs looking at.
            guard let key = plane.hlsFiles.livePath(rawPath: rawPath), let latest = plane.livePlaylists.snapshot(key),
                  let lowLatency = latest.playlist.lowLatency else { return nil }
            let query = request.uri.queryParameters
            let directives: HLSDeliveryDirectives
            do {
                directives = try HLSDeliveryDirectives(msn: query.get("_HLS_msn"), part: query.get("_HLS_part"), skip: query.get("_HLS_skip"))
            } catch {
                return self.error(.badRequest, "\(rawPath): \(error.description)")
            }
            if let problem = directives.tooFarAhead(of: latest.position) { return self.error(.badRequest, "\(rawPath): \(problem)") }
            // The spec's limit: a request not answered within three target durations gets 503.
            let limit = Duration.milliseconds(Int64(3000 * latest.playlist.targetDuration))
            guard let snapshot = await plane.livePlaylists.wait(path: key, timeout: limit, until: { directives.isSatisfied(by: $0) }) else {
                return self.error(.serviceUnavailable, "\(rawPath): the part asked for did not appear within three target durations")
            }
            var text = directives.skip ? snapshot.delta : snapshot.full
            if case let .carry(token) = access, !token.isEmpty { text = PlaylistTokens.carrying(token, in: text) }
            // A blocking request's URL names a state of the playlist, and any later one answers it:
            // a CDN may keep the answer (one origin request for all its players). A plain reload
            // must come back here.
            let caching = directives.blocks ? "public, max-age=\(max(1, Int(6 * lowLatency.partTarget)))" : "no-cache"
            return Response(status: .ok, headers: [.contentType: playlistContentType, .cacheControl: caching], body: .init(byteBuffer: ByteBuffer(string: text)))
        }
        // The hinted part, asked for before it is written: held until it is. Any other part is a file.
        guard HLSLayout.isPartialSegment(name),
              let key = plane.hlsFiles.livePath(rawPath: rawPath.dropLast(name.utf8.count) + HLSLayout.mediaPlaylist),
              let latest = plane.livePlaylists.snapshot(key), latest.playlist.lowLatency?.preloadHint == name,
              plane.hlsFiles.resolve(rawPath: rawPath) == nil else { return nil }
        let limit = Duration.milliseconds(Int64(3000 * latest.playlist.targetDuration))
        guard await plane.livePlaylists.wait(path: key, timeout: limit, until: { $0.partNames.contains(name) }) != nil,
              let file = plane.hlsFiles.resolve(rawPath: rawPath), let data = try? Data(contentsOf: file.url) else {
            return self.error(.notFound, "\(rawPath): the hinted part was not written within three target durations")
        }
        return Response(status: .ok, headers: [.contentType: file.contentType, .cacheControl: file.cacheControl], body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}
