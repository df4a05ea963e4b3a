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
///
/// The work per byte is constant: a header block that arrives a byte at a time is scanned once,
/// not again from its start on every read. The parser keeps where it got to, relative to the
/// reader index, so between calls the caller may only append bytes (or discard read ones).
public struct RTSPMessageParser: Sendable {
    public struct Limits: Sendable {
        public var maximumLineLength = 4096
        public var maximumHeaderCount = 64
        public var maximumBodyLength = 64 * 1024
        public init() {}
    }

    public let limits: Limits

    /// A message whose header block is still arriving, or whose body is.
    private struct Partial: Sendable {
        /// Complete lines so far; the start line first.
        var lines: [String] = []
        /// Bytes after the reader index taken by those lines.
        var scanned = 0
        /// Bytes of the current, unfinished line already searched for its end.
        var searched = 0
        /// The header block is complete: the message without its body, and where the body starts.
        var head: (message: RTSPInbound, bodyStart: Int, bodyLength: Int)?
    }

    private var partial = Partial()
    /// Bytes searched for line ends so far: what parsing costs, for tests that it stays linear.
    public private(set) var bytesExamined = 0

    public init(limits: Limits = Limits()) {
        self.limits = limits
    }

    /// Returns the next complete item, or nil when more bytes are needed.
    public mutating func parse(_ buffer: inout ByteBuffer) throws(RTSPParseError) -> RTSPInbound? {
        if partial.scanned > buffer.readableBytes { partial = Partial() }  // not the buffer we were reading: start over
        if partial.lines.isEmpty, partial.scanned == 0 {
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
        }
        if partial.head == nil {
            guard try scanHeaderBlock(buffer) else { return nil }
        }
        guard let head = partial.head else { return nil }
        guard buffer.readableBytes - head.bodyStart >= head.bodyLength else { return nil }
        let body = buffer.getBytes(at: buffer.readerIndex + head.bodyStart, length: head.bodyLength) ?? []
        buffer.moveReaderIndex(forwardBy: head.bodyStart + head.bodyLength)
        partial = Partial()
        switch head.message {
        case var .request(request):
            request.body = body
            return .request(request)
        case var .response(response):
            response.body = body
            return .response(response)
        case .interleaved:
            return head.message
        }
    }

    /// Reads lines from where the last call stopped; true once the header block is complete
    /// (`partial.head` set), false when more bytes are needed.
    private mutating func scanHeaderBlock(_ buffer: ByteBuffer) throws(RTSPParseError) -> Bool {
        let base = buffer.readerIndex
        let end = buffer.writerIndex
        while true {
            let lineStart = base + partial.scanned
            let searchFrom = lineStart + partial.searched
            guard let lineEnd = Self.findLineEnd(buffer, lineStart: lineStart, searchFrom: searchFrom, to: end) else {
                bytesExamined += max(0, end - searchFrom)
                partial.searched = end - lineStart
                if end - lineStart > limits.maximumLineLength { throw .lineTooLong(limit: limits.maximumLineLength) }
                return false
            }
            bytesExamined += lineEnd.next - searchFrom
            partial.searched = 0
            let length = lineEnd.contentEnd - lineStart
            if length > limits.maximumLineLength { throw .lineTooLong(limit: limits.maximumLineLength) }
            let line = buffer.getString(at: lineStart, length: length) ?? ""
            partial.scanned = lineEnd.next - base
            if line.isEmpty { break }
            // A bare CR or another control character inside a line would reach answers and logs.
            if line.unicodeScalars.contains(where: { ($0.value < 0x20 && $0 != "\t") || $0.value == 0x7F }) {
                if partial.lines.isEmpty { throw .malformedStartLine(String(line.prefix(80))) }
                throw .malformedHeader(String(line.prefix(80)))
            }
            partial.lines.append(line)
            if partial.lines.count > limits.maximumHeaderCount + 1 { throw .tooManyHeaders(limit: limits.maximumHeaderCount) }
        }
        let lines = partial.lines
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

        let parts = startLine.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: true).map(String.init)
        let message: RTSPInbound
        if startLine.hasPrefix("RTSP/") {
            guard parts.count >= 2, let status = Int(parts[1]), (100...999).contains(status) else {
                throw .malformedStartLine(String(startLine.prefix(80)))
            }
            guard parts[0] == "RTSP/1.0" else { throw .unsupportedVersion(parts[0]) }
            message = .response(RTSPResponse(status: status, reason: parts.count > 2 ? parts[2] : "", headers: headers, body: []))
        } else {
            guard parts.count == 3, parts[0].allSatisfy({ $0.isLetter || $0 == "_" }), !parts[1].isEmpty else {
                throw .malformedStartLine(String(startLine.prefix(80)))
            }
            guard parts[2] == "RTSP/1.0" else {
                if parts[2].hasPrefix("RTSP/") { throw .unsupportedVersion(parts[2]) }
                throw .malformedStartLine(String(startLine.prefix(80)))
            }
            message = .request(RTSPRequest(method: parts[0].uppercased(), uri: parts[1], headers: headers, body: []))
        }
        partial.head = (message, partial.scanned, bodyLength)
        return true
    }

    /// The end of the line starting at `lineStart`, searching from `searchFrom` (bytes before it
    /// were searched already): CRLF or a bare LF (lenient, as real clients vary).
    private static func findLineEnd(_ buffer: ByteBuffer, lineStart: Int, searchFrom: Int, to end: Int) -> (contentEnd: Int, next: Int)? {
        guard searchFrom < end else { return nil }
        let view = buffer.viewBytes(at: searchFrom, length: end - searchFrom)!
        guard let newline = view.firstIndex(of: UInt8(ascii: "\n")) else { return nil }
        var contentEnd = newline
        if contentEnd > lineStart, buffer.getInteger(at: contentEnd - 1, as: UInt8.self) == UInt8(ascii: "\r") { contentEnd -= 1 }
        return (contentEnd, newline + 1)
    }
}
