import MediaCore
@testable import RTSP
import Testing

@Suite struct AuthenticationTests {
    /// RFC 1321 §A.5.
    @Test(arguments: [("", "d41d8cd98f00b204e9800998ecf8427e"), ("a", "0cc175b9c0f1b6a831c399e269772661"),
                      ("abc", "900150983cd24fb0d6963f7d28e17f72"), ("message digest", "f96b697d7cb7938d525a2f31aaf161d0"),
                      ("12345678901234567890123456789012345678901234567890123456789012345678901234567890", "57edf4a22be3c955ac49da2e2107b67a")])
    func md5MatchesTheRFCVectors(_ input: String, _ expected: String) {
        #expect(MD5.hex(input) == expected)
    }

    static let credentials = StreamCredentials(username: "user", password: "pass")
    static let authenticator = RTSPAuthenticator(secret: "test-secret", nonceLifetime: 60)

    /// What a client computes (RFC 2617 §3.2.2), from the challenge the node sent.
    static func digestAnswer(method: String, uri: String, nonce: String, password: String = "pass", realm: String = "abr-worker",
                             qop: (nc: String, cnonce: String)? = nil) -> String {
        let ha1 = MD5.hex("user:\(realm):\(password)")
        let ha2 = MD5.hex("\(method):\(uri)")
        if let qop {
            let response = MD5.hex("\(ha1):\(nonce):\(qop.nc):\(qop.cnonce):auth:\(ha2)")
            return "Digest username=\"user\", realm=\"\(realm)\", nonce=\"\(nonce)\", uri=\"\(uri)\", response=\"\(response)\", qop=auth, nc=\(qop.nc), cnonce=\"\(qop.cnonce)\""
        }
        let response = MD5.hex("\(ha1):\(nonce):\(ha2)")
        return "Digest username=\"user\", realm=\"\(realm)\", nonce=\"\(nonce)\", uri=\"\(uri)\", response=\"\(response)\""
    }

    static func nonce(at seconds: UInt64) throws -> String {
        let challenge = try #require(authenticator.challenges(now: seconds).first)
        let start = try #require(challenge.range(of: "nonce=\"")).upperBound
        return String(challenge[start...].prefix { $0 != "\"" })
    }

    @Test func aDigestAnswerToOurChallengeIsAccepted() throws {
        let nonce = try Self.nonce(at: 1000)
        let uri = "rtsp://127.0.0.1:8554/live/stream1_1"
        let answer = Self.digestAnswer(method: "ANNOUNCE", uri: uri, nonce: nonce)
        #expect(Self.authenticator.verify(answer, method: "ANNOUNCE", requestURI: uri, credentials: Self.credentials, now: 1010))
        #expect(Self.authenticator.verify(Self.digestAnswer(method: "ANNOUNCE", uri: uri, nonce: nonce, qop: ("00000001", "abc")),
                                          method: "ANNOUNCE", requestURI: uri, credentials: Self.credentials, now: 1010))
        // The same resource written without scheme and host (some clients answer with the path).
        #expect(Self.authenticator.verify(Self.digestAnswer(method: "ANNOUNCE", uri: "/live/stream1_1", nonce: nonce),
                                          method: "ANNOUNCE", requestURI: uri, credentials: Self.credentials, now: 1010))
    }

    @Test func aDigestAnswerForOneStreamOpensNoOther() throws {
        let nonce = try Self.nonce(at: 1000)
        let answer = Self.digestAnswer(method: "ANNOUNCE", uri: "rtsp://127.0.0.1:8554/live/a_1", nonce: nonce)
        #expect(Self.authenticator.verify(answer, method: "ANNOUNCE", requestURI: "rtsp://127.0.0.1:8554/live/a_1", credentials: Self.credentials, now: 1001))
        for other in ["rtsp://127.0.0.1:8554/live/b_1", "rtsp://127.0.0.1:8554/live/a_1/trackID=0", "rtsp://127.0.0.1:8554/live/a_10", "*"] {
            #expect(!Self.authenticator.verify(answer, method: "ANNOUNCE", requestURI: other, credentials: Self.credentials, now: 1001), "\(other)")
        }
    }

    @Test func wrongPasswordsMethodsRealmsAndStaleOrForgedNoncesAreRefused() throws {
        let nonce = try Self.nonce(at: 1000)
        let uri = "rtsp://h/live/a_1"
        let verify = { (answer: String, now: UInt64) in Self.authenticator.verify(answer, method: "ANNOUNCE", requestURI: uri, credentials: Self.credentials, now: now) }
        #expect(!verify(Self.digestAnswer(method: "ANNOUNCE", uri: uri, nonce: nonce, password: "nope"), 1001))
        #expect(!verify(Self.digestAnswer(method: "DESCRIBE", uri: uri, nonce: nonce), 1001))
        #expect(!verify(Self.digestAnswer(method: "ANNOUNCE", uri: uri, nonce: nonce, realm: "other"), 1001))
        #expect(!verify(Self.digestAnswer(method: "ANNOUNCE", uri: uri, nonce: nonce), 1000 + 61), "a nonce past its lifetime")
        #expect(!verify(Self.digestAnswer(method: "ANNOUNCE", uri: uri, nonce: nonce), 999), "a nonce from the future")
        let forged = "3e8" + String(repeating: "0", count: 32)
        #expect(!verify(Self.digestAnswer(method: "ANNOUNCE", uri: uri, nonce: forged), 1001))
        let otherNode = try #require(RTSPAuthenticator(secret: "another").challenges(now: 1000).first)
        #expect(!otherNode.isEmpty)
    }

    @Test func basicIsAcceptedOnlyWithTheRightPair() {
        let verify = { (header: String?) in Self.authenticator.verify(header, method: "ANNOUNCE", requestURI: "/", credentials: Self.credentials, now: 5) }
        #expect(verify("Basic dXNlcjpwYXNz"))       // user:pass
        #expect(verify("basic   dXNlcjpwYXNz  "))
        #expect(!verify("Basic dXNlcjpwYXNzeA=="))  // user:passx
        #expect(!verify("Basic dXNlcg=="))          // user (no colon)
        #expect(!verify("Basic !!!"))
        #expect(!verify("Bearer abc"))
        #expect(!verify(""))
        #expect(!verify(nil))
    }

    @Test(arguments: ["Digest", "Digest ", "Digest username=\"unterminated", "Digest =x", "Digest ,,,,", "Digest a=b,,c=\"d,e\""])
    func malformedDigestHeadersAreRefusedNotTrapped(_ header: String) {
        #expect(!Self.authenticator.verify(header, method: "ANNOUNCE", requestURI: "/", credentials: Self.credentials, now: 5))
    }

    @Test func digestParametersKeepCommasInsideQuotes() {
        #expect(RTSPAuthorization(parsing: "Digest a=\"1,2\", b=3") == .digest(["a": "1,2", "b": "3"]))
    }
}
