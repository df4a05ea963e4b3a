import NIOCore

/// Why bytes on an RTSP connection cannot be read; the server answers 400/413/431 and closes.
public enum RTSPParseError: Error, Sendable, Equatable, CustomStringConvertible {
    case lineTooLong(limit: Int)
    case tooManyHeaders(limit: Int)
    case bodyTooLarge(length: Int, limit: Int)
    case malformedStartLine(String)
    case malformedHeader(String)
    case badContentLength(String)
    case unsupportedVersion(String)

    public var description: String {
        switch self {
        case let .lineTooLong(limit): "a line is longer than \(limit) bytes"
        case let .tooManyHeaders(limit): "more than \(limit) header fields"
        case let .bodyTooLarge(length, limit): "body of \(length) bytes exceeds the limit of \(limit)"
        case let .malformedStartLine(line): "malformed request or status line: \(Self.printable(line))"
        case let .malformedHeader(line): "malformed header line: \(Self.printable(line))"
        case let .badContentLength(value): "bad Content-Length: \(Self.printable(value))"
        case let .unsupportedVersion(version): "unsupported protocol version \(Self.printable(version))"
        }
    }

    /// A peer's bytes as they may appear in a log line or an answer: printable ASCII kept, anything
    /// else (control characters, terminal escapes, invalid UTF-8) written as `\u{…}`.
    static func printable(_ text: String) -> String {
        var result = ""
        for scalar in text.unicodeScalars {
            if scalar.value >= 0x20, scalar.value < 0x7F, scalar != "\\" {
                result.unicodeScalars.append(scalar)
            } else {
                result += "\\u{\(String(scalar.value, radix: 16))}"
            }
        }
        return result
    }

    /// The status a server answers with before closing the connection.
    public var status: Int {
        switch self {
        case .lineTooLong, .tooManyHeaders: 431
        case .bodyTooLarge: 413
        case .unsupportedVersion: 505
        default: 400
        }
    }
}

/// Incremental parser for an RTSP byte stream: requests, responses and `$`-interleaved frames.
/// Reads from the buffer's reader index; consumes only whole items; enforces size limits
/// before buffering, so a peer cannot make it hold more than `maximumLineLength` + `maximumBodyLength`.
public struct RTSPMessageParser: Sendable {
    public struct Limits: Sendable {
        public var maximumLineLength = 4096
        public var maximumHeaderCount = 64
        public var maximumBodyLength = 64 * 1024
        public init() {}
    }

    public let limits: Limits

    public init(limits: Limits = Limits()) {
        self.limits = limits
    }

    /// Returns the next complete item, or nil when more bytes are needed.
    public func parse(_ buffer: inout ByteBuffer) throws(RTSPParseError) -> RTSPInbound? {
        // Blank lines between messages are allowed (clients send CRLF keep-alives); skipped in a
        // loop, not by recursion, so a peer sending megabytes of them cannot exhaust the stack.
        while let byte = buffer.getInteger(at: buffer.readerIndex, as: UInt8.self), byte == UInt8(ascii: "\r") || byte == UInt8(ascii: "\n") {
            buffer.moveReaderIndex(forwardBy: 1)
        }
        guard let first = buffer.getInteger(at: buffer.readerIndex, as: UInt8.self) else { return nil }
        if first == UInt8(ascii: "$") {
            guard buffer.readableBytes >= 4,
                  let channel = buffer.getInteger(at: buffer.readerIndex + 1, as: UInt8.self),
                  let length = buffer.getInteger(at: buffer.readerIndex + 2, as: UInt16.self) else { return nil }
            guard buffer.readableBytes >= 4 + Int(length) else { return nil }
            buffer.moveReaderIndex(forwardBy: 4)
            guard let payload = buffer.readSlice(length: Int(length)) else { return nil }
            return .interleaved(channel: channel, payload: payload)
        }
        // Find the end of the header block without consuming anything.
        var lines: [String] = []
        var offset = buffer.readerIndex
        let end = buffer.writerIndex
        while true {
            guard let lineEnd = Self.findLineEnd(buffer, from: offset, to: end) else {
                if end - offset > limits.maximumLineLength { throw .lineTooLong(limit: limits.maximumLineLength) }
                return nil
            }
            let length = lineEnd.contentEnd - offset
            if length > limits.maximumLineLength { throw .lineTooLong(limit: limits.maximumLineLength) }
            let line = buffer.getString(at: offset, length: length) ?? ""
            offset = lineEnd.next
            if line.isEmpty { break }
            lines.append(line)
            if lines.count > limits.maximumHeaderCount + 1 { throw .tooManyHeaders(limit: limits.maximumHeaderCount) }
        }
        guard let startLine = lines.first else { throw .malformedStartLine("") }

        var headers = RTSPHeaders()
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { throw .malformedHeader(String(line.prefix(80))) }
            let name = line[..<colon].trimmed
            guard !name.isEmpty, !name.contains(" ") else { throw .malformedHeader(String(line.prefix(80))) }
            headers.add(name, line[line.index(after: colon)...].trimmed)
        }
        var bodyLength = 0
        if let value = headers["Content-Length"] {
            guard let length = Int(value), length >= 0 else { throw .badContentLength(value) }
            guard length <= limits.maximumBodyLength else { throw .bodyTooLarge(length: length, limit: limits.maximumBodyLength) }
            bodyLength = length
        }
        guard end - offset >= bodyLength else { return nil }

        let parts = startLine.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: true).map(String.init)
        let message: RTSPInbound
        if startLine.hasPrefix("RTSP/") {
            guard parts.count >= 2, let status = Int(parts[1]), (100...999).contains(status) else {
                throw .malformedStartLine(String(startLine.prefix(80)))
            }
            guard parts[0] == "RTSP/1.0" else { throw .unsupportedVersion(parts[0]) }
            let body = buffer.getBytes(at: offset, length: bodyLength) ?? []
            message = .response(RTSPResponse(status: status, reason: parts.count > 2 ? parts[2] : "", headers: headers, body: body))
        } else {
            guard parts.count == 3, parts[0].allSatisfy({ $0.isLetter || $0 == "_" }), !parts[1].isEmpty else {
                throw .malformedStartLine(String(startLine.prefix(80)))
            }
            guard parts[2] == "RTSP/1.0" else {
                if parts[2].hasPrefix("RTSP/") { throw .unsupportedVersion(parts[2]) }
                throw .malformedStartLine(String(startLine.prefix(80)))
            }
            let body = buffer.getBytes(at: offset, length: bodyLength) ?? []
            message = .request(RTSPRequest(method: parts[0].uppercased(), uri: parts[1], headers: headers, body: body))
        }
        buffer.moveReaderIndex(to: offset + bodyLength)
        return message
    }

    /// The end of the line starting at `from`: CRLF or a bare LF (lenient, as real clients vary).
    private static func findLineEnd(_ buffer: ByteBuffer, from: Int, to end: Int) -> (contentEnd: Int, next: Int)? {
        guard from < end else { return nil }
        let view = buffer.viewBytes(at: from, length: end - from)!
        guard let newline = view.firstIndex(of: UInt8(ascii: "\n")) else { return nil }
        var contentEnd = newline
        if contentEnd > from, buffer.getInteger(at: contentEnd - 1, as: UInt8.self) == UInt8(ascii: "\r") { contentEnd -= 1 }
        return (contentEnd, newline + 1)
    }
}
