/// A browser's SDP offer for WHEP playback (RFC 9725, JSEP's RFC 8829 shapes): what the node
/// needs to answer it. Parsing takes untrusted text with limits, and says what is wrong and on
/// which line; `ICE`, DTLS and codec choices are read per m-line with session-level fallbacks.
public struct WebRTCOffer: Sendable, Equatable {
    /// One payload format an m-line offers.
    public struct Format: Sendable, Equatable {
        public var payloadType: UInt8
        /// `H264`, `opus`, `rtx`, ... as written.
        public var encoding: String
        public var clockRate: Int
        public var channels: Int?
        /// `a=fmtp` parameters, keys lowercased (`profile-level-id`, `packetization-mode`, `apt`).
        public var parameters: [String: String]
        /// `a=rtcp-fb` values (`nack`, `nack pli`, `ccm fir`, `goog-remb`, `transport-cc`).
        public var feedback: [String]
    }

    public struct Media: Sendable, Equatable {
        /// `video`, `audio`, `application`.
        public var kind: String
        public var proto: String
        public var mid: String?
        /// `sendrecv`, `recvonly`, `sendonly`, `inactive` (RFC 3264's default: sendrecv).
        public var direction: String
        public var formats: [Format]
        /// `a=extmap` URIs by id.
        public var extensions: [Int: String]
        public var iceUfrag: String?
        public var icePassword: String?
        public var fingerprint: Fingerprint?
        public var setup: String?
        public var rtcpMux: Bool
        /// Port 0: the browser rejected or stopped this m-line.
        public var isRejected: Bool

        /// The id of an RTP header extension the m-line offers, by URI.
        public func extensionID(_ uri: String) -> Int? { extensions.first { $0.value == uri }?.key }
    }

    /// `a=fingerprint:sha-256 AB:CD:...`, the certificate the peer's DTLS will present.
    public struct Fingerprint: Sendable, Equatable {
        public var algorithm: String
        public var value: String
    }

    public var media: [Media]
    /// The mids of `a=group:BUNDLE`.
    public var bundle: [String]

    public static let maximumBytes = 64 * 1024
    public static let maximumMedia = 16
    public static let maximumFormatsPerMedia = 64
}

/// What is wrong with an offer, and where: WHEP answers it with 400 and this text.
public struct WebRTCOfferError: Error, Equatable, CustomStringConvertible {
    public var line: Int?
    public var reason: String

    public var description: String { line.map { "SDP offer, line \($0): \(reason)" } ?? "SDP offer: \(reason)" }
}

extension WebRTCOffer {
    public static func parse(_ text: String) throws(WebRTCOfferError) -> WebRTCOffer {
        guard text.utf8.count <= maximumBytes else {
            throw WebRTCOfferError(reason: "\(text.utf8.count) bytes, over the limit of \(maximumBytes)")
        }
        var media: [Media] = []
        var bundle: [String] = []
        var sessionUfrag: String?
        var sessionPassword: String?
        var sessionFingerprint: Fingerprint?
        var sessionSetup: String?
        var sessionDirection: String?
        var sawVersion = false
        // Format lines refer to payload types of the current m-line only.
        var lineNumber = 0
        // "\r\n" is one Character in Swift: both it and a bare "\n" end a line.
        for rawLine in text.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r\n" }) {
            lineNumber += 1
            let line = rawLine.hasSuffix("\r") ? rawLine.dropLast() : rawLine[...]
            if line.isEmpty { continue }
            guard line.count >= 2, line.dropFirst().first == "=" else {
                throw WebRTCOfferError(line: lineNumber, reason: "not a `x=value` line: \"\(printable(line))\"")
            }
            let kind = line.first!
            let value = line.dropFirst(2)
            switch kind {
            case "v":
                guard value == "0" else { throw WebRTCOfferError(line: lineNumber, reason: "SDP version \"\(printable(value))\", expected 0") }
                sawVersion = true
            case "m":
                guard media.count < maximumMedia else {
                    throw WebRTCOfferError(line: lineNumber, reason: "more than \(maximumMedia) m-lines")
                }
                let fields = value.split(separator: " ")
                guard fields.count >= 3, let port = Int(fields[1].split(separator: "/").first ?? "") else {
                    throw WebRTCOfferError(line: lineNumber, reason: "an m-line needs `kind port proto formats`: \"\(printable(value))\"")
                }
                let payloadTypes = fields.dropFirst(3).compactMap { UInt8($0) }.filter { $0 < 128 }
                guard payloadTypes.count <= maximumFormatsPerMedia else {
                    throw WebRTCOfferError(line: lineNumber, reason: "\(payloadTypes.count) formats on one m-line, over the limit of \(maximumFormatsPerMedia)")
                }
                media.append(Media(kind: String(fields[0]), proto: String(fields[2]), mid: nil, direction: "sendrecv",
                                   formats: payloadTypes.map { Format(payloadType: $0, encoding: "", clockRate: 0, channels: nil, parameters: [:], feedback: []) },
                                   extensions: [:], iceUfrag: nil, icePassword: nil, fingerprint: nil, setup: nil, rtcpMux: false,
                                   isRejected: port == 0))
            case "a":
                let (name, attribute) = split(value)
                let index = media.indices.last
                switch name {
                case "group":
                    let parts = attribute.split(separator: " ")
                    if parts.first == "BUNDLE" { bundle = parts.dropFirst().map(String.init) }
                case "ice-ufrag":
                    if let index { media[index].iceUfrag = attribute } else { sessionUfrag = attribute }
                case "ice-pwd":
                    if let index { media[index].icePassword = attribute } else { sessionPassword = attribute }
                case "fingerprint":
                    let parts = attribute.split(separator: " ", maxSplits: 1)
                    guard parts.count == 2 else { throw WebRTCOfferError(line: lineNumber, reason: "a fingerprint needs `algorithm value`") }
                    let fingerprint = Fingerprint(algorithm: parts[0].lowercased(), value: parts[1].uppercased())
                    // A peer may name its certificate under several hashes (RFC 8122 §5: aiortc gives
                    // sha-256, -384 and -512); the node checks sha-256, so that one is kept once seen.
                    let current = index.map { media[$0].fingerprint } ?? sessionFingerprint
                    if current?.algorithm != "sha-256" || fingerprint.algorithm == "sha-256" {
                        if let index { media[index].fingerprint = fingerprint } else { sessionFingerprint = fingerprint }
                    }
                case "setup":
                    if let index { media[index].setup = attribute } else { sessionSetup = attribute }
                case "sendrecv", "recvonly", "sendonly", "inactive":
                    if let index { media[index].direction = name } else { sessionDirection = name }
                case "mid":
                    if let index { media[index].mid = attribute }
                case "rtcp-mux":
                    if let index { media[index].rtcpMux = true }
                case "extmap":
                    // `a=extmap:<id>[/<direction>] <uri> [attributes]`
                    let parts = attribute.split(separator: " ")
                    if let index, parts.count >= 2, let id = Int(parts[0].split(separator: "/").first ?? ""), (1...255).contains(id) {
                        media[index].extensions[id] = String(parts[1])
                    }
                case "rtpmap":
                    guard let index else { break }
                    let parts = attribute.split(separator: " ", maxSplits: 1)
                    guard parts.count == 2, let payloadType = UInt8(parts[0]),
                          let formatIndex = media[index].formats.firstIndex(where: { $0.payloadType == payloadType }) else { break }
                    let encoding = parts[1].split(separator: "/")
                    media[index].formats[formatIndex].encoding = String(encoding.first ?? "")
                    media[index].formats[formatIndex].clockRate = encoding.count > 1 ? Int(encoding[1]) ?? 0 : 0
                    media[index].formats[formatIndex].channels = encoding.count > 2 ? Int(encoding[2]) : nil
                case "fmtp":
                    guard let index else { break }
                    let parts = attribute.split(separator: " ", maxSplits: 1)
                    guard parts.count == 2, let payloadType = UInt8(parts[0]),
                          let formatIndex = media[index].formats.firstIndex(where: { $0.payloadType == payloadType }) else { break }
                    for pair in parts[1].split(separator: ";").prefix(32) {
                        let keyValue = pair.split(separator: "=", maxSplits: 1)
                        guard let key = keyValue.first?.trimmingSpaces.lowercased() else { continue }
                        media[index].formats[formatIndex].parameters[key] = keyValue.count > 1 ? String(keyValue[1].trimmingSpaces) : ""
                    }
                case "rtcp-fb":
                    guard let index else { break }
                    let parts = attribute.split(separator: " ", maxSplits: 1)
                    guard parts.count == 2 else { break }
                    for formatIndex in media[index].formats.indices where parts[0] == "*" || UInt8(parts[0]) == media[index].formats[formatIndex].payloadType {
                        if media[index].formats[formatIndex].feedback.count < 16 {
                            media[index].formats[formatIndex].feedback.append(String(parts[1]))
                        }
                    }
                default:
                    break
                }
            default:
                break
            }
        }
        guard sawVersion else { throw WebRTCOfferError(reason: "no `v=0` line: not an SDP offer") }
        guard !media.isEmpty else { throw WebRTCOfferError(reason: "no m-line: the offer asks for no media") }
        for index in media.indices {
            if media[index].iceUfrag == nil { media[index].iceUfrag = sessionUfrag }
            if media[index].icePassword == nil { media[index].icePassword = sessionPassword }
            if media[index].fingerprint == nil { media[index].fingerprint = sessionFingerprint }
            if media[index].setup == nil { media[index].setup = sessionSetup }
            if let sessionDirection, media[index].direction == "sendrecv" { media[index].direction = sessionDirection }
            // Formats the offer never described by rtpmap keep only the static ones RFC 3551 names.
            media[index].formats.removeAll { $0.encoding.isEmpty }
        }
        return WebRTCOffer(media: media, bundle: bundle)
    }

    private static func split(_ value: Substring) -> (String, String) {
        guard let colon = value.firstIndex(of: ":") else { return (String(value), "") }
        return (String(value[..<colon]), String(value[value.index(after: colon)...]))
    }

    /// Text from the offer as an error may quote it: printable ASCII, at most 80 characters.
    static func printable(_ text: Substring) -> String {
        String(text.prefix(80).unicodeScalars.map { $0.value >= 0x20 && $0.value < 0x7F ? Character($0) : "?" })
    }
}

extension Substring {
    var trimmingSpaces: Substring {
        var text = self
        while text.first == " " { text = text.dropFirst() }
        while text.last == " " { text = text.dropLast() }
        return text
    }
}
