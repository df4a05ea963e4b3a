import CDTLS
import CSRTP
#if canImport(Glibc)
import Glibc
#endif

/// One direction of SRTP and SRTCP for one viewer (libsrtp2): the node protects what it sends
/// with the server's key, and unprotects what the browser sends with the client's. Replays and
/// forgeries are refused by libsrtp's authentication and replay window.
// @unchecked Sendable: not thread-safe itself; its owner (a viewer) uses it under its lock only.
public final class SRTPSession: @unchecked Sendable {
    public enum Direction { case outbound, inbound }

    public enum Failure: Error, Equatable, CustomStringConvertible {
        case setup(Int32)
        case refused(Int32)

        public var description: String {
            switch self {
            case let .setup(code): "SRTP setup failed (libsrtp error \(code))"
            case let .refused(code):
                switch code {
                case 7: "SRTP: authentication failed (forged or damaged packet)"
                case 9, 10: "SRTP: replayed packet"
                default: "SRTP: packet refused (libsrtp error \(code))"
                }
            }
        }
    }

    private static let initialized = Int32(bitPattern: srtp_init().rawValue)

    /// Whose ciphers libsrtp2 uses: OpenSSL's (AES-GCM, AES-ICM and HMAC-SHA1), put in its crypto
    /// kernel once they passed libsrtp's self-tests, or libsrtp2's own (Debian's is NSS, some 2.5 to
    /// 3 times dearer per packet). Decided once, before the first session. `ABR_SRTP_CIPHERS=libsrtp2`
    /// keeps libsrtp2's own, for the benchmark to compare the two.
    public static let cipherProvider: String = {
        guard initialized == 0 else { return "none (libsrtp2 did not start)" }
        if let choice = getenv("ABR_SRTP_CIPHERS"), String(cString: choice) == "libsrtp2" { return "libsrtp2's own" }
        // Each replacement stands alone: one that failed its self-test leaves libsrtp2's own in place.
        let gcm = abr_srtp_use_openssl_gcm() == 0, counterModeAndHMAC = abr_srtp_use_openssl_icm_and_hmac() == 0
        switch (gcm, counterModeAndHMAC) {
        case (true, true): return "OpenSSL"
        case (true, false): return "OpenSSL's AES-GCM, libsrtp2's own AES-ICM and HMAC-SHA1"
        case (false, true): return "OpenSSL's AES-ICM and HMAC-SHA1, libsrtp2's own AES-GCM"
        case (false, false): return "libsrtp2's own"
        }
    }()
    private var session: srtp_t?

    /// `keyAndSalt` from `SRTPKeys.keyAndSalt(ofClient:)`: the server's for outbound, the
    /// client's for inbound.
    public init(profile: SRTPKeys.Profile, keyAndSalt: [UInt8], direction: Direction) throws(Failure) {
        guard Self.initialized == 0 else { throw .setup(Self.initialized) }
        _ = Self.cipherProvider
        var policy = srtp_policy_t()
        switch profile {
        case .aes128CmSha1_80:
            // libsrtp's defaults are AES_CM_128_HMAC_SHA1_80 (the header's named setter is a macro).
            srtp_crypto_policy_set_rtp_default(&policy.rtp)
            srtp_crypto_policy_set_rtcp_default(&policy.rtcp)
        case .aeadAes128Gcm:
            srtp_crypto_policy_set_aes_gcm_128_16_auth(&policy.rtp)
            srtp_crypto_policy_set_aes_gcm_128_16_auth(&policy.rtcp)
        }
        policy.ssrc.type = direction == .outbound ? ssrc_any_outbound : ssrc_any_inbound
        // Retransmissions of a packet (NACK answered without RTX) go out with the same sequence.
        policy.allow_repeat_tx = 1
        policy.window_size = 1024
        var key = keyAndSalt
        var created: srtp_t?
        let status = key.withUnsafeMutableBufferPointer { buffer -> srtp_err_status_t in
            policy.key = buffer.baseAddress
            return srtp_create(&created, &policy)
        }
        guard status == srtp_err_status_ok, let created else { throw .setup(Int32(bitPattern: status.rawValue)) }
        session = created
    }

    deinit { if let session { srtp_dealloc(session) } }

    /// An RTP packet made SRTP (the payload encrypted, the tag appended).
    public func protect(rtp packet: [UInt8]) throws(Failure) -> [UInt8] { try run(packet, grow: true) { srtp_protect($0, $1, $2) } }
    public func protect(rtcp packet: [UInt8]) throws(Failure) -> [UInt8] { try run(packet, grow: true) { srtp_protect_rtcp($0, $1, $2) } }
    public func unprotect(rtp packet: [UInt8]) throws(Failure) -> [UInt8] { try run(packet, grow: false) { srtp_unprotect($0, $1, $2) } }
    public func unprotect(rtcp packet: [UInt8]) throws(Failure) -> [UInt8] { try run(packet, grow: false) { srtp_unprotect_rtcp($0, $1, $2) } }

    /// Room an RTP packet needs beyond its own bytes to be protected in place.
    public static let trailerRoom = Int(SRTP_MAX_TRAILER_LEN) + 4

    /// Protects the RTP packet of `length` bytes at the start of `buffer`, in place, and returns
    /// the protected length. `buffer` has `trailerRoom` bytes beyond the packet: a send buffer
    /// shared by a batch of packets, so each is copied once, into it.
    public func protect(rtpInPlace buffer: UnsafeMutableRawBufferPointer, length: Int) throws(Failure) -> Int {
        precondition(buffer.count >= length + Self.trailerRoom, "no room for SRTP's trailer")
        var length = Int32(length)
        let status = srtp_protect(session, buffer.baseAddress, &length)
        guard status == srtp_err_status_ok else { throw .refused(Int32(bitPattern: status.rawValue)) }
        return Int(length)
    }

    private func run(_ packet: [UInt8], grow: Bool,
                     _ operation: (srtp_t?, UnsafeMutableRawPointer?, UnsafeMutablePointer<Int32>) -> srtp_err_status_t) throws(Failure) -> [UInt8] {
        var buffer = packet
        if grow { buffer += [UInt8](repeating: 0, count: Self.trailerRoom) }
        var length = Int32(packet.count)
        let status = buffer.withUnsafeMutableBytes { operation(session, $0.baseAddress, &length) }
        guard status == srtp_err_status_ok else { throw .refused(Int32(bitPattern: status.rawValue)) }
        return Array(buffer[0..<Int(length)])
    }
}
