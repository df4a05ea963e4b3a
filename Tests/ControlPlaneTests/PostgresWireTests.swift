import Digests
import Foundation
import MediaCore
import NIOCore
import NIOEmbedded
@testable import Store
import Testing

/// The node's own PostgreSQL client, below the socket: the digests it rests on, SCRAM against
/// RFC 7677's example, and what the decoder does with bytes that are not the protocol.
@Suite struct PostgresWireTests {
    @Test func theDigestsAreOpenSSLsAndMatchThePublishedVectors() {
        // RFC 4231 test case 2, RFC 2202 test case 2, RFC 1321's "abc".
        #expect(lowercaseHex(Digest.hmac(.sha256, "what do ya want for nothing?".utf8, key: Digest.Key("Jefe")))
            == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        #expect(lowercaseHex(Digest.hmac(.sha1, "what do ya want for nothing?".utf8, key: Digest.Key("Jefe"))) == "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79")
        #expect(lowercaseHex(Digest.hash(.md5, "abc".utf8)) == "900150983cd24fb0d6963f7d28e17f72")
        #expect(lowercaseHex(Digest.hash(.sha256, "".utf8)) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(lowercaseHex(Digest.hmac(.sha256, [UInt8](), key: Digest.Key([UInt8]()))) == "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad")
        // RFC 7914 §11's PBKDF2-HMAC-SHA256 vector.
        #expect(lowercaseHex(Digest.pbkdf2SHA256(password: "passwd".utf8, salt: Array("salt".utf8), iterations: 1, length: 64)).hasPrefix("55ac046e56e3089fec1691c22544b605"))
        #expect(Digest.isValidHMAC(Digest.hmac(.sha256, "m".utf8, key: Digest.Key("k")), .sha256, authenticating: "m".utf8, key: Digest.Key("k")))
        #expect(!Digest.isValidHMAC([UInt8](repeating: 0, count: 32), .sha256, authenticating: "m".utf8, key: Digest.Key("k")))
        #expect(!Digest.equalInConstantTime([1, 2], [1, 2, 3]))
    }

    @Test func scramAnswersRFC7677sExampleAndChecksTheServer() throws {
        var scram = PostgresSCRAM(password: "pencil", user: "user", clientNonce: "rOprNGfwEbeRWgbNEkqO")
        #expect(String(decoding: scram.clientFirst, as: UTF8.self) == "n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
        let serverFirst = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        let final = try scram.clientFinal(serverFirst: Array(serverFirst.utf8))
        #expect(String(decoding: final, as: UTF8.self)
            == "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
        try scram.verify(serverFinal: Array("v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=".utf8))
        #expect(throws: PostgresFailure.self) { try scram.verify(serverFinal: Array("v=AAAATRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=".utf8)) }
        #expect(throws: PostgresFailure.self) { try scram.verify(serverFinal: Array("e=invalid-proof".utf8)) }
        // A nonce the client did not start, and a round count that would hold a core for minutes.
        var other = PostgresSCRAM(password: "pencil", clientNonce: "abc")
        #expect(throws: PostgresFailure.self) { _ = try other.clientFinal(serverFirst: Array("r=xyz123,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096".utf8)) }
        #expect(throws: PostgresFailure.self) { _ = try other.clientFinal(serverFirst: Array("r=abc123,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=900000000".utf8)) }
        #expect(throws: PostgresFailure.self) { _ = try other.clientFinal(serverFirst: Array("r=abc123,i=4096".utf8)) }
    }

    func decode(_ bytes: [UInt8], expectsSSLResponse: Bool = false) throws -> [PostgresBackendMessage] {
        var buffer = ByteBuffer(bytes: bytes)
        var ssl = expectsSSLResponse
        var messages: [PostgresBackendMessage] = []
        while let message = try PostgresBackendDecoder.next(from: &buffer, expectsSSLResponse: &ssl) { messages.append(message) }
        return messages
    }

    func message(_ type: Character, _ body: [UInt8]) -> [UInt8] {
        var buffer = ByteBuffer()
        buffer.writeInteger(type.asciiValue!)
        buffer.writeInteger(Int32(4 + body.count))
        buffer.writeBytes(body)
        return Array(buffer.readableBytesView)
    }

    @Test func theDecoderReadsWholeMessagesAndRefusesWhatIsNotTheProtocol() throws {
        // A row with a NULL, an error's fields, ReadyForQuery; half a message waits for the rest.
        let row = message("D", [0, 2, 0, 0, 0, 2] + Array("ok".utf8) + [0xFF, 0xFF, 0xFF, 0xFF])
        let error = message("E", Array("SERROR\0C23505\0Mduplicate key\0\0".utf8))
        let ready = message("Z", Array("I".utf8))
        #expect(try decode(row + error + ready) == [
            .dataRow(["ok", nil]),
            .error(PostgresServerError(fields: [UInt8(ascii: "S"): "ERROR", UInt8(ascii: "C"): "23505", UInt8(ascii: "M"): "duplicate key"])),
            .readyForQuery(transactionStatus: UInt8(ascii: "I")),
        ])
        #expect(try decode(Array(row.prefix(7))).isEmpty)
        #expect(try decode([UInt8(ascii: "N")], expectsSSLResponse: true) == [.sslResponse(accepted: false)])
        // A length beyond the cap (refused before any of it is buffered), one below 4, a row whose
        // column runs past its message, an SSL answer that is neither S nor N.
        #expect(throws: PostgresFailure.self) { try decode([UInt8(ascii: "D"), 0x7F, 0xFF, 0xFF, 0xFF]) }
        #expect(throws: PostgresFailure.self) { try decode([UInt8(ascii: "Z"), 0, 0, 0, 3]) }
        #expect(throws: PostgresFailure.self) { try decode(message("D", [0, 1, 0, 0, 0, 50, 65])) }
        #expect(throws: PostgresFailure.self) { try decode(message("R", [0, 0])) }
        #expect(throws: PostgresFailure.self) { try decode([UInt8(ascii: "E")], expectsSSLResponse: true) }
        #expect("\(PostgresFailure.server(PostgresServerError(fields: [UInt8(ascii: "V"): "FATAL", UInt8(ascii: "C"): "28P01", UInt8(ascii: "M"): "password authentication failed"])))"
            == "PostgreSQL FATAL 28P01: password authentication failed")
    }

    /// A server answering one request with more than the cap allows is refused, not held in memory;
    /// the request fails with the reason and the connection closes.
    @Test func anAnswerOfTooManyMessagesIsRefused() throws {
        let channel = EmbeddedChannel()
        let handler = PostgresResponseHandler(maximumMessagesPerRequest: 10) { _, _ in }
        try channel.pipeline.syncOperations.addHandler(handler)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 5432)).wait()
        #expect(channel.isActive)
        let promise = channel.eventLoop.makePromise(of: [PostgresBackendMessage].self)
        handler.enqueue(promise) { if case .readyForQuery = $0 { true } else { false } }
        var outcome: Result<[PostgresBackendMessage], any Error>?
        promise.futureResult.whenComplete { outcome = $0 }
        for _ in 0..<11 { try channel.writeInbound(PostgresBackendMessage.dataRow(["x"])) }
        guard case let .failure(error) = outcome else { Issue.record("the request was not failed: \(String(describing: outcome))"); return }
        #expect("\(error)".contains("more than 10 messages in answer to one request"), "\(error)")
        #expect(!channel.isActive, "the connection is closed")
    }

    @Test func queriesBindTheirValuesInsteadOfWritingThemIntoSQL() {
        let guid = "live/x'; DROP TABLE provision; --"
        let query: PostgresQuery = "SELECT 1 FROM provision WHERE stream_guid = \(guid) AND created_at > \(1.5) LIMIT \(3) AND x = ANY(\(["a\"b", "c\\d"])) \(unescaped: "ORDER BY 1")"
        #expect(query.sql == "SELECT 1 FROM provision WHERE stream_guid = $1 AND created_at > $2 LIMIT $3 AND x = ANY($4::text[]) ORDER BY 1")
        #expect(query.binds == [guid, "1.5", "3", #"{"a\"b","c\\d"}"#])
    }
}
