import ExtrasBase64
import MediaCore

/// RTSP authentication as ffmpeg and GStreamer clients do it (RFC 2326 §D.1, RFC 2617): a 401
/// answer offers Digest and Basic, the client repeats its request with `Authorization`.
///
/// Nonces are stateless: the issue time and a keyed MD5 of it, so any connection (and a
/// publisher resuming on a new one) can answer any nonce the node gave out in the last
/// `nonceLifetime` seconds, and the node keeps no table a client could fill.
public struct RTSPAuthenticator: Sendable {
    public let realm: String
    private let secret: String
    public let nonceLifetime: UInt64

    public init(realm: String = "abr-worker", secret: String, nonceLifetime: UInt64 = 300) {
        self.realm = realm
        self.secret = secret
        self.nonceLifetime = nonceLifetime
    }

    /// A random secret for one process's lifetime.
    public static func randomSecret() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<4).map { _ in String(generator.next() as UInt64, radix: 16) }.joined()
    }

    /// `WWW-Authenticate` values for a 401, strongest first.
    public func challenges(now seconds: UInt64) -> [String] {
        ["Digest realm=\"\(realm)\", nonce=\"\(nonce(issuedAt: seconds))\", algorithm=MD5", "Basic realm=\"\(realm)\""]
    }

    func nonce(issuedAt seconds: UInt64) -> String {
        let stamp = String(seconds, radix: 16)
        return stamp + MD5.hex("\(stamp):\(secret)")
    }

    /// Whether `authorization` (the header's value) proves `credentials` for this request.
    /// - Parameters:
    ///   - method: the request's method, part of the Digest response.
    ///   - requestURI: the request line's URI. A Digest answer must name the same resource in its
    ///     `uri=` (RFC 2617 §3.2.2.5), so an answer computed for one stream opens no other.
    ///   - now: seconds on the same clock as `challenges(now:)`.
    public func verify(_ authorization: String?, method: String, requestURI: String, credentials: StreamCredentials, now: UInt64) -> Bool {
        switch authorization.flatMap(RTSPAuthorization.init(parsing:)) {
        case nil:
            return false
        case let .basic(username, password)?:
            return constantTimeEqual(username, credentials.username) && constantTimeEqual(password, credentials.password)
        case let .digest(fields)?:
            guard let username = fields["username"], let nonce = fields["nonce"], let uri = fields["uri"], let response = fields["response"],
                  fields["realm"] == realm, constantTimeEqual(username, credentials.username), isFresh(nonce, now: now) else { return false }
            if let algorithm = fields["algorithm"], algorithm.uppercased() != "MD5" { return false }
            guard Self.resource(uri) == Self.resource(requestURI) else { return false }
            let ha1 = MD5.hex("\(credentials.username):\(realm):\(credentials.password)")
            let ha2 = MD5.hex("\(method):\(uri)")
            let expected: String
            if let qop = fields["qop"] {
                guard qop == "auth", let count = fields["nc"], let clientNonce = fields["cnonce"] else { return false }
                expected = MD5.hex("\(ha1):\(nonce):\(count):\(clientNonce):\(qop):\(ha2)")
            } else {
                expected = MD5.hex("\(ha1):\(nonce):\(ha2)")
            }
            return constantTimeEqual(response.lowercased(), expected)
        }
    }

    /// A URI without its scheme and authority (`rtsp://host:port/live/a` and `/live/a` name the
    /// same resource; clients write either).
    static func resource(_ uri: String) -> Substring {
        var rest = Substring(uri)
        for scheme in ["rtsp://", "rtsps://", "rtspu://"] where rest.lowercased().hasPrefix(scheme) {
            rest = rest.dropFirst(scheme.count)
            rest = rest[(rest.firstIndex(of: "/") ?? rest.endIndex)...]
        }
        return rest.isEmpty ? "/" : rest
    }

    private func isFresh(_ nonce: String, now: UInt64) -> Bool {
        guard nonce.utf8.count > 32, nonce.utf8.count <= 48 else { return false }
        let stamp = String(nonce.dropLast(32))
        guard let issued = UInt64(stamp, radix: 16), issued <= now, now - issued <= nonceLifetime else { return false }
        return constantTimeEqual(nonce, self.nonce(issuedAt: issued))
    }

    /// Compares without returning early, so response time does not tell how much matched.
}

/// An `Authorization` header's value.
public enum RTSPAuthorization: Sendable, Equatable {
    case basic(username: String, password: String)
    /// Parameters by lowercased name, quotes removed.
    case digest([String: String])

    public init?(parsing header: String) {
        let trimmed = header.trimmed
        guard let space = trimmed.firstIndex(of: " ") else { return nil }
        let scheme = trimmed[..<space].lowercased()
        let rest = trimmed[trimmed.index(after: space)...].trimmed
        switch scheme {
        case "basic":
            guard let decoded = Base64.decodeLenient(rest), let text = String(validating: decoded, as: UTF8.self),
                  let colon = text.firstIndex(of: ":") else { return nil }
            self = .basic(username: String(text[..<colon]), password: String(text[text.index(after: colon)...]))
        case "digest":
            guard let fields = Self.parameters(rest) else { return nil }
            self = .digest(fields)
        default:
            return nil
        }
    }

    /// `name="quoted, value", name=token, ...`; commas inside quotes belong to the value.
    static func parameters(_ text: String) -> [String: String]? {
        var fields: [String: String] = [:]
        var rest = Substring(text)
        while !rest.isEmpty, fields.count < 32 {
            rest = rest.drop { $0 == " " || $0 == "," || $0 == "\t" }
            guard let equals = rest.firstIndex(of: "=") else { break }
            let name = rest[..<equals].trimmed.lowercased()
            rest = rest[rest.index(after: equals)...].drop { $0 == " " }
            var value = ""
            if rest.first == "\"" {
                rest = rest.dropFirst()
                guard let close = rest.firstIndex(of: "\"") else { return nil }
                value = String(rest[..<close])
                rest = rest[rest.index(after: close)...]
            } else {
                let end = rest.firstIndex(of: ",") ?? rest.endIndex
                value = rest[..<end].trimmed
                rest = rest[end...]
            }
            guard !name.isEmpty else { return nil }
            fields[name] = value
        }
        return fields
    }
}
