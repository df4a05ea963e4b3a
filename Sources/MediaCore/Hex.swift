/// Bytes as lowercase hexadecimal, two digits each: MD5 answers in RTSP Digest, `avc1.64001f`
/// CODECS strings, SDP's `profile-level-id`.
public func lowercaseHex(_ bytes: some Sequence<UInt8>) -> String {
    let digits = Array("0123456789abcdef".utf8)
    var output: [UInt8] = []
    output.reserveCapacity(bytes.underestimatedCount * 2)
    for byte in bytes {
        output.append(digits[Int(byte >> 4)])
        output.append(digits[Int(byte & 0x0F)])
    }
    return String(decoding: output, as: UTF8.self)
}
