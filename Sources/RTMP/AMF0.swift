import NIOCore

/// An AMF0 value (Adobe's Action Message Format 0, as RTMP commands carry it).
public enum AMF0Value: Sendable, Equatable {
    case number(Double)
    case boolean(Bool)
    case string(String)
    /// Properties in the order they came (encoders care about none, but logs read better).
    case object([(String, AMF0Value)])
    case null
    case undefined
    case ecmaArray([(String, AMF0Value)])
    case strictArray([AMF0Value])
    case date(Double)

    public static func == (lhs: AMF0Value, rhs: AMF0Value) -> Bool {
        switch (lhs, rhs) {
        case let (.number(a), .number(b)), let (.date(a), .date(b)): a == b || (a.isNaN && b.isNaN)
        case let (.boolean(a), .boolean(b)): a == b
        case let (.string(a), .string(b)): a == b
        case let (.object(a), .object(b)), let (.ecmaArray(a), .ecmaArray(b)): a.elementsEqual(b) { $0.0 == $1.0 && $0.1 == $1.1 }
        case (.null, .null), (.undefined, .undefined): true
        case let (.strictArray(a), .strictArray(b)): a == b
        default: false
        }
    }

    /// The property `name` of an object or ECMA array.
    public subscript(name: String) -> AMF0Value? {
        switch self {
        case let .object(properties), let .ecmaArray(properties): properties.first { $0.0 == name }?.1
        default: nil
        }
    }

    public var string: String? {
        if case let .string(value) = self { return value }
        return nil
    }

    public var number: Double? {
        if case let .number(value) = self { return value }
        return nil
    }
}

/// Why AMF0 bytes cannot be read.
public enum AMF0Error: Error, Sendable, Equatable, CustomStringConvertible {
    case truncated
    case unknownMarker(UInt8)
    case tooDeep(limit: Int)
    case tooManyValues(limit: Int)
    case invalidUTF8

    public var description: String {
        switch self {
        case .truncated: "AMF0 value cut short"
        case let .unknownMarker(marker): "AMF0 type marker 0x\(String(marker, radix: 16)) is not supported"
        case let .tooDeep(limit): "AMF0 values nested deeper than \(limit)"
        case let .tooManyValues(limit): "more than \(limit) AMF0 values in one message"
        case .invalidUTF8: "an AMF0 string is not UTF-8"
        }
    }
}

/// Reads and writes AMF0. Reading is total: nesting and the number of values are bounded, every
/// length is checked against what is there, so a peer's bytes cannot trap or make it allocate
/// beyond the message they came in.
public enum AMF0 {
    public static let maximumDepth = 16
    public static let maximumValues = 4096

    /// Every value in `buffer`, in order (a command: its name, transaction id, arguments).
    public static func decodeAll(_ buffer: ByteBuffer) throws(AMF0Error) -> [AMF0Value] {
        var buffer = buffer
        var budget = maximumValues
        var values: [AMF0Value] = []
        while buffer.readableBytes > 0 {
            values.append(try decode(&buffer, depth: 0, budget: &budget))
        }
        return values
    }

    static func decode(_ buffer: inout ByteBuffer, depth: Int, budget: inout Int) throws(AMF0Error) -> AMF0Value {
        guard depth < maximumDepth else { throw .tooDeep(limit: maximumDepth) }
        guard budget > 0 else { throw .tooManyValues(limit: maximumValues) }
        budget -= 1
        guard let marker = buffer.readInteger(as: UInt8.self) else { throw .truncated }
        switch marker {
        case 0x00:
            guard let bits = buffer.readInteger(as: UInt64.self) else { throw .truncated }
            return .number(Double(bitPattern: bits))
        case 0x01:
            guard let byte = buffer.readInteger(as: UInt8.self) else { throw .truncated }
            return .boolean(byte != 0)
        case 0x02:
            return .string(try readString(&buffer, lengthBytes: 2))
        case 0x0C:
            return .string(try readString(&buffer, lengthBytes: 4))
        case 0x03:
            return .object(try readProperties(&buffer, depth: depth, budget: &budget))
        case 0x05:
            return .null
        case 0x06:
            return .undefined
        case 0x08:
            // An ECMA array's count is a hint only; the properties end with the object-end marker.
            guard buffer.readInteger(as: UInt32.self) != nil else { throw .truncated }
            return .ecmaArray(try readProperties(&buffer, depth: depth, budget: &budget))
        case 0x0A:
            guard let count = buffer.readInteger(as: UInt32.self) else { throw .truncated }
            // Each element takes at least a byte: a count beyond what is left is a lie.
            guard Int(count) <= buffer.readableBytes else { throw .truncated }
            var elements: [AMF0Value] = []
            for _ in 0..<count { elements.append(try decode(&buffer, depth: depth + 1, budget: &budget)) }
            return .strictArray(elements)
        case 0x0B:
            guard let bits = buffer.readInteger(as: UInt64.self), buffer.readInteger(as: Int16.self) != nil else { throw .truncated }
            return .date(Double(bitPattern: bits))
        default:
            throw .unknownMarker(marker)
        }
    }

    private static func readString(_ buffer: inout ByteBuffer, lengthBytes: Int) throws(AMF0Error) -> String {
        let length: Int
        if lengthBytes == 2 {
            guard let value = buffer.readInteger(as: UInt16.self) else { throw .truncated }
            length = Int(value)
        } else {
            guard let value = buffer.readInteger(as: UInt32.self) else { throw .truncated }
            length = Int(value)
        }
        guard let bytes = buffer.readBytes(length: length) else { throw .truncated }
        guard let text = String(validating: bytes, as: UTF8.self) else { throw .invalidUTF8 }
        return text
    }

    private static func readProperties(_ buffer: inout ByteBuffer, depth: Int, budget: inout Int) throws(AMF0Error) -> [(String, AMF0Value)] {
        var properties: [(String, AMF0Value)] = []
        while true {
            let name = try readString(&buffer, lengthBytes: 2)
            if name.isEmpty {
                // The object-end marker (0x09) after an empty name closes the object.
                guard let marker = buffer.readInteger(as: UInt8.self) else { throw .truncated }
                if marker == 0x09 { return properties }
                buffer.moveReaderIndex(to: buffer.readerIndex - 1)
            }
            properties.append((name, try decode(&buffer, depth: depth + 1, budget: &budget)))
        }
    }

    public static func encode(_ values: [AMF0Value]) -> ByteBuffer {
        var buffer = ByteBuffer()
        for value in values { write(value, to: &buffer) }
        return buffer
    }

    public static func write(_ value: AMF0Value, to buffer: inout ByteBuffer) {
        switch value {
        case let .number(number):
            buffer.writeInteger(UInt8(0x00))
            buffer.writeInteger(number.bitPattern)
        case let .boolean(flag):
            buffer.writeInteger(UInt8(0x01))
            buffer.writeInteger(UInt8(flag ? 1 : 0))
        case let .string(text):
            let bytes = Array(text.utf8)
            if bytes.count <= 0xFFFF {
                buffer.writeInteger(UInt8(0x02))
                buffer.writeInteger(UInt16(bytes.count))
            } else {
                buffer.writeInteger(UInt8(0x0C))
                buffer.writeInteger(UInt32(bytes.count))
            }
            buffer.writeBytes(bytes)
        case let .object(properties):
            buffer.writeInteger(UInt8(0x03))
            writeProperties(properties, to: &buffer)
        case .null:
            buffer.writeInteger(UInt8(0x05))
        case .undefined:
            buffer.writeInteger(UInt8(0x06))
        case let .ecmaArray(properties):
            buffer.writeInteger(UInt8(0x08))
            buffer.writeInteger(UInt32(properties.count))
            writeProperties(properties, to: &buffer)
        case let .strictArray(elements):
            buffer.writeInteger(UInt8(0x0A))
            buffer.writeInteger(UInt32(elements.count))
            for element in elements { write(element, to: &buffer) }
        case let .date(milliseconds):
            buffer.writeInteger(UInt8(0x0B))
            buffer.writeInteger(milliseconds.bitPattern)
            buffer.writeInteger(Int16(0))
        }
    }

    private static func writeProperties(_ properties: [(String, AMF0Value)], to buffer: inout ByteBuffer) {
        for (name, value) in properties {
            let bytes = Array(name.utf8.prefix(0xFFFF))
            buffer.writeInteger(UInt16(bytes.count))
            buffer.writeBytes(bytes)
            write(value, to: &buffer)
        }
        buffer.writeInteger(UInt16(0))
        buffer.writeInteger(UInt8(0x09))
    }
}
