import NIOCore

/// PostgreSQL's frontend/backend protocol (version 3.0) as bytes and values: what the fleet's
/// store says to the server and what it reads back. Pure, no sockets; `PostgresConnection` drives it.
///
/// The node speaks the protocol's small core itself (startup, authentication, simple and extended
/// queries with text parameters and text results, LISTEN/NOTIFY) instead of through postgres-nio,
/// whose dependency on swift-crypto built a second BoringSSL on every fresh clone.
enum PostgresFrontend {
    static let protocolVersion: Int32 = 196_608  // 3.0
    /// The SSLRequest code (protocol "version" 1234.5679), sent before the startup message.
    static let sslRequestCode: Int32 = 80_877_103

    static func sslRequest() -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.writeInteger(Int32(8))
        buffer.writeInteger(sslRequestCode)
        return buffer
    }

    static func startup(user: String, database: String) -> ByteBuffer {
        var body = ByteBuffer()
        body.writeInteger(protocolVersion)
        for (name, value) in [("user", user), ("database", database), ("application_name", "abr-worker"), ("client_encoding", "UTF8")] {
            body.writeNullTerminated(name)
            body.writeNullTerminated(value)
        }
        body.writeInteger(UInt8(0))
        var buffer = ByteBuffer()
        buffer.writeInteger(Int32(4 + body.readableBytes))
        buffer.writeBuffer(&body)
        return buffer
    }

    /// A cleartext or MD5 password, or (with `mechanism`) SASL's initial response.
    static func password(_ text: String) -> ByteBuffer {
        message("p") { $0.writeNullTerminated(text) }
    }

    static func saslInitialResponse(mechanism: String, data: [UInt8]) -> ByteBuffer {
        message("p") { body in
            body.writeNullTerminated(mechanism)
            body.writeInteger(Int32(data.count))
            body.writeBytes(data)
        }
    }

    static func saslResponse(_ data: [UInt8]) -> ByteBuffer {
        message("p") { $0.writeBytes(data) }
    }

    /// A simple query: one or more statements, no parameters.
    static func query(_ sql: String) -> ByteBuffer {
        message("Q") { $0.writeNullTerminated(sql) }
    }

    /// One statement with text parameters (`$1`, `$2`, …; nil is NULL), unnamed, its rows in
    /// text: Parse, Bind, Execute and Sync in one write, so one round trip.
    static func extendedQuery(_ sql: String, binds: [String?]) -> ByteBuffer {
        var buffer = message("P") { body in
            body.writeNullTerminated("")
            body.writeNullTerminated(sql)
            body.writeInteger(Int16(0))  // the server infers every parameter's type
        }
        var bind = message("B") { body in
            body.writeNullTerminated("")
            body.writeNullTerminated("")
            body.writeInteger(Int16(0))  // every parameter in text
            body.writeInteger(Int16(truncatingIfNeeded: binds.count))
            for value in binds {
                if let value {
                    body.writeInteger(Int32(value.utf8.count))
                    body.writeString(value)
                } else {
                    body.writeInteger(Int32(-1))
                }
            }
            body.writeInteger(Int16(0))  // every result column in text
        }
        var execute = message("E") { body in
            body.writeNullTerminated("")
            body.writeInteger(Int32(0))  // every row
        }
        var sync = message("S") { _ in }
        buffer.writeBuffer(&bind)
        buffer.writeBuffer(&execute)
        buffer.writeBuffer(&sync)
        return buffer
    }

    static func terminate() -> ByteBuffer { message("X") { _ in } }

    /// A typed message: its type byte, then its length (which counts itself) and body.
    private static func message(_ type: Character, _ writeBody: (inout ByteBuffer) -> Void) -> ByteBuffer {
        var body = ByteBuffer()
        writeBody(&body)
        var buffer = ByteBuffer()
        buffer.writeInteger(type.asciiValue!)
        buffer.writeInteger(Int32(4 + body.readableBytes))
        buffer.writeBuffer(&body)
        return buffer
    }
}

/// What the server says, as far as the store reads it; everything else is `.other`.
public enum PostgresBackendMessage: Sendable, Equatable {
    /// The answer to SSLRequest: one unframed byte, `S` (go on in TLS) or `N`.
    case sslResponse(accepted: Bool)
    case authentication(PostgresAuthenticationRequest)
    /// Ready for the next query; the transaction status is `I` (idle), `T` (in one) or `E` (in a failed one).
    case readyForQuery(transactionStatus: UInt8)
    /// A row, each column as text or NULL.
    case dataRow([String?])
    case commandComplete(tag: String)
    case error(PostgresServerError)
    case notification(channel: String, payload: String)
    /// ParameterStatus, BackendKeyData, NoticeResponse, ParseComplete, BindComplete, RowDescription, …
    case other(type: UInt8)
}

public enum PostgresAuthenticationRequest: Sendable, Equatable {
    case ok
    case cleartextPassword
    case md5Password(salt: [UInt8])
    case sasl(mechanisms: [String])
    case saslContinue([UInt8])
    case saslFinal([UInt8])
    /// Kerberos, GSSAPI, SSPI: nothing a node configured with a URL can answer.
    case unsupported(code: Int32)
}

/// An ErrorResponse's fields: severity, SQLSTATE, message, and detail or hint when the server gives them.
public struct PostgresServerError: Error, Sendable, Equatable, CustomStringConvertible {
    var fields: [UInt8: String]

    var severity: String { fields[UInt8(ascii: "V")] ?? fields[UInt8(ascii: "S")] ?? "ERROR" }
    /// The SQLSTATE, e.g. 23505 for a unique violation, 28P01 for a wrong password.
    var code: String { fields[UInt8(ascii: "C")] ?? "?????" }
    var message: String { fields[UInt8(ascii: "M")] ?? "(no message)" }

    public var description: String {
        var text = "PostgreSQL \(severity) \(code): \(message)"
        if let detail = fields[UInt8(ascii: "D")] { text += " (\(detail))" }
        if let hint = fields[UInt8(ascii: "H")] { text += "; hint: \(hint)" }
        return text
    }
}

/// What went wrong talking to PostgreSQL, said so an operator can act on it.
public enum PostgresFailure: Error, Sendable, CustomStringConvertible {
    case server(PostgresServerError)
    /// The server sent bytes that are not the protocol (where, and what).
    case protocolViolation(String)
    case authentication(String)
    case connection(String)
    /// A column whose text is not the type asked for.
    case decoding(String)

    public var description: String {
        switch self {
        case let .server(error): error.description
        case let .protocolViolation(what): "PostgreSQL protocol violation: \(what)"
        case let .authentication(what): "PostgreSQL authentication failed: \(what)"
        case let .connection(what): "PostgreSQL connection: \(what)"
        case let .decoding(what): "PostgreSQL result: \(what)"
        }
    }
}

/// Frames and parses the server's messages. Lengths are checked against the message before any
/// field is read; a message over `maximumMessageBytes` is refused, not buffered.
public struct PostgresBackendDecoder: ByteToMessageDecoder {
    public typealias InboundOut = PostgresBackendMessage
    /// Far above any row the store reads (a provision document is at most a few hundred KB).
    static let maximumMessageBytes = 32 << 20

    /// The next byte answers an SSLRequest rather than starting a message.
    var expectsSSLResponse: Bool

    public mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let message = try Self.next(from: &buffer, expectsSSLResponse: &expectsSSLResponse) else { return .needMoreData }
        context.fireChannelRead(wrapInboundOut(message))
        return .continue
    }

    /// The next whole message in `buffer` (consumed), or nil when it is not all there yet.
    static func next(from buffer: inout ByteBuffer, expectsSSLResponse: inout Bool) throws -> PostgresBackendMessage? {
        if expectsSSLResponse {
            guard let byte = buffer.readInteger(as: UInt8.self) else { return nil }
            expectsSSLResponse = false
            switch byte {
            case UInt8(ascii: "S"): return .sslResponse(accepted: true)
            case UInt8(ascii: "N"): return .sslResponse(accepted: false)
            default: throw PostgresFailure.protocolViolation("the answer to SSLRequest is byte \(byte), not S or N")
            }
        }
        guard let type = buffer.getInteger(at: buffer.readerIndex, as: UInt8.self),
              let length = buffer.getInteger(at: buffer.readerIndex + 1, as: Int32.self) else { return nil }
        guard length >= 4, Int(length) <= maximumMessageBytes else {
            throw PostgresFailure.protocolViolation("message \(printable(type)) declares \(length) bytes (4 to \(maximumMessageBytes) allowed)")
        }
        guard buffer.readableBytes >= 1 + Int(length) else { return nil }
        buffer.moveReaderIndex(forwardBy: 5)
        var body = buffer.readSlice(length: Int(length) - 4)!
        return try parse(type: type, body: &body)
    }

    static func parse(type: UInt8, body: inout ByteBuffer) throws -> PostgresBackendMessage {
        func truncated() -> PostgresFailure { .protocolViolation("message \(printable(type)) is truncated") }
        switch type {
        case UInt8(ascii: "R"):
            guard let code = body.readInteger(as: Int32.self) else { throw truncated() }
            switch code {
            case 0: return .authentication(.ok)
            case 3: return .authentication(.cleartextPassword)
            case 5:
                guard let salt = body.readBytes(length: 4) else { throw truncated() }
                return .authentication(.md5Password(salt: salt))
            case 10:
                var mechanisms: [String] = []
                while let name = body.readNullTerminatedString(), !name.isEmpty, mechanisms.count < 16 { mechanisms.append(name) }
                return .authentication(.sasl(mechanisms: mechanisms))
            case 11: return .authentication(.saslContinue(body.readBytes(length: body.readableBytes) ?? []))
            case 12: return .authentication(.saslFinal(body.readBytes(length: body.readableBytes) ?? []))
            default: return .authentication(.unsupported(code: code))
            }
        case UInt8(ascii: "Z"):
            guard let status = body.readInteger(as: UInt8.self) else { throw truncated() }
            return .readyForQuery(transactionStatus: status)
        case UInt8(ascii: "D"):
            guard let count = body.readInteger(as: Int16.self), count >= 0 else { throw truncated() }
            var columns: [String?] = []
            columns.reserveCapacity(Int(count))
            for _ in 0..<count {
                guard let length = body.readInteger(as: Int32.self) else { throw truncated() }
                if length < 0 {
                    columns.append(nil)
                } else {
                    guard let text = body.readString(length: Int(length)) else { throw truncated() }
                    columns.append(text)
                }
            }
            return .dataRow(columns)
        case UInt8(ascii: "C"):
            return .commandComplete(tag: body.readNullTerminatedString() ?? "")
        case UInt8(ascii: "E"):
            var fields: [UInt8: String] = [:]
            while let code = body.readInteger(as: UInt8.self), code != 0 {
                guard let value = body.readNullTerminatedString() else { throw truncated() }
                fields[code] = value
            }
            return .error(PostgresServerError(fields: fields))
        case UInt8(ascii: "A"):
            guard body.readInteger(as: Int32.self) != nil, let channel = body.readNullTerminatedString(),
                  let payload = body.readNullTerminatedString() else { throw truncated() }
            return .notification(channel: channel, payload: payload)
        default:
            return .other(type: type)
        }
    }

    /// Every whole message in `bytes` (how many), or the refusal that stopped it: the fuzz target's door.
    public static func decodeAll(_ bytes: [UInt8], expectingSSLResponse: Bool) -> Result<Int, any Error> {
        var buffer = ByteBuffer(bytes: bytes)
        var expectsSSLResponse = expectingSSLResponse
        var count = 0
        do {
            while try next(from: &buffer, expectsSSLResponse: &expectsSSLResponse) != nil { count += 1 }
            return .success(count)
        } catch {
            return .failure(error)
        }
    }

    static func printable(_ type: UInt8) -> String {
        (0x21..<0x7F).contains(type) ? "'\(Character(Unicode.Scalar(type)))'" : "byte \(type)"
    }
}

extension ByteBuffer {
    mutating func writeNullTerminated(_ text: String) {
        writeString(text)
        writeInteger(UInt8(0))
    }

    /// The text up to the next NUL (consumed with it), or nil when there is none.
    mutating func readNullTerminatedString() -> String? {
        guard let end = readableBytesView.firstIndex(of: 0) else { return nil }
        let text = readString(length: end - readerIndex)
        moveReaderIndex(forwardBy: 1)
        return text
    }
}

/// A statement and its parameters, written as interpolation: `"… WHERE id = \(id)"` sends `$1`
/// and binds `id`'s text, so values never become SQL. `\(unescaped:)` inserts SQL text itself.
struct PostgresQuery: ExpressibleByStringInterpolation, Sendable {
    var sql: String
    var binds: [String?]

    init(unsafeSQL sql: String) {
        self.sql = sql
        binds = []
    }

    init(stringLiteral value: String) { self.init(unsafeSQL: value) }

    init(stringInterpolation: Interpolation) {
        sql = stringInterpolation.sql
        binds = stringInterpolation.binds
    }

    struct Interpolation: StringInterpolationProtocol {
        var sql = ""
        var binds: [String?] = []

        init(literalCapacity: Int, interpolationCount: Int) { sql.reserveCapacity(literalCapacity + 4 * interpolationCount) }

        mutating func appendLiteral(_ literal: String) { sql += literal }

        mutating func appendInterpolation(_ value: String?) { bind(value) }
        mutating func appendInterpolation(_ value: Int) { bind(String(value)) }
        mutating func appendInterpolation(_ value: Double) { bind(value.isFinite ? "\(value)" : value.isNaN ? "NaN" : value > 0 ? "Infinity" : "-Infinity") }
        /// A text array (`= ANY(\(values))`), as PostgreSQL's array literal.
        mutating func appendInterpolation(_ values: [String]) {
            let elements = values.map { "\"" + $0.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\"" }
            bind("{" + elements.joined(separator: ",") + "}")
            sql += "::text[]"
        }
        mutating func appendInterpolation(unescaped text: String) { sql += text }

        private mutating func bind(_ value: String?) {
            binds.append(value)
            sql += "$\(binds.count)"
        }
    }
}

/// A result row: its columns in text, read by position with the type the query gave them.
struct PostgresRow: Sendable {
    var columns: [String?]

    func text(_ index: Int) throws -> String {
        guard let value = try optionalText(index) else { throw PostgresFailure.decoding("column \(index + 1) is NULL, not text") }
        return value
    }

    func optionalText(_ index: Int) throws -> String? {
        guard columns.indices.contains(index) else { throw PostgresFailure.decoding("no column \(index + 1) in a row of \(columns.count)") }
        return columns[index]
    }

    func double(_ index: Int) throws -> Double {
        let value = try text(index)
        guard let number = Double(value) else { throw PostgresFailure.decoding("column \(index + 1) is \(value.prefix(40)), not a number") }
        return number
    }
}
