import Digests
import Foundation
import MediaCore

/// Who may watch: for a stream whose provision asks for signed playback, a viewer must bring a
/// `PlaybackToken` at the start of its session (RTSP's DESCRIBE or first SETUP, HLS's
/// multivariant playlist, WHEP's offer); streams that do not ask are open. A token that expires
/// mid-session does not cut the viewer off: the session was checked when it began.
///
/// Keys: one per node group, derived from the node's playback secret, so every node of a group
/// (which share that secret, as they share the JWT secret) mints and accepts the same tokens,
/// and a token of one group opens nothing in another.
public final class PlaybackAuthority: Sendable {
    /// The ladders the node serves, looked up by any of their paths.
    public typealias LadderLookup = @Sendable (String) -> Ladder?

    private let secret: Digest.Key
    private let ladders: LadderLookup

    public init(secret: String, ladders: @escaping LadderLookup) {
        self.secret = Digest.Key(secret.utf8)
        self.ladders = ladders
    }

    /// The key of `nodeGroup`: HMAC-SHA256 of the group's name under the node's secret.
    public func key(nodeGroup: String) -> Digest.Key {
        let derived = Digest.hmac(.sha256, Data("abr-worker playback key v1\n\(nodeGroup)".utf8), key: secret)
        return Digest.Key(derived)
    }

    /// The ladder `path` belongs to (its guid, or one of its variants').
    public func ladder(for path: String) -> Ladder? { ladders(path) }

    /// A token for `path` (a ladder guid opens every rung, a variant guid that rung only), valid
    /// until `expires` (Unix seconds), for `clientAddress` alone when given. Nil when `path` is
    /// no provisioned stream.
    public func mint(path: String, expires: Int64, clientAddress: String? = nil) -> String? {
        guard let ladder = ladders(path) else { return nil }
        let scope = ladder.scope
        return PlaybackToken(path: path, epoch: scope.epoch, expires: expires, clientAddress: clientAddress)
            .signed(with: key(nodeGroup: scope.nodeGroup))
    }

    /// Nil when a viewer at `clientAddress` may start watching `path` with `token`; else why not.
    /// A path no ladder of this node holds is open here (relays, and 404s, are decided elsewhere).
    public func refusal(path: String, token: String?, clientAddress: String, now: Int64 = PlaybackAuthority.now()) -> PlaybackToken.Refusal? {
        guard let ladder = ladders(path), ladder.requiresSignedPlayback else { return nil }
        let paths = path == ladder.streamGuid ? [path] : [path, ladder.streamGuid]
        return PlaybackToken.verify(token, paths: paths, epoch: ladder.scope.epoch, clientAddress: clientAddress, now: now,
                                    key: key(nodeGroup: ladder.scope.nodeGroup))
    }

    public static func now() -> Int64 { Int64(Date().timeIntervalSince1970) }
}
