import ExtrasBase64

extension Base64 {
    /// Decodes base64 as senders really write it in SDP and `Authorization` headers: the standard
    /// or the URL alphabet, with or without padding (some encoders drop the `=` of
    /// `sprop-parameter-sets`). nil for anything else.
    public static func decodeLenient(_ text: some StringProtocol) -> [UInt8]? {
        let bytes = Array(text.utf8)
        let usesURLAlphabet = bytes.contains { $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") }
        var options: DecodingOptions = [.omitPaddingCharacter]
        if usesURLAlphabet { options.insert(.base64UrlAlphabet) }
        return try? decode(bytes: bytes, options: options)
    }
}
