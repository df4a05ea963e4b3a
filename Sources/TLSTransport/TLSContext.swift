import CTLS

/// One side's TLS settings as OpenSSL holds them (an `SSL_CTX`), made once and shared by every
/// connection: the HTTPS server's certificate, key and ALPN protocols, or a client's trust.
/// OpenSSL makes sessions from one context on any thread.
public final class TLSContext: @unchecked Sendable {
    let pointer: OpaquePointer
    public let isServer: Bool

    private init(pointer: OpaquePointer, isServer: Bool) {
        self.pointer = pointer
        self.isServer = isServer
    }

    deinit { abr_tls_context_free(pointer) }

    /// A NUL-terminated C string buffer as text.
    static func text(_ buffer: [CChar]) -> String {
        String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// What in a server's files cannot be used, and OpenSSL's reason.
    public struct Problem: Error, Sendable, CustomStringConvertible {
        public enum Part: Sendable { case certificate, privateKey, keyDoesNotMatch, other }
        public let part: Part
        public let reason: String
        public var description: String { reason }
    }

    /// A server's context: the certificate chain (leaf first) and its private key from PEM files,
    /// and the protocols ALPN may choose, in the server's order of preference (`["h2", "http/1.1"]`).
    public static func server(certificatePath: String, privateKeyPath: String, applicationProtocols: [String] = []) throws(Problem) -> TLSContext {
        var wire: [UInt8] = []
        for name in applicationProtocols where (1...255).contains(name.utf8.count) {
            wire.append(UInt8(name.utf8.count))
            wire += name.utf8
        }
        var failedPart: Int32 = 0
        var error = [CChar](repeating: 0, count: 320)
        let made = wire.withUnsafeBufferPointer { protocols in
            abr_tls_server_context_create(certificatePath, privateKeyPath, protocols.baseAddress, protocols.count, &failedPart, &error, error.count)
        }
        guard let made else {
            let part: Problem.Part = switch Int(failedPart) {
            case Int(ABR_TLS_BAD_CERTIFICATE): .certificate
            case Int(ABR_TLS_BAD_KEY): .privateKey
            case Int(ABR_TLS_KEY_MISMATCH): .keyDoesNotMatch
            default: .other
            }
            throw Problem(part: part, reason: Self.text(error))
        }
        return TLSContext(pointer: made, isServer: true)
    }

    /// A client's context: the peer's certificate checked (and the name the session is made for)
    /// when `verifyingPeers`, against the roots in the PEM file `rootsPath`, else the system's.
    public static func client(verifyingPeers: Bool = true, rootsPath: String? = nil) throws(Problem) -> TLSContext {
        var error = [CChar](repeating: 0, count: 320)
        guard let made = abr_tls_client_context_create(verifyingPeers ? 1 : 0, rootsPath, &error, error.count) else {
            throw Problem(part: .other, reason: Self.text(error))
        }
        return TLSContext(pointer: made, isServer: false)
    }
}

/// A TLS connection that failed: its handshake (with why, in OpenSSL's words), or a record.
public struct TLSFailure: Error, Sendable, CustomStringConvertible {
    public let reason: String
    public var description: String { reason }
}
