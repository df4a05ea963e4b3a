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

public struct TokenRefusal: Error, Sendable {
    public var reason: String
}
