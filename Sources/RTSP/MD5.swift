import Digests
import MediaCore

/// MD5 as RTSP Digest authentication (RFC 2617) needs it: lowercase hex of the UTF-8 bytes,
/// computed by OpenSSL (Digests). MD5 is broken for signatures; Digest still names it, and the nonce
/// it keys carries a server secret.
public enum MD5 {
    public static func hex(_ text: String) -> String {
        lowercaseHex(Digest.hash(.md5, Array(text.utf8)))
    }
}
