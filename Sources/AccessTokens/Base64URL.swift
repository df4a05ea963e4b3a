import Foundation

/// base64url without padding (RFC 4648 §5, as RFC 7515 §2 uses it), the one encoding both kinds of
/// token carry their signatures in.
public enum Base64URL {
    public static func encode(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// Strict: any character outside the alphabet, a length no encoding produces, or more than
    /// `maximumLength` characters is nil, checked before anything is decoded; and so is a text that
    /// is not the one encoding of its bytes (stray bits in the last character), so a signature has
    /// one spelling.
    public static func decode(_ text: Substring, maximumLength: Int = .max) -> Data? {
        guard text.utf8.count <= maximumLength, text.utf8.count % 4 != 1, text.utf8.allSatisfy({ byte in
            (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z")) || (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
                || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
        }) else { return nil }
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.utf8.count % 4 != 0 { base64 += "=" }
        guard let data = Data(base64Encoded: base64), encode(data) == text else { return nil }
        return data
    }
}
