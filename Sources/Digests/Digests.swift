import COpenSSLCrypto

/// The digests and MACs the node's protocols name, computed by OpenSSL's libcrypto (the library
/// the DTLS shim already links), never by code of ours: HMAC-SHA256 for the API's JWTs, signed
/// playback, RTMP's handshake and PostgreSQL's SCRAM; HMAC-SHA1 for STUN's MESSAGE-INTEGRITY;
/// MD5 for RTSP's Digest authentication; PBKDF2 for SCRAM's salted password.
public enum Digest {
    /// An HMAC's key: its bytes, held as given (HMAC itself hashes a key longer than a block).
    public struct Key: Sendable, Equatable {
        public let bytes: [UInt8]
        public init(_ bytes: some Sequence<UInt8>) { self.bytes = Array(bytes) }
        public init(_ text: String) { bytes = Array(text.utf8) }
    }

    public enum Algorithm: Sendable {
        case sha1, sha256, md5

        var evp: OpaquePointer? {
            switch self {
            case .sha1: EVP_sha1()
            case .sha256: EVP_sha256()
            case .md5: EVP_md5()
            }
        }

        public var length: Int {
            switch self {
            case .sha1: 20
            case .sha256: 32
            case .md5: 16
            }
        }
    }

    public static func hash(_ algorithm: Algorithm, _ message: some Sequence<UInt8>) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        let ok = withBytes(message) { data, count in EVP_Digest(data, count, &output, &length, algorithm.evp, nil) }
        // Fails only when libcrypto cannot allocate a context: nothing the caller could recover from.
        precondition(ok == 1, "OpenSSL's EVP_Digest failed")
        return Array(output.prefix(Int(length)))
    }

    public static func hmac(_ algorithm: Algorithm, _ message: some Sequence<UInt8>, key: Key) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        let result = withBytes(key.bytes) { keyBytes, keyCount in
            withBytes(message) { data, count in
                HMAC(algorithm.evp, keyBytes, Int32(keyCount), data, count, &output, &length)
            }
        }
        precondition(result != nil, "OpenSSL's HMAC failed")
        return Array(output.prefix(Int(length)))
    }

    /// Whether `code` is the HMAC of `message` under `key`, compared in constant time.
    public static func isValidHMAC(_ code: some Sequence<UInt8>, _ algorithm: Algorithm, authenticating message: some Sequence<UInt8>, key: Key) -> Bool {
        equalInConstantTime(Array(code), hmac(algorithm, message, key: key))
    }

    /// Equal bytes, in a time that depends on the length alone (OpenSSL's CRYPTO_memcmp).
    public static func equalInConstantTime(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        guard !a.isEmpty else { return true }
        return a.withUnsafeBytes { x in b.withUnsafeBytes { y in CRYPTO_memcmp(x.baseAddress, y.baseAddress, a.count) == 0 } }
    }

    /// PBKDF2 (RFC 8018) with HMAC-SHA256: SCRAM-SHA-256's salted password.
    public static func pbkdf2SHA256(password: some Sequence<UInt8>, salt: [UInt8], iterations: Int, length: Int = 32) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: length)
        let ok = withBytes(password) { p, pCount in
            withBytes(salt) { s, sCount in
                p.withMemoryRebound(to: CChar.self, capacity: max(pCount, 1)) { text in
                    PKCS5_PBKDF2_HMAC(text, Int32(pCount), s, Int32(sCount), Int32(clamping: iterations), EVP_sha256(), Int32(length), &output)
                }
            }
        }
        precondition(ok == 1, "OpenSSL's PKCS5_PBKDF2_HMAC failed")
        return output
    }

    /// `bytes` as a pointer that is never null, even for no bytes (OpenSSL refuses a null pointer
    /// with a zero length in places), and their count.
    private static func withBytes<R>(_ bytes: some Sequence<UInt8>, _ body: (UnsafePointer<UInt8>, Int) -> R) -> R {
        var array = Array(bytes)
        let count = array.count
        if array.isEmpty { array = [0] }
        return array.withUnsafeBufferPointer { body($0.baseAddress!, count) }
    }
}
