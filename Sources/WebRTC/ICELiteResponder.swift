/// The node's side of ICE-lite (RFC 8445 §2.5): it never sends checks, it answers the browser's
/// binding requests on its one UDP port. A value with no sockets: given a datagram, the address
/// it came from and a way to find a session's passwords by its local ufrag, it says what to send
/// back and whether the request nominated that address.
public enum ICELiteResponder {
    /// One WebRTC session's ICE credentials, as the SDP offer and answer exchanged them.
    public struct Credentials: Sendable, Equatable {
        public var localUfrag: String
        public var localPassword: String
        public var remoteUfrag: String

        public init(localUfrag: String, localPassword: String, remoteUfrag: String) {
            self.localUfrag = localUfrag
            self.localPassword = localPassword
            self.remoteUfrag = remoteUfrag
        }
    }

    public enum Outcome: Sendable, Equatable {
        /// A valid binding request for the session `localUfrag`: send `response`; `nominated`
        /// when it carried USE-CANDIDATE (the browser chose this address).
        case answer(response: [UInt8], localUfrag: String, nominated: Bool)
        /// A request the node refuses: send `response` (a STUN error, nil when nothing can be
        /// answered) and log `reason`.
        case refuse(response: [UInt8]?, reason: String)
        /// Not a request (an indication or a response, or not STUN at all): nothing to send.
        case ignore(reason: String)
    }

    /// Answers one datagram. `address` is 4 (IPv4) or 16 (IPv6) bytes.
    public static func respond(to datagram: [UInt8], from address: [UInt8], port: UInt16,
                               credentials lookup: (String) -> Credentials?) -> Outcome {
        let received: STUNMessage.Received
        do {
            received = try STUNMessage.parse(datagram)
        } catch {
            return .ignore(reason: error.description)
        }
        let request = received.message
        guard request.messageClass == .request else { return .ignore(reason: "STUN \(request.messageClass) ignored") }
        func error(_ code: Int, _ phrase: String) -> [UInt8] {
            var value: [UInt8] = [0, 0, UInt8(code / 100), UInt8(code % 100)]
            value += Array(phrase.utf8)
            return STUNMessage(messageClass: .errorResponse, method: request.method, transactionID: request.transactionID,
                               attributes: [.init(type: STUNMessage.AttributeType.errorCode, value: value)]).encoded(integrityKey: nil)
        }
        guard request.method == STUNMessage.bindingMethod else {
            return .refuse(response: error(400, "Bad Request"), reason: "STUN method 0x\(String(request.method, radix: 16)) is not a binding")
        }
        // RFC 8489 §9.1.3: no USERNAME or no MESSAGE-INTEGRITY is a 400; a user or integrity
        // that does not check out is a 401, with nothing of the session's in the answer.
        guard let username = request.username, received.integrityOffset != nil else {
            return .refuse(response: error(400, "Bad Request"), reason: "STUN binding without USERNAME or MESSAGE-INTEGRITY")
        }
        let parts = username.split(separator: ":", maxSplits: 1)
        guard parts.count == 2, let session = lookup(String(parts[0])), session.remoteUfrag == parts[1] else {
            return .refuse(response: error(401, "Unauthorized"), reason: "STUN binding for an unknown username \"\(username.prefix(64))\"")
        }
        let key = Array(session.localPassword.utf8)
        guard received.hasValidIntegrity(key: key) else {
            return .refuse(response: error(401, "Unauthorized"), reason: "STUN binding for \(session.localUfrag) with a MESSAGE-INTEGRITY that does not match")
        }
        // The browser is always the controlling agent against a lite one; a request claiming
        // to be controlled is a role conflict (487), which a lite agent answers and does not resolve.
        if request.attribute(STUNMessage.AttributeType.iceControlled) != nil {
            return .refuse(response: error(487, "Role Conflict"), reason: "STUN binding from a controlled agent: a lite agent cannot take the controlling role")
        }
        let response = STUNMessage(messageClass: .successResponse, method: STUNMessage.bindingMethod, transactionID: request.transactionID,
                                   attributes: [STUNMessage.xorMappedAddress(address: address, port: port, transactionID: request.transactionID)])
        return .answer(response: response.encoded(integrityKey: key), localUfrag: session.localUfrag,
                       nominated: request.attribute(STUNMessage.AttributeType.useCandidate) != nil)
    }
}
