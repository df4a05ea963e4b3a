import AccessTokens
import Foundation
import Hummingbird
import MediaCore

/// Signed playback over HLS. A player opens a signed ladder with `?token=` on its multivariant
/// playlist; the node answers with a session token of its own carried in every URL it lists, and
/// the variant playlists carry it on into their segments. The session token is bound to the same
/// address as the viewer's (when that was bound) and lasts `sessionLifetime`: a viewer's token
/// that expires mid-session does not stop the playlist refreshes that session makes.
extension HTTPAPI {
    static let hlsSessionLifetime: Int64 = 12 * 3600

    enum HLSAccess {
        /// The ladder is open: serve the file as it is.
        case open
        /// Serve it, with playlists carrying this token into the URLs they list.
        case carry(String)
        case refused(Response)
    }

    /// Whether `request` may have the HLS file at `path` (decoded, after `/hls/`), and what its
    /// playlists must carry.
    static func hlsAccess(_ plane: ControlPlane, path: String, request: Request, context: NodeRequestContext) -> HLSAccess {
        // `<ladder guid>/<file>` or `<ladder guid>/<variant folder>/<file>`: the guid by direct lookup,
        // not a scan of every ladder, since this runs for every segment a player fetches.
        let components = path.split(separator: "/", omittingEmptySubsequences: false)
        let ladder = [1, 2].lazy.compactMap { dropped -> Ladder? in
            guard components.count > dropped else { return nil }
            return plane.node.ladder(components.dropLast(dropped).joined(separator: "/"))
        }.first
        guard let ladder, ladder.requiresSignedPlayback else { return .open }
        let file = path.dropFirst(ladder.streamGuid.count + 1)
        let folder = file.split(separator: "/").first.map(String.init) ?? ""
        // A variant's files: the token may be for that variant or the ladder; the ladder's own files need the ladder's.
        let streamPath = ladder.variants.first { $0.streamGuid.split(separator: "/").last.map(String.init) == folder && file.utf8.contains(UInt8(ascii: "/")) }?.streamGuid
            ?? ladder.streamGuid
        let token = request.uri.queryParameters.get("token")
        let address = context.clientAddress
        if let refusal = plane.playback.refusal(path: streamPath, token: token, clientAddress: address) {
            plane.refusals.log(plane.logger, "playback refused: \(refusal)", kind: "playback \(refusal.status)", metadata: ["stream.guid": "\(streamPath)", "http.address": "\(address)"])
            return .refused(error(refusal.status == 401 ? .unauthorized : .forbidden, refusal.description))
        }
        guard file == Substring(HLSLayout.masterPlaylist), let token else { return .carry(token ?? "") }
        // The session's own token, for every URL the multivariant playlist lists.
        let bound = token.split(separator: ".").dropFirst().first == "a"
        let session = plane.playback.mint(path: ladder.streamGuid, expires: PlaybackAuthority.now() + hlsSessionLifetime,
                                          clientAddress: bound ? address : nil)
        return .carry(session ?? token)
    }
}

extension HTTPAPI {
    static let maximumPlaybackTokenLifetime: Int64 = 30 * 24 * 3600

    struct PlaybackTokenAnswer: Encodable {
        var token: String
        var streamGuid: String
        var expires: Int64
        var clientAddress: String?
        var requiresSignedPlayback: Bool
        var rtsp: String?
        var hls: String
    }

    /// `POST /as/v1/streams/playback-token/{nodeGroup}/{guid}` with an optional body
    /// `{"expiresIn": seconds, "clientAddress": "203.0.113.7"}` (default an hour, at most 30 days;
    /// no address: any viewer may use it). 201 with the token and the URLs it opens.
    static func mintPlaybackToken(_ plane: ControlPlane, group: String, guid: String, body: [UInt8]) async throws -> Response {
        var expiresIn: Int64 = 3600
        var address: String?
        if !body.isEmpty {
            let document: JSONValue
            do { document = try JSONReader.parse(body) } catch { return self.error(.badRequest, "$: not JSON: \(error.description)") }
            guard case .object = document else { return self.error(.badRequest, "$: expected an object with expiresIn and clientAddress") }
            switch document["expiresIn"] {
            case nil, .null?: break
            case let .integer(value)? where (1...maximumPlaybackTokenLifetime).contains(value):
                expiresIn = value
            case let other?:
                return self.error(.badRequest, "$.expiresIn: expected whole seconds from 1 to \(maximumPlaybackTokenLifetime) (got \(other.shortDescription))")
            }
            switch document["clientAddress"] {
            case nil, .null?: break
            case let .string(text)? where IPAddressText.isValid(text): address = text
            case let other?:
                return self.error(.badRequest, "$.clientAddress: expected an IPv4 or IPv6 address (got \(other.shortDescription))")
            }
        }
        guard let ladder = plane.ladder(containing: guid), ladder.scope.nodeGroup == group else {
            return self.error(.notFound, "\(guid) is not provisioned in node group \(group)")
        }
        let expires = PlaybackAuthority.now() + expiresIn
        guard let token = plane.playback.mint(path: guid, expires: expires, clientAddress: address) else {
            return self.error(.notFound, "\(guid) is not provisioned in node group \(group)")
        }
        let layout = HLSLayout(ladderGuid: ladder.streamGuid)
        let variant = ladder.variants.first { $0.streamGuid == guid }
        let hlsPath = variant.map { layout.liveURLPath(layout.variantPlaylist(level: $0.level)) } ?? layout.liveURLPath()
        let rtspPath = variant?.streamGuid ?? ladder.top.streamGuid
        return json(PlaybackTokenAnswer(token: token, streamGuid: guid, expires: expires, clientAddress: address,
                                        requiresSignedPlayback: ladder.requiresSignedPlayback,
                                        rtsp: plane.rtspBaseURL.map { "\($0)/\(rtspPath)?token=\(token)" },
                                        hls: "\(hlsPath)?token=\(token)"), status: .created)
    }
}

/// Address text as a token may be bound to: what the node sees as a peer's IP.
enum IPAddressText {
    static func isValid(_ text: String) -> Bool {
        guard text.utf8.count <= 45 else { return false }
        var v4 = in_addr(), v6 = in6_addr()
        return inet_pton(AF_INET, text, &v4) == 1 || inet_pton(AF_INET6, text, &v6) == 1
    }
}
