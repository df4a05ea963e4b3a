import Digests
import NIOCore

/// The server's side of the RTMP handshake: C0+C1 in, S0+S1+S2 out.
///
/// Two kinds of client exist. A plain one (OBS, librtmp) sends C1 with a zero version and takes
/// any S1; S2 echoes C1. A Flash-era one (Flash Player, FMLE, and ffmpeg's client) puts a
/// non-zero version in C1 and an HMAC-SHA256 digest at a position the bytes themselves give;
/// when that digest checks out, S1 carries the server's own digest and S2 is signed with a key
/// derived from the client's, as Flash Media Server answers (clients that play from a server
/// verify it). When it does not, the plain answer is given.
public enum RTMPHandshake {
    public static let packetSize = 1536

    static let sharedKeyTail: [UInt8] = [
        0xF0, 0xEE, 0xC2, 0x4A, 0x80, 0x68, 0xBE, 0xE8, 0x2E, 0x00, 0xD0, 0xD1, 0x02, 0x9E, 0x7E, 0x57,
        0x6E, 0xEC, 0x5D, 0x2D, 0x29, 0x80, 0x6F, 0xAB, 0x93, 0xB8, 0xE6, 0x36, 0xCF, 0xEB, 0x31, 0xAE,
    ]
    /// "Genuine Adobe Flash Player 001": what a client's C1 digest is keyed with.
    static let playerKey = Array("Genuine Adobe Flash Player 001".utf8)
    /// "Genuine Adobe Flash Media Server 001": the server's S1 digest key; with the tail, S2's.
    static let serverKey = Array("Genuine Adobe Flash Media Server 001".utf8)
    /// The version S1 announces in the digest handshake (Flash Media Server 3.5's, as servers send).
    static let serverVersion: [UInt8] = [0x04, 0x05, 0x00, 0x01]

    /// Where a digest sits in a 1536-byte packet under each scheme: the sum of four bytes at
    /// `base` chooses an offset in the 728 bytes after them.
    static func digestOffset(_ packet: [UInt8], scheme: Int) -> Int {
        let base = scheme == 0 ? 8 : 772
        let sum = packet[base..<base + 4].reduce(0) { $0 + Int($1) }
        return sum % 728 + base + 4
    }

    static func hmac(_ message: some Sequence<UInt8>, key: [UInt8]) -> [UInt8] {
        Array(Digest.hmac(.sha256, Array(message), key: Digest.Key(key)))
    }

    /// The packet without the 32 digest bytes at `offset`: what the digest is computed over.
    static func withoutDigest(_ packet: [UInt8], at offset: Int) -> [UInt8] {
        Array(packet[..<offset]) + Array(packet[(offset + 32)...])
    }

    /// The client's digest and its scheme, when C1 carries a valid one.
    static func clientDigest(_ c1: [UInt8]) -> (digest: [UInt8], scheme: Int)? {
        guard c1.count == packetSize, c1[4..<8].contains(where: { $0 != 0 }) else { return nil }
        for scheme in [0, 1] {
            let offset = digestOffset(c1, scheme: scheme)
            let digest = Array(c1[offset..<offset + 32])
            if hmac(withoutDigest(c1, at: offset), key: playerKey) == digest { return (digest, scheme) }
        }
        return nil
    }

    /// S0+S1+S2 for a client's C1.
    public static func answer(toC1 c1Buffer: ByteBuffer, random: () -> [UInt8] = randomBytes) -> ByteBuffer {
        let c1 = Array(c1Buffer.readableBytesView)
        var s1 = random()
        var s2: [UInt8]
        // S1's time is ours (zero will do); its version says which handshake this is.
        s1.replaceSubrange(0..<4, with: [0, 0, 0, 0])
        if let (clientDigest, scheme) = clientDigest(c1) {
            s1.replaceSubrange(4..<8, with: serverVersion)
            let offset = digestOffset(s1, scheme: scheme)
            s1.replaceSubrange(offset..<offset + 32, with: hmac(withoutDigest(s1, at: offset), key: serverKey))
            s2 = random()
            let signingKey = hmac(clientDigest, key: serverKey + sharedKeyTail)
            s2.replaceSubrange((packetSize - 32)..., with: hmac(s2[..<(packetSize - 32)], key: signingKey))
        } else {
            s1.replaceSubrange(4..<8, with: [0, 0, 0, 0])
            s2 = c1
        }
        var answer = ByteBuffer()
        answer.reserveCapacity(1 + 2 * packetSize)
        answer.writeInteger(UInt8(3))
        answer.writeBytes(s1)
        answer.writeBytes(s2)
        return answer
    }

    /// A packet's worth of random bytes, eight from each draw of the system generator.
    public static func randomBytes() -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        var bytes: [UInt8] = []
        bytes.reserveCapacity(packetSize)
        for _ in 0..<(packetSize / 8) {
            let word: UInt64 = generator.next()
            for shift in stride(from: 0, to: 64, by: 8) { bytes.append(UInt8(truncatingIfNeeded: word >> UInt64(shift))) }
        }
        return bytes
    }
}
