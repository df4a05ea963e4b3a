import CDTLS

/// The node's DTLS identity: one ECDSA P-256 key and self-signed certificate made at start,
/// whose SHA-256 fingerprint every SDP answer names (RFC 5763). OpenSSL, through the CDTLS shim.
public final class DTLSIdentity: @unchecked Sendable {
    // @unchecked: the context is only read after creation (OpenSSL's SSL_CTX is thread-safe for
    // making sessions).
    let context: OpaquePointer
    /// `AB:CD:...`, as `a=fingerprint:sha-256` writes it.
    public let fingerprint: String

    public init() throws(DTLSError) {
        var fingerprintBytes = [CChar](repeating: 0, count: 96)
        let errorSize = 256
        var error = [CChar](repeating: 0, count: errorSize)
        guard let context = abr_dtls_context_create(&fingerprintBytes, &error, errorSize) else {
            throw .setup(cText(error))
        }
        self.context = context
        fingerprint = cText(fingerprintBytes)
    }

    deinit { abr_dtls_context_free(context) }
}

public enum DTLSError: Error, Equatable, CustomStringConvertible {
    case setup(String)
    case handshake(String)
    case fingerprintMismatch(expected: String, presented: String)
    case noSRTPProfile

    public var description: String {
        switch self {
        case let .setup(reason): "DTLS setup: \(reason)"
        case let .handshake(reason): reason
        case let .fingerprintMismatch(expected, presented): "the peer's DTLS certificate (\(presented)) is not the one its offer named (\(expected))"
        case .noSRTPProfile: "the DTLS handshake agreed no SRTP profile"
        }
    }
}

/// One viewer's DTLS association: datagrams in, datagrams out, and once connected the SRTP keys
/// and profile. Not thread-safe: its owner (one event loop) calls it.
// @unchecked Sendable: not thread-safe itself; its owner (a viewer) uses it under its lock only.
public final class DTLSSession: @unchecked Sendable {
    public enum State: Equatable {
        case handshaking, connected, failed(String), closed
    }

    private let session: OpaquePointer
    private let identity: DTLSIdentity
    public private(set) var state = State.handshaking

    /// `client`: for tests, which play the browser's part with the same library.
    public init(identity: DTLSIdentity, client: Bool = false, mtu: Int = 1200) throws(DTLSError) {
        guard let session = abr_dtls_session_create(identity.context, client ? 1 : 0, Int32(mtu)) else {
            throw .setup("cannot make a DTLS session")
        }
        self.session = session
        self.identity = identity
    }

    deinit { abr_dtls_session_free(session) }

    /// Starts the handshake (a client's first flight; nothing for a server).
    public func start() -> [[UInt8]] {
        update(abr_dtls_session_start(session))
        return outputs()
    }

    /// One datagram from the peer (first byte 20–63, RFC 7983); returns what to send back.
    public func receive(_ datagram: [UInt8]) -> [[UInt8]] {
        update(datagram.withUnsafeBufferPointer { abr_dtls_session_feed(session, $0.baseAddress, $0.count) })
        return outputs()
    }

    /// Seconds until the handshake's retransmission timer fires; nil when none runs.
    public var retransmissionDelay: Double? {
        let milliseconds = abr_dtls_session_timeout_ms(session)
        return milliseconds < 0 ? nil : Double(milliseconds) / 1000
    }

    /// The timer fired: the last flight again, or the handshake gives up.
    public func retransmit() -> [[UInt8]] {
        update(abr_dtls_session_handle_timeout(session))
        return outputs()
    }

    /// A close_notify for the peer.
    public func close() -> [[UInt8]] {
        abr_dtls_session_close(session)
        state = .closed
        return outputs()
    }

    /// Once connected: the keys SRTP protects with, after checking the peer's certificate
    /// against the fingerprint its SDP named (RFC 8122: the only thing tying DTLS to the signalling).
    public func srtpKeys(expectedPeerFingerprint: String) throws(DTLSError) -> SRTPKeys {
        var presented = [CChar](repeating: 0, count: 96)
        guard abr_dtls_session_peer_fingerprint(session, &presented) == 0 else { throw .handshake("the peer presented no certificate") }
        let fingerprint = cText(presented)
        guard fingerprint.uppercased() == expectedPeerFingerprint.uppercased() else {
            throw .fingerprintMismatch(expected: expectedPeerFingerprint, presented: fingerprint)
        }
        guard let profile = SRTPKeys.Profile(rawValue: Int(abr_dtls_session_srtp_profile(session))) else { throw .noSRTPProfile }
        let length = 2 * (profile.keyLength + profile.saltLength)
        var material = [UInt8](repeating: 0, count: length)
        guard abr_dtls_session_export_srtp_keys(session, &material, length) == 0 else {
            throw .handshake("cannot export the SRTP keying material")
        }
        return SRTPKeys(profile: profile, material: material)
    }

    /// The certificate fingerprint the peer presented (after the handshake).
    public var peerFingerprint: String? {
        var presented = [CChar](repeating: 0, count: 96)
        return abr_dtls_session_peer_fingerprint(session, &presented) == 0 ? cText(presented) : nil
    }

    private func update(_ result: Int32) {
        switch result {
        case Int32(ABR_DTLS_CONNECTED): state = .connected
        case Int32(ABR_DTLS_FAILED): state = .failed(String(cString: abr_dtls_session_error(session)))
        case Int32(ABR_DTLS_CLOSED): state = .closed
        default: break
        }
    }

    private func outputs() -> [[UInt8]] {
        var datagrams: [[UInt8]] = []
        let capacity = 65536
        var buffer = [UInt8](repeating: 0, count: capacity)
        while true {
            let length = abr_dtls_session_next_output(session, &buffer, capacity)
            guard length > 0 else { break }
            datagrams.append(Array(buffer[0..<length]))
        }
        return datagrams
    }
}

/// The SRTP master keys and salts a DTLS handshake exported (RFC 5764 §4.2).
public struct SRTPKeys: Sendable, Equatable {
    public enum Profile: Int, Sendable {
        case aes128CmSha1_80 = 0x0001
        case aeadAes128Gcm = 0x0007

        var keyLength: Int { 16 }
        var saltLength: Int { self == .aeadAes128Gcm ? 12 : 14 }
    }

    public var profile: Profile
    /// client key | server key | client salt | server salt.
    public var material: [UInt8]

    /// Key and salt of one side, concatenated as libsrtp takes them.
    public func keyAndSalt(ofClient client: Bool) -> [UInt8] {
        let keys = profile.keyLength, salts = profile.saltLength
        let key = client ? material[0..<keys] : material[keys..<(2 * keys)]
        let salt = client ? material[(2 * keys)..<(2 * keys + salts)] : material[(2 * keys + salts)..<(2 * keys + 2 * salts)]
        return Array(key) + Array(salt)
    }
}

/// A NUL-terminated C string the shim filled in, as text.
func cText(_ characters: [CChar]) -> String {
    String(decoding: characters.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}
