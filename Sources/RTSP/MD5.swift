import Crypto

/// MD5 as RTSP Digest authentication (RFC 2617) needs it: lowercase hex of the UTF-8 bytes,
/// computed by swift-crypto. MD5 is broken for signatures; Digest still names it, and the nonce
/// it keys carries a server secret.
public enum MD5 {
    public static func hex(_ text: String) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var output: [UInt8] = []
        output.reserveCapacity(32)
        for byte in Insecure.MD5.hash(data: Array(text.utf8)) {
            output.append(digits[Int(byte >> 4)])
            output.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: output, as: UTF8.self)
    }
}

/// Whether two secrets (passwords, tokens, digest answers) are equal, in time that says nothing
/// about where they differ or how long either is: swift-crypto compares their SHA-256 digests in
/// constant time, and equal digests mean equal strings.
public func constantTimeEqual(_ a: String, _ b: String) -> Bool {
    SHA256.hash(data: Array(a.utf8)) == SHA256.hash(data: Array(b.utf8))
}
