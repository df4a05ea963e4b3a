@testable import AccessTokens
import Digests
import Foundation
import Testing

/// The API's bearer tokens, without a server: what the node issues is a standard HS256 JWT that an
/// independent verifier accepts, and what it accepts is held to one algorithm, one key and the expiry.
@Suite struct TokenAuthorityTests {
    static let secret = "0123456789abcdef0123456789abcdef-token-tests"

    @Test func anIssuedTokenIsAStandardHS256JWT() throws {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let token = try TokenAuthority(secret: Self.secret, lifetime: 3600).issue(subject: "admin", now: now)
        let parts = token.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        try #require(parts.count == 3)
        func decoded(_ text: String) throws -> [String: Any] {
            var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
            #expect(!text.contains("="), "base64url without padding")
            while base64.count % 4 != 0 { base64 += "=" }
            let data = try #require(Data(base64Encoded: base64))
            return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        }
        #expect(try decoded(parts[0])["alg"] as? String == "HS256")
        let claims = try decoded(parts[1])
        #expect(claims["sub"] as? String == "admin")
        #expect((claims["iat"] as? NSNumber)?.intValue == 1_800_000_000)
        #expect((claims["exp"] as? NSNumber)?.intValue == 1_800_003_600)
        // The signature, recomputed apart from TokenAuthority over the first two parts as sent.
        let expected = Digest.hmac(.sha256, Data((parts[0] + "." + parts[1]).utf8), key: Digest.Key(Self.secret.utf8))
        #expect(Base64URL.encode(Data(expected)) == parts[2])
    }

    @Test func itsOwnTokenVerifiesUntilItExpires() throws {
        let authority = TokenAuthority(secret: Self.secret, lifetime: 60)
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let token = try authority.issue(subject: "operator", now: now)
        #expect(try authority.verify(token, now: now.addingTimeInterval(59)).get() == "operator")
        #expect(refusal(authority.verify(token, now: now.addingTimeInterval(60))) == "the token has expired")
        #expect(refusal(TokenAuthority(secret: Self.secret + "x").verify(token, now: now)) == "the token's signature does not match")
    }

    @Test func everyMalformedPartIsRefusedWithAReason() throws {
        let authority = TokenAuthority(secret: Self.secret)
        let good = try authority.issue(subject: "admin")
        let parts = good.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        let cases: [(String, String)] = [
            ("", "not a valid JWT"), ("a.b", "not a valid JWT"), (good + ".x", "not a valid JWT"),
            ("%%%." + parts[1] + "." + parts[2], "not a valid JWT"),
            (parts[0] + "." + parts[1] + ".a+b/", "not a valid JWT"),
            (parts[0] + "." + parts[1] + "." + parts[2] + "=", "not a valid JWT"),
            (String(repeating: "A", count: 9000), "not a valid JWT"),
            (Base64URL.encode(Data(#"{"alg":"HS512"}"#.utf8)) + "." + parts[1] + "." + parts[2], "algorithm HS512 is not HS256"),
            (Base64URL.encode(Data(#"{"typ":"JWT"}"#.utf8)) + "." + parts[1] + "." + parts[2], "not a valid JWT"),
            (parts[0] + "." + Base64URL.encode(Data(#"{"sub":"root","exp":4102444800}"#.utf8)) + "." + parts[2], "signature does not match"),
        ]
        for (token, reason) in cases {
            #expect(refusal(authority.verify(token))?.contains(reason) == true, "\(token.prefix(80)): \(String(describing: refusal(authority.verify(token))))")
        }
        // Signed with the right key, but the claims are not what a token must carry.
        for claims in [#"{"sub":"admin","exp":true}"#, #"{"sub":7,"exp":4102444800}"#, #"{"exp":4102444800}"#, #"[1,2]"#, "not json"] {
            let input = parts[0] + "." + Base64URL.encode(Data(claims.utf8))
            let signature = Digest.hmac(.sha256, Data(input.utf8), key: Digest.Key(Self.secret.utf8))
            #expect(refusal(authority.verify(input + "." + Base64URL.encode(Data(signature)))) == "the token is not a valid JWT", "\(claims)")
        }
    }

    func refusal(_ result: Result<String, TokenRefusal>) -> String? {
        if case .failure(let refusal) = result { return refusal.reason }
        return nil
    }
}
