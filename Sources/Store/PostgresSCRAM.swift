import Digests
import Foundation

/// SCRAM-SHA-256 (RFC 5802, RFC 7677) as PostgreSQL's client side: the default password
/// authentication since PostgreSQL 14. No channel binding (`n,,`): the node offers the plain
/// mechanism, which every server that offers SCRAM accepts. The digests are OpenSSL's (Digests).
///
/// PostgreSQL takes the user from the startup message, so the client-first message names none
/// (`user` is there for RFC 7677's example, which names one).
struct PostgresSCRAM {
    static let mechanism = "SCRAM-SHA-256"
    /// A server asking for more rounds than this is refused rather than obeyed: PBKDF2 at that
    /// count would hold a core for seconds (PostgreSQL's default is 4096).
    static let maximumIterations = 1_000_000

    let password: String
    let user: String
    let clientNonce: String
    private(set) var expectedServerSignature: [UInt8]?

    init(password: String, user: String = "", clientNonce: String? = nil) {
        self.password = password
        self.user = user
        var random = SystemRandomNumberGenerator()
        self.clientNonce = clientNonce ?? Data((0..<18).map { _ in UInt8.random(in: 0...255, using: &random) }).base64EncodedString()
    }

    var clientFirstBare: String { "n=\(user),r=\(clientNonce)" }
    var clientFirst: [UInt8] { Array(("n,," + clientFirstBare).utf8) }

    /// The client-final message for the server-first message `serverFirst`.
    mutating func clientFinal(serverFirst data: [UInt8]) throws -> [UInt8] {
        let serverFirst = String(decoding: data, as: UTF8.self)
        let attributes = Self.attributes(serverFirst)
        guard let nonce = attributes["r"], nonce.hasPrefix(clientNonce), nonce.count > clientNonce.count,
              let saltText = attributes["s"], let salt = Data(base64Encoded: saltText),
              let iterationText = attributes["i"], let iterations = Int(iterationText) else {
            throw PostgresFailure.authentication("the server's SCRAM challenge is malformed")
        }
        guard (1...Self.maximumIterations).contains(iterations) else {
            throw PostgresFailure.authentication("the server asks for \(iterations) SCRAM iterations (at most \(Self.maximumIterations) taken)")
        }
        let saltedPassword = Digest.pbkdf2SHA256(password: password.utf8, salt: Array(salt), iterations: iterations)
        let clientKey = Digest.hmac(.sha256, "Client Key".utf8, key: Digest.Key(saltedPassword))
        let storedKey = Digest.hash(.sha256, clientKey)
        let withoutProof = "c=biws,r=\(nonce)"  // biws: base64 of "n,,"
        let authMessage = Array("\(clientFirstBare),\(serverFirst),\(withoutProof)".utf8)
        let clientSignature = Digest.hmac(.sha256, authMessage, key: Digest.Key(storedKey))
        let proof = zip(clientKey, clientSignature).map { $0 ^ $1 }
        let serverKey = Digest.hmac(.sha256, "Server Key".utf8, key: Digest.Key(saltedPassword))
        expectedServerSignature = Digest.hmac(.sha256, authMessage, key: Digest.Key(serverKey))
        return Array("\(withoutProof),p=\(Data(proof).base64EncodedString())".utf8)
    }

    /// Checks the server-final message: the server proves it knew the password too.
    func verify(serverFinal data: [UInt8]) throws {
        let attributes = Self.attributes(String(decoding: data, as: UTF8.self))
        if let error = attributes["e"] { throw PostgresFailure.authentication("the server refused SCRAM: \(error.prefix(80))") }
        guard let expected = expectedServerSignature, let signature = attributes["v"].flatMap({ Data(base64Encoded: $0) }),
              Digest.equalInConstantTime(Array(signature), expected) else {
            throw PostgresFailure.authentication("the server's SCRAM signature is wrong: it does not know this user's password")
        }
    }

    /// `a=…,b=…` as a dictionary of one-letter names.
    static func attributes(_ message: String) -> [String: String] {
        var result: [String: String] = [:]
        for part in message.split(separator: ",", omittingEmptySubsequences: true) {
            guard let equals = part.firstIndex(of: "="), part.distance(from: part.startIndex, to: equals) == 1 else { continue }
            result[String(part[..<equals])] = String(part[part.index(after: equals)...])
        }
        return result
    }
}
