import Digests

/// A STUN message (RFC 8489) as ICE-lite needs it: binding requests from a browser, the node's
/// success and error responses. Parsing takes untrusted bytes and says what is wrong and where;
/// `encoded` writes MESSAGE-INTEGRITY (HMAC-SHA1 over the message so far, with the header's
/// length covering it) and FINGERPRINT (CRC-32 XOR 0x5354554E) as RFC 8489 §14.5 and §14.7 say.
public struct STUNMessage: Sendable, Equatable {
    public static let magicCookie: UInt32 = 0x2112_A442
    public static let headerSize = 20
    /// Larger than any binding request a browser sends (a few hundred bytes), and the most the
    /// node reads of one datagram's STUN.
    public static let maximumSize = 1500

    public enum Class: UInt16, Sendable {
        case request = 0x0000, indication = 0x0010, successResponse = 0x0100, errorResponse = 0x0110
    }

    /// The STUN methods ICE uses; others are read (and refused by the caller) by their number.
    public static let bindingMethod: UInt16 = 0x001

    public enum AttributeType {
        public static let mappedAddress: UInt16 = 0x0001
        public static let username: UInt16 = 0x0006
        public static let messageIntegrity: UInt16 = 0x0008
        public static let errorCode: UInt16 = 0x0009
        public static let unknownAttributes: UInt16 = 0x000A
        public static let xorMappedAddress: UInt16 = 0x0020
        public static let priority: UInt16 = 0x0024
        public static let useCandidate: UInt16 = 0x0025
        public static let fingerprint: UInt16 = 0x8028
        public static let iceControlled: UInt16 = 0x8029
        public static let iceControlling: UInt16 = 0x802A
    }

    public struct Attribute: Sendable, Equatable {
        public var type: UInt16
        public var value: [UInt8]
        public init(type: UInt16, value: [UInt8]) {
            self.type = type
            self.value = value
        }
    }

    public var messageClass: Class
    public var method: UInt16
    /// 12 bytes, chosen by whoever sent the request.
    public var transactionID: [UInt8]
    /// In wire order; MESSAGE-INTEGRITY and FINGERPRINT are not kept here (see `encoded`).
    public var attributes: [Attribute]

    public init(messageClass: Class, method: UInt16, transactionID: [UInt8], attributes: [Attribute] = []) {
        self.messageClass = messageClass
        self.method = method
        self.transactionID = transactionID
        self.attributes = attributes
    }

    public func attribute(_ type: UInt16) -> [UInt8]? { attributes.first { $0.type == type }?.value }

    /// USERNAME as text (`<node's ufrag>:<peer's ufrag>` in a request to the node).
    public var username: String? { attribute(AttributeType.username).map { String(decoding: $0, as: UTF8.self) } }

    /// RFC 7983: a datagram whose first byte is 0–3 is STUN (DTLS is 20–63, RTP and RTCP 128–191).
    public static func mightBeSTUN(_ first: UInt8) -> Bool { first <= 3 }
}

/// What is wrong with a datagram that claimed to be STUN, with the byte offset where it went wrong.
public enum STUNError: Error, Equatable, CustomStringConvertible {
    case tooShort(bytes: Int)
    case tooLong(bytes: Int, limit: Int)
    case notSTUN(firstByte: UInt8)
    case badMagicCookie(UInt32)
    case lengthMismatch(declared: Int, actual: Int)
    case truncatedAttribute(type: UInt16, offset: Int)
    case attributeAfterFingerprint(type: UInt16, offset: Int)
    case badFingerprint
    case badIntegrity
    case missingIntegrity

    public var description: String {
        switch self {
        case let .tooShort(bytes): "STUN: \(bytes) bytes, shorter than the 20-byte header"
        case let .tooLong(bytes, limit): "STUN: \(bytes) bytes, over the limit of \(limit)"
        case let .notSTUN(first): "STUN: first byte 0x\(String(first, radix: 16)) has a top bit set (not a STUN message)"
        case let .badMagicCookie(value): "STUN: magic cookie 0x\(String(value, radix: 16)) at offset 4, expected 0x2112a442"
        case let .lengthMismatch(declared, actual): "STUN: header says \(declared) bytes of attributes, the datagram has \(actual)"
        case let .truncatedAttribute(type, offset): "STUN: attribute 0x\(String(type, radix: 16)) at offset \(offset) runs past the message"
        case let .attributeAfterFingerprint(type, offset): "STUN: attribute 0x\(String(type, radix: 16)) at offset \(offset) follows FINGERPRINT"
        case .badFingerprint: "STUN: FINGERPRINT does not match the message"
        case .badIntegrity: "STUN: MESSAGE-INTEGRITY does not match (wrong password, or the message was altered)"
        case .missingIntegrity: "STUN: no MESSAGE-INTEGRITY"
        }
    }
}

extension STUNMessage {
    /// A parsed datagram and where its integrity attribute began, so the integrity can be
    /// checked against a key the caller picks from USERNAME.
    public struct Received: Sendable {
        public var message: STUNMessage
        /// The attribute's offset in the datagram (nil: none).
        public var integrityOffset: Int?
        public var integrity: [UInt8]?
        let bytes: [UInt8]

        /// RFC 8489 §14.5: HMAC-SHA1 over the message up to the attribute, with the header's
        /// length as if the attribute ended the message. Compared in constant time.
        public func hasValidIntegrity(key: [UInt8]) -> Bool {
            guard let offset = integrityOffset, let integrity else { return false }
            let expected = STUNMessage.integrity(of: bytes[0..<offset], lengthThroughIntegrity: offset + 24 - STUNMessage.headerSize, key: key)
            guard expected.count == integrity.count else { return false }
            var difference: UInt8 = 0
            for (a, b) in zip(expected, integrity) { difference |= a ^ b }
            return difference == 0
        }
    }

    /// Parses one datagram. A FINGERPRINT, when present, must be right; what follows it is an error.
    public static func parse(_ datagram: [UInt8]) throws(STUNError) -> Received {
        guard datagram.count >= headerSize else { throw .tooShort(bytes: datagram.count) }
        guard datagram.count <= maximumSize else { throw .tooLong(bytes: datagram.count, limit: maximumSize) }
        guard mightBeSTUN(datagram[0]) else { throw .notSTUN(firstByte: datagram[0]) }
        let type = UInt16(datagram[0]) << 8 | UInt16(datagram[1])
        let length = Int(UInt16(datagram[2]) << 8 | UInt16(datagram[3]))
        let cookie = readUInt32(datagram, at: 4)
        guard cookie == magicCookie else { throw .badMagicCookie(cookie) }
        guard length == datagram.count - headerSize, length % 4 == 0 else {
            throw .lengthMismatch(declared: length, actual: datagram.count - headerSize)
        }
        // The class is bits C1 (0x0100) and C0 (0x0010); the method the other twelve.
        let messageClass = Class(rawValue: type & 0x0110)!
        let method = (type & 0x000F) | ((type & 0x00E0) >> 1) | ((type & 0x3E00) >> 2)
        var attributes: [Attribute] = []
        var integrityOffset: Int?
        var integrity: [UInt8]?
        var offset = headerSize
        var sawFingerprint = false
        while offset < datagram.count {
            guard offset + 4 <= datagram.count else { throw .truncatedAttribute(type: 0, offset: offset) }
            let attributeType = UInt16(datagram[offset]) << 8 | UInt16(datagram[offset + 1])
            let valueLength = Int(UInt16(datagram[offset + 2]) << 8 | UInt16(datagram[offset + 3]))
            let padded = (valueLength + 3) & ~3
            guard offset + 4 + padded <= datagram.count else { throw .truncatedAttribute(type: attributeType, offset: offset) }
            guard !sawFingerprint else { throw .attributeAfterFingerprint(type: attributeType, offset: offset) }
            let value = Array(datagram[(offset + 4)..<(offset + 4 + valueLength)])
            switch attributeType {
            case AttributeType.messageIntegrity:
                guard valueLength == 20 else { throw .truncatedAttribute(type: attributeType, offset: offset) }
                // Only the first counts; anything after it but FINGERPRINT is ignored (RFC 8489 §14.5).
                if integrityOffset == nil {
                    integrityOffset = offset
                    integrity = value
                }
            case AttributeType.fingerprint:
                guard valueLength == 4 else { throw .truncatedAttribute(type: attributeType, offset: offset) }
                let expected = crc32(datagram[0..<offset]) ^ 0x5354_554E
                guard readUInt32(value, at: 0) == expected else { throw .badFingerprint }
                sawFingerprint = true
            default:
                if integrityOffset == nil { attributes.append(Attribute(type: attributeType, value: value)) }
            }
            offset += 4 + padded
        }
        let message = STUNMessage(messageClass: messageClass, method: method, transactionID: Array(datagram[8..<20]), attributes: attributes)
        return Received(message: message, integrityOffset: integrityOffset, integrity: integrity, bytes: datagram)
    }

    /// The message on the wire, with MESSAGE-INTEGRITY under `integrityKey` and a FINGERPRINT.
    public func encoded(integrityKey: [UInt8]?, fingerprint: Bool = true) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(128)
        let type = (method & 0x000F) | ((method & 0x0070) << 1) | ((method & 0x0F80) << 2) | messageClass.rawValue
        Self.append(UInt16(type), to: &bytes)
        Self.append(UInt16(0), to: &bytes)
        Self.append(Self.magicCookie, to: &bytes)
        bytes += transactionID.prefix(12)
        bytes += [UInt8](repeating: 0, count: max(0, 12 - transactionID.count))
        for attribute in attributes {
            Self.append(attribute.type, to: &bytes)
            Self.append(UInt16(attribute.value.count), to: &bytes)
            bytes += attribute.value
            bytes += [UInt8](repeating: 0, count: (4 - attribute.value.count % 4) % 4)
        }
        if let integrityKey {
            let mac = Self.integrity(of: bytes[...], lengthThroughIntegrity: bytes.count + 24 - Self.headerSize, key: integrityKey)
            Self.append(AttributeType.messageIntegrity, to: &bytes)
            Self.append(UInt16(20), to: &bytes)
            bytes += mac
        }
        if fingerprint {
            Self.setLength(bytes.count + 8 - Self.headerSize, in: &bytes)
            let crc = Self.crc32(bytes[...]) ^ 0x5354_554E
            Self.append(AttributeType.fingerprint, to: &bytes)
            Self.append(UInt16(4), to: &bytes)
            Self.append(crc, to: &bytes)
        }
        Self.setLength(bytes.count - Self.headerSize, in: &bytes)
        return bytes
    }

    /// XOR-MAPPED-ADDRESS for an IPv4 or IPv6 address (`address`: 4 or 16 bytes).
    public static func xorMappedAddress(address: [UInt8], port: UInt16, transactionID: [UInt8]) -> Attribute {
        var value: [UInt8] = [0, address.count == 16 ? 0x02 : 0x01]
        append(port ^ UInt16(magicCookie >> 16), to: &value)
        var mask: [UInt8] = [0x21, 0x12, 0xA4, 0x42]
        if address.count == 16 { mask += transactionID.prefix(12) }
        value += zip(address, mask).map { $0 ^ $1 }
        return Attribute(type: AttributeType.xorMappedAddress, value: value)
    }

    static func integrity(of prefix: ArraySlice<UInt8>, lengthThroughIntegrity: Int, key: [UInt8]) -> [UInt8] {
        var covered = Array(prefix)
        setLength(lengthThroughIntegrity, in: &covered)
        return Array(Digest.hmac(.sha1, covered, key: Digest.Key(key)))
    }

    private static func setLength(_ length: Int, in bytes: inout [UInt8]) {
        bytes[2] = UInt8(truncatingIfNeeded: length >> 8)
        bytes[3] = UInt8(truncatingIfNeeded: length)
    }

    static func append(_ value: UInt16, to bytes: inout [UInt8]) {
        bytes.append(UInt8(value >> 8))
        bytes.append(UInt8(value & 0xFF))
    }

    static func append(_ value: UInt32, to bytes: inout [UInt8]) {
        for shift in stride(from: 24, through: 0, by: -8) { bytes.append(UInt8(truncatingIfNeeded: value >> UInt32(shift))) }
    }

    static func readUInt32(_ bytes: [UInt8], at offset: Int) -> UInt32 {
        UInt32(bytes[offset]) << 24 | UInt32(bytes[offset + 1]) << 16 | UInt32(bytes[offset + 2]) << 8 | UInt32(bytes[offset + 3])
    }

    private static let crcTable: [UInt32] = (0..<256).map { index in
        var crc = UInt32(index)
        for _ in 0..<8 { crc = crc & 1 == 1 ? 0xEDB8_8320 ^ (crc >> 1) : crc >> 1 }
        return crc
    }

    /// CRC-32 as zlib computes it (reflected, polynomial 0x04C11DB7), which FINGERPRINT uses.
    static func crc32(_ bytes: ArraySlice<UInt8>) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes { crc = crcTable[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8) }
        return crc ^ 0xFFFF_FFFF
    }
}
