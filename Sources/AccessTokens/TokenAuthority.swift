import Digests
import Foundation

/// Issues and checks the API's bearer tokens: compact JWS (RFC 7515) JWTs (RFC 7519), HS256 only,
/// with subject, issue and expiry times.
///
/// Written on OpenSSL's HMAC (Digests) rather than through jwt-kit: the node signs and accepts one
/// algorithm with one key, which is a few lines, while jwt-kit's X.509 and ASN.1 stack was some
/// 200 Swift files of every fresh build. What a JWT library would otherwise do for us is done here
/// on purpose: the algorithm comes from the key, not from the token; the signature is compared in
/// constant time before any claim is read; and every part is bounded before it is decoded.
public struct TokenAuthority: Sendable {
    public let lifetime: TimeInterval
    private let key: Digest.Key

    public init(secret: String, lifetime: TimeInterval = 3600) {
        self.lifetime = lifetime
        key = Digest.Key(secret.utf8)
    }

    public func issue(subject: String, now: Date = Date()) throws -> String {
        let issuedAt = Int(now.timeIntervalSince1970.rounded(.down))
        let claims: [String: Any] = ["sub": subject, "iat": issuedAt, "exp": issuedAt + Int(lifetime.rounded(.down))]
        let payload = try JSONSerialization.data(withJSONObject: claims, options: [.sortedKeys])
        let signingInput = Base64URL.encode(Self.header) + "." + Base64URL.encode(payload)
        return signingInput + "." + Base64URL.encode(Data(Digest.hmac(.sha256, Data(signingInput.utf8), key: key)))
    }

    /// The token's subject, or why it is refused (malformed, wrongly signed, expired).
    public func verify(_ token: String, now: Date = Date()) -> Result<String, TokenRefusal> {
        let malformed = TokenRefusal(reason: "the token is not a valid JWT")
        guard token.utf8.count <= Self.maximumTokenBytes else { return .failure(malformed) }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0].utf8.count <= Self.maximumHeaderBytes,
              let header = Self.jsonObject(base64URL: parts[0]) else { return .failure(malformed) }
        // The key decides the algorithm, not the token: a header that names another (HS384,
        // `none`, RS256) is refused before any signature is looked at.
        guard let algorithm = header["alg"] as? String else { return .failure(malformed) }
        guard algorithm == Self.algorithm else {
            return .failure(TokenRefusal(reason: "the token's algorithm \(algorithm.prefix(16)) is not \(Self.algorithm)"))
        }
        // RFC 7515 §4.1.11: a header parameter the verifier must understand, and this one knows none.
        guard header["crit"] == nil else { return .failure(malformed) }
        guard let signature = Base64URL.decode(parts[2]) else { return .failure(malformed) }
        let signingInput = Data(token.utf8.prefix(parts[0].utf8.count + 1 + parts[1].utf8.count))
        guard Digest.isValidHMAC(signature, .sha256, authenticating: signingInput, key: key) else {
            return .failure(TokenRefusal(reason: "the token's signature does not match"))
        }
        guard let payload = Base64URL.decode(parts[1]), let claims = try? JSONDecoder().decode(Claims.self, from: payload),
              claims.exp.isFinite else { return .failure(malformed) }
        guard now.timeIntervalSince1970 < claims.exp else { return .failure(TokenRefusal(reason: "the token has expired")) }
        return .success(claims.sub)
    }
}

extension TokenAuthority {
    /// The only algorithm the node signs and accepts.
    public static let algorithm = "HS256"
    static let maximumTokenBytes = 8192
    static let maximumHeaderBytes = 1024
    static let header = Data(#"{"alg":"HS256","typ":"JWT"}"#.utf8)

    static func jsonObject(base64URL text: Substring) -> [String: Any]? {
        guard let data = Base64URL.decode(text) else { return nil }
        return (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
    }

    /// The claims the node reads. NumericDates are JSON numbers (RFC 7519 §2): a string or a Boolean there fails to decode.
    struct Claims: Decodable {
        var sub: String
        var exp: TimeInterval
        var iat: TimeInterval?
    }
}

public struct TokenRefusal: Error, Sendable, Equatable {
    public var reason: String
}
