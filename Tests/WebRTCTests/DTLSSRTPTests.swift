import Testing
@testable import WebRTCTransport

/// OpenSSL's DTLS and libsrtp2 as the node uses them: a real handshake between the node's server
/// and a client made with the same library (the browser's part), the keys both sides derive, SRTP
/// both ways, and what a forger, a replayer and a stranger's certificate get.
@Suite struct DTLSSRTPTests {
    /// Runs datagrams between the two until neither has anything to send (at most 20 rounds).
    static func handshake(_ client: DTLSSession, _ server: DTLSSession) {
        var toServer = client.start()
        var toClient: [[UInt8]] = []
        for _ in 0..<20 where !(toServer.isEmpty && toClient.isEmpty) {
            toClient = toServer.flatMap { server.receive($0) }
            toServer = toClient.flatMap { client.receive($0) }
        }
    }

    static func rtp(sequence: UInt16, payload: [UInt8] = Array(repeating: 0x5A, count: 100)) -> [UInt8] {
        [0x80, 102, UInt8(sequence >> 8), UInt8(sequence & 0xFF), 0, 0, 0x10, 0, 0, 0, 0x04, 0x57] + payload
    }

    @Test func aHandshakeAgreesKeysAndSRTPGoesBothWays() throws {
        let node = try DTLSIdentity()
        let browser = try DTLSIdentity()
        #expect(node.fingerprint.count == 95 && node.fingerprint != browser.fingerprint)
        let server = try DTLSSession(identity: node)
        let client = try DTLSSession(identity: browser, client: true)
        Self.handshake(client, server)
        #expect(server.state == .connected && client.state == .connected)
        let serverKeys = try server.srtpKeys(expectedPeerFingerprint: browser.fingerprint)
        let clientKeys = try client.srtpKeys(expectedPeerFingerprint: node.fingerprint)
        #expect(serverKeys == clientKeys)
        #expect(serverKeys.profile == .aeadAes128Gcm)

        // The node protects with the server's key; the browser unprotects with it.
        let send = try SRTPSession(profile: serverKeys.profile, keyAndSalt: serverKeys.keyAndSalt(ofClient: false), direction: .outbound)
        let receive = try SRTPSession(profile: clientKeys.profile, keyAndSalt: clientKeys.keyAndSalt(ofClient: false), direction: .inbound)
        let packet = Self.rtp(sequence: 1)
        let protected = try send.protect(rtp: packet)
        #expect(protected.count == packet.count + 16 && protected[12...] != packet[12...])
        #expect(try receive.unprotect(rtp: protected) == packet)
        // The same packet again: a replay.
        #expect(throws: SRTPSession.Failure.self) { try receive.unprotect(rtp: protected) }
        // A flipped bit in the payload: authentication fails.
        var forged = try send.protect(rtp: Self.rtp(sequence: 2))
        forged[20] ^= 1
        #expect(throws: SRTPSession.Failure.self) { try receive.unprotect(rtp: forged) }
        // A retransmission of a packet the node already sent (NACK without RTX) still goes out.
        _ = try send.protect(rtp: Self.rtp(sequence: 1))

        // The browser's RTCP comes back under the client's key.
        let browserSend = try SRTPSession(profile: clientKeys.profile, keyAndSalt: clientKeys.keyAndSalt(ofClient: true), direction: .outbound)
        let nodeReceive = try SRTPSession(profile: serverKeys.profile, keyAndSalt: serverKeys.keyAndSalt(ofClient: true), direction: .inbound)
        let pli: [UInt8] = [0x81, 206, 0, 2, 0, 0, 0, 1, 0, 0, 0x04, 0x57]
        #expect(try nodeReceive.unprotect(rtcp: try browserSend.protect(rtcp: pli)) == pli)
        #expect(throws: SRTPSession.Failure.self) { try nodeReceive.unprotect(rtcp: pli + [0, 0, 0, 0]) }
    }

    /// SRTP's ciphers come from OpenSSL, put in libsrtp2's crypto kernel (Debian's libsrtp2 is built
    /// on NSS, which costs more per packet), and protect exactly as libsrtp2's own did: the bytes
    /// below are what Debian's libsrtp2 2.5.0 with NSS made of these keys, packets and PLIs.
    @Test func srtpsCiphersAreOpenSSLsAndProtectAsLibsrtpsOwn() throws {
        #expect(SRTPSession.cipherProvider == "OpenSSL")
        let keyAndSalt = (0..<28).map { UInt8($0) }
        let send = try SRTPSession(profile: .aeadAes128Gcm, keyAndSalt: keyAndSalt, direction: .outbound)
        let packet = Self.rtp(sequence: 1, payload: Array(repeating: 0x5A, count: 32))
        let hex = { (bytes: [UInt8]) in bytes.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined() }
        #expect(hex(try send.protect(rtp: packet)) == "806600010000100000000457" + "2a332d9a41d5c101f50db81e7e1b4f7216f9f025c33956c02602c1819b1c38fa"
            + "c1d56fd3d4b07222a0597ead34522842")
        let pli: [UInt8] = [0x81, 206, 0, 2, 0, 0, 0, 1, 0, 0, 0x04, 0x57]
        #expect(hex(try send.protect(rtcp: pli)) == "81ce000200000001" + "5d2d7bd78437aaeeef20224c2822a88d909d39ad" + "80000001")
        // In place, as the pacer protects: the same bytes.
        var buffer = [UInt8](repeating: 0, count: 44 + SRTPSession.trailerRoom)
        buffer.replaceSubrange(0..<44, with: Self.rtp(sequence: 2, payload: Array(repeating: 0x5A, count: 32)))
        let length = try buffer.withUnsafeMutableBytes { try send.protect(rtpInPlace: $0, length: 44) }
        let receive = try SRTPSession(profile: .aeadAes128Gcm, keyAndSalt: keyAndSalt, direction: .inbound)
        #expect(try receive.unprotect(rtp: Array(buffer[0..<length])) == Self.rtp(sequence: 2, payload: Array(repeating: 0x5A, count: 32)))
        // A tag cut short is refused, not read past.
        #expect(throws: SRTPSession.Failure.self) { try receive.unprotect(rtp: Array(buffer[0..<20])) }

        // AES_CM_128_HMAC_SHA1_80: AES-ICM and HMAC-SHA1, and the 10-byte tag.
        let counterKeyAndSalt = (0..<30).map { UInt8($0) }
        let counterSend = try SRTPSession(profile: .aes128CmSha1_80, keyAndSalt: counterKeyAndSalt, direction: .outbound)
        #expect(hex(try counterSend.protect(rtp: packet)) == "806600010000100000000457" + "cc6bfd4a958490f1404ad2a708b4be048b6ff77f6eaf5b72c40b4517c0378ed4"
            + "46e5108de367f5b15baf")
        #expect(hex(try counterSend.protect(rtcp: pli)) == "81ce000200000001" + "c170281a" + "80000001" + "26f9dacde864b2090d2e")
        let counterReceive = try SRTPSession(profile: .aes128CmSha1_80, keyAndSalt: counterKeyAndSalt, direction: .inbound)
        var forged = try counterSend.protect(rtp: Self.rtp(sequence: 3))
        #expect(try counterReceive.unprotect(rtp: forged) == Self.rtp(sequence: 3))
        forged = try counterSend.protect(rtp: Self.rtp(sequence: 4))
        forged[forged.count - 1] ^= 1
        #expect(throws: SRTPSession.Failure.self) { try counterReceive.unprotect(rtp: forged) }
    }

    /// A peer whose certificate is not the one its offer named is refused: the fingerprint is
    /// all that ties DTLS to the signalling.
    @Test func aCertificateTheOfferDidNotNameIsRefused() throws {
        let server = try DTLSSession(identity: try DTLSIdentity())
        let client = try DTLSSession(identity: try DTLSIdentity(), client: true)
        Self.handshake(client, server)
        let stranger = try DTLSIdentity()
        #expect(throws: DTLSError.self) { try server.srtpKeys(expectedPeerFingerprint: stranger.fingerprint) }
    }

    /// Garbage in DTLS's byte range, truncated records and a flood of ClientHello fragments:
    /// the session stays usable or fails with a reason, and a real handshake still completes after.
    @Test func garbageNeverBreaksTheSession() throws {
        let node = try DTLSIdentity()
        let server = try DTLSSession(identity: node)
        var generator = SystemRandomNumberGenerator()
        for length in [1, 13, 14, 100, 1500, 9000] {
            let garbage = [22, 0xFE, 0xFD] + (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            _ = server.receive(garbage)
        }
        if case .failed = server.state { return }  // a clean refusal is fine too
        let fresh = try DTLSSession(identity: node)
        let client = try DTLSSession(identity: try DTLSIdentity(), client: true)
        Self.handshake(client, fresh)
        #expect(fresh.state == .connected)
    }

    /// A client that never answers: the server's flight is retransmitted on its timer.
    @Test func aSilentPeerGetsRetransmissionsOnATimer() throws {
        let server = try DTLSSession(identity: try DTLSIdentity())
        let client = try DTLSSession(identity: try DTLSIdentity(), client: true)
        let hello = client.start()
        let flight = hello.flatMap { server.receive($0) }
        #expect(!flight.isEmpty)
        let delay = try #require(server.retransmissionDelay)
        #expect(delay > 0 && delay <= 1.5)
    }
}
