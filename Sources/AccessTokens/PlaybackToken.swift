import Digests
import Foundation

/// A signed playback URL's token, as OvenMediaEngine's SignedPolicy, Wowza's SecureToken and
/// nginx's `secure_link` make them: an HMAC-SHA256, under the node group's key, over the stream
/// path, the provision it belongs to, an expiry and optionally the viewer's address.
///
/// Text form: `<expires>.<a|n>.<signature>`: the expiry in Unix seconds, `a` when the token is
/// bound to the address that asked for it (`n` when any address may use it), and the signature
/// in unpadded base64url. The signed message is
/// `abr-playback-v1 \n <path> \n <provision epoch> \n <expires> \n <address or *>`.
/// The epoch is the provision's creation time in milliseconds: a stream deleted and provisioned
/// again refuses every token minted before, and a token for one stream opens no other.
public struct PlaybackToken: Sendable, Equatable {
    public var path: String
    public var epoch: Int64
    public var expires: Int64
    /// The only address that may use it, or nil for any.
    public var clientAddress: String?

    public init(path: String, epoch: Int64, expires: Int64, clientAddress: String? = nil) {
        self.path = path
        self.epoch = epoch
        self.expires = expires
        self.clientAddress = clientAddress
    }

    /// The longest token text taken: anything longer is not one of ours.
    public static let maximumLength = 128

    func message() -> Data {
        Data("abr-playback-v1\n\(path)\n\(epoch)\n\(expires)\n\(clientAddress ?? "*")".utf8)
    }

    /// The token's text, signed with `key`.
    public func signed(with key: Digest.Key) -> String {
        let mac = Digest.hmac(.sha256, message(), key: key)
        return "\(expires).\(clientAddress == nil ? "n" : "a").\(Base64URL.encode(Data(mac)))"
    }

    /// Why a token text does not open `path` for a viewer at `clientAddress` now.
    public enum Refusal: Error, Sendable, Equatable, CustomStringConvertible {
        case missing
        case malformed
        case expired(at: Int64)
        /// Signed with another key, for another stream or provision, another address, or altered.
        case forged

        public var description: String {
            switch self {
            case .missing: "this stream needs a signed playback token (?token=…)"
            case .malformed: "the playback token is not one this node issues"
            case let .expired(at): "the playback token expired at \(at) (Unix time)"
            case .forged: "the playback token does not open this stream (another stream's, another address's, or not signed by this node group)"
            }
        }

        /// 401 when there is nothing to check, 403 when what was sent is refused.
        public var status: Int { self == .missing ? 401 : 403 }
    }

    /// Checks `text` for a viewer at `clientAddress` against each path that would open the
    /// stream (a variant, or the ladder that holds it), every one under `key` and `epoch`.
    public static func verify(_ text: String?, paths: [String], epoch: Int64, clientAddress: String, now: Int64,
                              key: Digest.Key) -> Refusal? {
        guard let text, !text.isEmpty else { return .missing }
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        // The expiry in its one spelling (no sign, no leading zero): a token has one text.
        guard text.utf8.count <= maximumLength, parts.count == 3, let expires = Int64(parts[0]), expires > 0, String(expires) == parts[0],
              parts[1] == "a" || parts[1] == "n", let signature = Base64URL.decode(parts[2], maximumLength: 64), signature.count == 32 else {
            return .malformed
        }
        let address = parts[1] == "a" ? clientAddress : nil
        let matches = paths.contains { path in
            let token = PlaybackToken(path: path, epoch: epoch, expires: expires, clientAddress: address)
            return Digest.isValidHMAC(signature, .sha256, authenticating: token.message(), key: key)
        }
        guard matches else { return .forged }
        // Expiry after the signature: an expired forgery says forged, not expired.
        guard expires > now else { return .expired(at: expires) }
        return nil
    }
}
