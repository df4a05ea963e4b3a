import Testing
@testable import WebRTC

/// STUN as ICE-lite needs it, checked against RFC 5769's test vectors and against the damage a
/// datagram from anyone on the network can carry.
@Suite struct STUNTests {
    /// RFC 5769 §2.1: a binding request with SOFTWARE, PRIORITY, ICE-CONTROLLED, USERNAME
    /// "evtj:h6vY", MESSAGE-INTEGRITY under the password "VOkJxbRl1RmTxUk/WvJxBt" and FINGERPRINT.
    static let sampleRequest: [UInt8] = hex("""
        000100582112a442b7e7a701bc34d686fa87dfae802200105354554e207465737420636c69656e74\
        002400046e0001ff80290008932ff9b151263b36000600096576746a3a68367659202020\
        000800149aeaa70cbfd8cb56781ef2b5b2d3f249c1b571a280280004e57a3bcf
        """)
    static let samplePassword = Array("VOkJxbRl1RmTxUk/WvJxBt".utf8)

    static func hex(_ text: String) -> [UInt8] {
        let digits = Array(text.filter(\.isHexDigit))
        return stride(from: 0, to: digits.count, by: 2).map { UInt8(String(digits[$0...$0 + 1]), radix: 16)! }
    }

    @Test func theRFC5769SampleRequestParsesAndItsIntegrityChecksOut() throws {
        let received = try STUNMessage.parse(Self.sampleRequest)
        #expect(received.message.messageClass == .request)
        #expect(received.message.method == STUNMessage.bindingMethod)
        #expect(received.message.username == "evtj:h6vY")
        #expect(received.message.attribute(STUNMessage.AttributeType.priority) == [0x6E, 0x00, 0x01, 0xFF])
        #expect(received.hasValidIntegrity(key: Self.samplePassword))
        #expect(!received.hasValidIntegrity(key: Array("VOkJxbRl1RmTxUk/WvJxBT".utf8)))
    }

    /// What `encoded` writes, `parse` reads back, integrity and fingerprint included; RFC 5769's
    /// request rebuilt from its attributes is byte for byte the RFC's.
    @Test func encodingIsWhatTheRFCWrites() throws {
        let received = try STUNMessage.parse(Self.sampleRequest)
        // The RFC pads USERNAME with spaces where the encoder pads with zeros, so the bytes agree
        // up to that padding (offset 73), and the integrity and fingerprint follow from it.
        let rebuilt = received.message.encoded(integrityKey: Self.samplePassword)
        #expect(rebuilt.count == Self.sampleRequest.count)
        #expect(Array(rebuilt.prefix(73)) == Array(Self.sampleRequest.prefix(73)))
        let again = try STUNMessage.parse(rebuilt)
        #expect(again.message == received.message)
        let reparsed = try STUNMessage.parse(received.message.encoded(integrityKey: Self.samplePassword))
        #expect(reparsed.hasValidIntegrity(key: Self.samplePassword))
    }

    /// RFC 5769 §2.2: the IPv4 success response's XOR-MAPPED-ADDRESS, 192.0.2.1 port 32853.
    @Test func xorMappedAddressIsTheRFCs() {
        let transaction = Array(Self.sampleRequest[8..<20])
        let attribute = STUNMessage.xorMappedAddress(address: [192, 0, 2, 1], port: 32853, transactionID: transaction)
        #expect(attribute.value == [0x00, 0x01, 0xA1, 0x47, 0xE1, 0x12, 0xA6, 0x43])
    }

    @Test func damagedDatagramsSayWhatIsWrong() {
        var request = Self.sampleRequest
        #expect(throws: STUNError.tooShort(bytes: 19)) { try STUNMessage.parse(Array(request.prefix(19))) }
        #expect(throws: STUNError.lengthMismatch(declared: 88, actual: 84)) { try STUNMessage.parse(Array(request.prefix(104))) }
        request[4] = 0
        #expect(throws: STUNError.badMagicCookie(0x0012_A442)) { try STUNMessage.parse(request) }
        request = Self.sampleRequest
        request[30] ^= 1  // inside SOFTWARE: the fingerprint no longer matches
        #expect(throws: STUNError.badFingerprint) { try STUNMessage.parse(request) }
        request = Self.sampleRequest
        request[23] = 0xFF  // SOFTWARE's length runs past the message
        #expect(throws: STUNError.truncatedAttribute(type: 0x8022, offset: 20)) { try STUNMessage.parse(request) }
        #expect(throws: STUNError.notSTUN(firstByte: 0x80)) { try STUNMessage.parse([0x80] + [UInt8](repeating: 0, count: 30)) }
    }
}

/// The node's ICE-lite answers, with the browser's credentials as an SDP exchange set them.
@Suite struct ICELiteResponderTests {
    static let session = ICELiteResponder.Credentials(localUfrag: "node", localPassword: "node-password-0123456789", remoteUfrag: "brws")

    static func request(username: String = "node:brws", password: String = session.localPassword, useCandidate: Bool = true,
                        controlled: Bool = false) -> [UInt8] {
        var attributes: [STUNMessage.Attribute] = [.init(type: STUNMessage.AttributeType.username, value: Array(username.utf8)),
                                                   .init(type: STUNMessage.AttributeType.priority, value: [0x6E, 0, 1, 0xFF])]
        attributes.append(.init(type: controlled ? STUNMessage.AttributeType.iceControlled : STUNMessage.AttributeType.iceControlling,
                                value: [1, 2, 3, 4, 5, 6, 7, 8]))
        if useCandidate { attributes.append(.init(type: STUNMessage.AttributeType.useCandidate, value: [])) }
        return STUNMessage(messageClass: .request, method: STUNMessage.bindingMethod, transactionID: Array(1...12), attributes: attributes)
            .encoded(integrityKey: Array(password.utf8))
    }

    static func respond(_ datagram: [UInt8]) -> ICELiteResponder.Outcome {
        ICELiteResponder.respond(to: datagram, from: [127, 0, 0, 1], port: 50000) { $0 == session.localUfrag ? session : nil }
    }

    @Test func aValidRequestIsAnsweredWithItsAddressUnderTheSessionsPassword() throws {
        guard case let .answer(response, ufrag, nominated) = Self.respond(Self.request()) else {
            Issue.record("refused: \(Self.respond(Self.request()))")
            return
        }
        #expect(ufrag == "node" && nominated)
        let parsed = try STUNMessage.parse(response)
        #expect(parsed.message.messageClass == .successResponse)
        #expect(parsed.message.transactionID == Array(1...12))
        #expect(parsed.hasValidIntegrity(key: Array(Self.session.localPassword.utf8)))
        #expect(parsed.message.attribute(STUNMessage.AttributeType.xorMappedAddress)
            == STUNMessage.xorMappedAddress(address: [127, 0, 0, 1], port: 50000, transactionID: Array(1...12)).value)
        if case let .answer(_, _, nominated) = Self.respond(Self.request(useCandidate: false)) { #expect(!nominated) }
    }

    /// Wrong password, unknown ufrag, someone else's remote ufrag: 401 with nothing of the
    /// session's; no USERNAME: 400; a controlled peer: 487.
    @Test func requestsThatDoNotCheckOutAreRefusedWithTheirCode() throws {
        func code(_ outcome: ICELiteResponder.Outcome) throws -> Int? {
            guard case let .refuse(response?, _) = outcome else { return nil }
            let parsed = try STUNMessage.parse(response)
            #expect(parsed.integrityOffset == nil)
            let value = try #require(parsed.message.attribute(STUNMessage.AttributeType.errorCode))
            return Int(value[2]) * 100 + Int(value[3])
        }
        #expect(try code(Self.respond(Self.request(password: "guessed"))) == 401)
        #expect(try code(Self.respond(Self.request(username: "other:brws"))) == 401)
        #expect(try code(Self.respond(Self.request(username: "node:evil"))) == 401)
        #expect(try code(Self.respond(Self.request(controlled: true))) == 487)
        let bare = STUNMessage(messageClass: .request, method: STUNMessage.bindingMethod, transactionID: Array(1...12)).encoded(integrityKey: nil)
        #expect(try code(Self.respond(bare)) == 400)
        let indication = STUNMessage(messageClass: .indication, method: STUNMessage.bindingMethod, transactionID: Array(1...12)).encoded(integrityKey: nil)
        guard case .ignore = Self.respond(indication) else {
            Issue.record("an indication must get no answer")
            return
        }
    }
}
