import Foundation
import JWTKit

/// Issues and checks the API's bearer tokens: JWT, HS256, with subject, issue and expiry times.
public struct TokenAuthority: Sendable {
    struct Claims: JWTPayload {
        var sub: SubjectClaim
        var iat: IssuedAtClaim
        var exp: ExpirationClaim

        func verify(using algorithm: some JWTAlgorithm) throws {
            try exp.verifyNotExpired()
        }
    }

    public let lifetime: TimeInterval
    private let keys: JWTKeyCollection

    public init(secret: String, lifetime: TimeInterval = 3600) async {
        self.lifetime = lifetime
        keys = JWTKeyCollection()
        await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
    }

    public func issue(subject: String, now: Date = Date()) async throws -> String {
        try await keys.sign(Claims(sub: SubjectClaim(value: subject), iat: IssuedAtClaim(value: now),
                                   exp: ExpirationClaim(value: now.addingTimeInterval(lifetime))))
    }

    /// The token's subject, or why it is refused (malformed, wrongly signed, expired).
    public func verify(_ token: String) async -> Result<String, TokenRefusal> {
        // The key decides the algorithm, not the token: a header that names another (HS384,
        // `none`, RS256) is refused before any signature is looked at.
        guard let algorithm = Self.headerAlgorithm(token) else {
            return .failure(TokenRefusal(reason: "the token is not a valid JWT"))
        }
        guard algorithm == Self.algorithm else {
            return .failure(TokenRefusal(reason: "the token's algorithm \(algorithm.prefix(16)) is not \(Self.algorithm)"))
        }
        do {
            let claims = try await keys.verify(token, as: Claims.self)
            return .success(claims.sub.value)
        } catch let error as JWTError where error.errorType == .claimVerificationFailure {
            return .failure(TokenRefusal(reason: "the token has expired"))
        } catch let error as JWTError where error.errorType == .signatureVerificationFailed {
            return .failure(TokenRefusal(reason: "the token's signature does not match"))
        } catch {
            return .failure(TokenRefusal(reason: "the token is not a valid JWT"))
        }
    }
}

extension TokenAuthority {
    /// The only algorithm the node signs and accepts.
    public static let algorithm = "HS256"

    /// The `alg` of a compact JWS's protected header; nil when the header cannot be read.
    static func headerAlgorithm(_ token: String) -> String? {
        guard token.utf8.count <= 8192, let encoded = token.split(separator: ".", omittingEmptySubsequences: false).first,
              encoded.utf8.count <= 1024 else { return nil }
        var base64 = encoded.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.utf8.count % 4 != 0 { base64 += "=" }
        guard let data = Data(base64Encoded: base64),
              let header = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else { return nil }
        return header["alg"] as? String
    }
}

public struct TokenRefusal: Error, Sendable {
    public var reason: String
}
