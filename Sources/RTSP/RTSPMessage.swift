import NIOCore

/// RTSP header fields in order, looked up case-insensitively (RFC 2326 §4.2).
public struct RTSPHeaders: Sendable, Equatable, Sequence, ExpressibleByDictionaryLiteral {
    public private(set) var fields: [(name: String, value: String)] = []

    public init() {}

    public init(dictionaryLiteral elements: (String, String)...) {
        for (name, value) in elements { add(name, value) }
    }

    public static func == (lhs: RTSPHeaders, rhs: RTSPHeaders) -> Bool {
        lhs.fields.count == rhs.fields.count && zip(lhs.fields, rhs.fields).allSatisfy { $0.name == $1.name && $0.value == $1.value }
    }

    public mutating func add(_ name: String, _ value: String) {
        fields.append((name, value))
    }

    /// Replaces every field of this name with one.
    public mutating func set(_ name: String, _ value: String) {
        remove(name)
        add(name, value)
    }

    public mutating func remove(_ name: String) {
        fields.removeAll { $0.name.lowercased() == name.lowercased() }
    }

    public subscript(name: String) -> String? {
        let lowered = name.lowercased()
        return fields.first { $0.name.lowercased() == lowered }?.value
    }

    public func makeIterator() -> IndexingIterator<[(name: String, value: String)]> {
        fields.makeIterator()
    }

    public var count: Int { fields.count }

    /// The id in `Session: id;timeout=60`; nil when the header is absent, "" when it names nothing
    /// (empty, or `;`-only), which callers must refuse rather than look up.
    public var sessionID: String? {
        self["Session"].map { header in header.prefix { $0 != ";" }.trimmed }
    }
}

public struct RTSPRequest: Sendable, Equatable {
    public var method: String
    public var uri: String
    public var headers: RTSPHeaders
    public var body: [UInt8]

    public init(method: String, uri: String, headers: RTSPHeaders = [:], body: [UInt8] = []) {
        self.method = method
        self.uri = uri
        self.headers = headers
        self.body = body
    }

    /// A GET_PARAMETER or SET_PARAMETER body's parameters (RFC 2326 §10.8-10.9): one per line,
    /// `name: value`, `name=value` or a bare name (value ""), trimmed. Only the first 4 KiB is read.
    public var parameters: [(name: String, value: String)] {
        String(decoding: body.prefix(4096), as: UTF8.self).split(whereSeparator: \.isNewline).compactMap { line in
            let parts = line.split(maxSplits: 1, whereSeparator: { $0 == ":" || $0 == "=" }).map(\.trimmed)
            guard let name = parts.first, !name.isEmpty else { return nil }
            return (name, parts.count > 1 ? parts[1] : "")
        }
    }

    public var cseq: String? { headers["CSeq"] }
}

public struct RTSPResponse: Sendable, Equatable {
    public var status: Int
    public var reason: String
    public var headers: RTSPHeaders
    public var body: [UInt8]

    public init(status: Int, reason: String? = nil, headers: RTSPHeaders = [:], body: [UInt8] = []) {
        self.status = status
        self.reason = reason ?? RTSPResponse.standardReason(status)
        self.headers = headers
        self.body = body
    }

    public static func standardReason(_ status: Int) -> String {
        switch status {
        case 200: "OK"
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 406: "Not Acceptable"
        case 413: "Request Entity Too Large"
        case 414: "Request-URI Too Large"
        case 415: "Unsupported Media Type"
        case 431: "Request Header Fields Too Large"
        case 453: "Not Enough Bandwidth"
        case 454: "Session Not Found"
        case 455: "Method Not Valid in This State"
        case 457: "Invalid Range"
        case 459: "Aggregate Operation Not Allowed"
        case 460: "Only Aggregate Operation Allowed"
        case 461: "Unsupported Transport"
        case 500: "Internal Server Error"
        case 501: "Not Implemented"
        case 503: "Service Unavailable"
        case 505: "RTSP Version Not Supported"
        default: "Status \(status)"
        }
    }
}

/// What arrives on an RTSP connection: a message, or an interleaved binary frame (RFC 2326 §10.12).
public enum RTSPInbound: Sendable, Equatable {
    case request(RTSPRequest)
    case response(RTSPResponse)
    case interleaved(channel: UInt8, payload: ByteBuffer)
}

extension RTSPRequest {
    public func write(to buffer: inout ByteBuffer) {
        buffer.writeString("\(method) \(uri) RTSP/1.0\r\n")
        RTSPSerialization.writeHeadersAndBody(headers, body, to: &buffer)
    }
}

extension RTSPResponse {
    public func write(to buffer: inout ByteBuffer) {
        buffer.writeString("RTSP/1.0 \(status) \(reason)\r\n")
        RTSPSerialization.writeHeadersAndBody(headers, body, to: &buffer)
    }
}

public enum RTSPSerialization {
    static func writeHeadersAndBody(_ headers: RTSPHeaders, _ body: [UInt8], to buffer: inout ByteBuffer) {
        var headers = headers
        if !body.isEmpty { headers.set("Content-Length", String(body.count)) } else { headers.remove("Content-Length") }
        for (name, value) in headers {
            // Values may echo a peer's bytes (CSeq, a URI in Content-Base or RTP-Info): a CR or LF
            // in one must never end the line and start a header of the peer's choosing.
            buffer.writeString("\(headerSafe(name)): \(headerSafe(value))\r\n")
        }
        buffer.writeString("\r\n")
        buffer.writeBytes(body)
    }

    /// `text` with control characters (CR and LF among them) removed; tabs are kept.
    static func headerSafe(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: { ($0.value < 0x20 && $0 != "\t") || $0.value == 0x7F }) else { return text }
        var result = ""
        result.unicodeScalars.append(contentsOf: text.unicodeScalars.filter { !(($0.value < 0x20 && $0 != "\t") || $0.value == 0x7F) })
        return result
    }

    /// `$`, channel, 16-bit length, payload.
    public static func writeInterleaved(channel: UInt8, payload: ByteBuffer, to buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt8(ascii: "$"))
        buffer.writeInteger(channel)
        buffer.writeInteger(UInt16(payload.readableBytes))
        var payload = payload
        buffer.writeBuffer(&payload)
    }
}
