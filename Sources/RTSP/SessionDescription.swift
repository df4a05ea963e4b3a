import MediaCore

/// An SDP session description (RFC 4566), as far as RTSP publishing and playing need it.
public struct SessionDescription: Sendable, Equatable {
    public struct Media: Sendable, Equatable {
        /// `video`, `audio`, ...
        public var kind: String
        public var port: Int
        public var proto: String
        public var payloadType: UInt8
        /// Encoding name from `a=rtpmap`, e.g. `H264`, `MPEG4-GENERIC`.
        public var encoding: String
        public var clockRate: Int
        public var channels: Int?
        /// `a=fmtp` parameters, keys lowercased.
        public var formatParameters: [String: String]
        /// `a=control`, as written.
        public var control: String?
        /// `b=AS` in kbit/s.
        public var bandwidthKbps: Int?
        /// `b=TIAS` in bit/s (RFC 3890: transport-independent, without IP/UDP/RTP overhead).
        public var bandwidthTIAS: Int?
        /// Other attribute lines (`name` or `name:value`) kept in order.
        public var attributes: [String]

        public init(kind: String, port: Int = 0, proto: String = "RTP/AVP", payloadType: UInt8, encoding: String, clockRate: Int,
                    channels: Int? = nil, formatParameters: [String: String] = [:], control: String? = nil,
                    bandwidthKbps: Int? = nil, attributes: [String] = []) {
            self.kind = kind
            self.port = port
            self.proto = proto
            self.payloadType = payloadType
            self.encoding = encoding
            self.clockRate = clockRate
            self.channels = channels
            self.formatParameters = formatParameters
            self.control = control
            self.bandwidthKbps = bandwidthKbps
            self.attributes = attributes
        }

        public var isH264: Bool { encoding.uppercased() == "H264" }
        public var isAAC: Bool { encoding.uppercased() == "MPEG4-GENERIC" }
        /// AAC in RFC 6416's LATM framing (GStreamer's default).
        public var isLATM: Bool { encoding.uppercased() == "MP4A-LATM" }

        /// The AudioSpecificConfig of an AAC-hbr track (`config=` in hex), nil for anything else.
        public var aacConfig: [UInt8]? {
            guard isAAC, (formatParameters["mode"] ?? "").lowercased() == "aac-hbr", let hex = formatParameters["config"] else { return nil }
            return Self.bytes(hex: hex)
        }

        /// The StreamMuxConfig of an LATM track that carries it out of band (`cpresent=0;config=`).
        public var latmConfig: LATMStreamMuxConfig? {
            guard isLATM, formatParameters["cpresent"] == "0", let hex = formatParameters["config"], let bytes = Self.bytes(hex: hex) else { return nil }
            return LATMStreamMuxConfig(bytes)
        }

        /// AAC this node takes, in either framing: the AudioSpecificConfig and the channel count
        /// (the rtpmap's, else the config's).
        public var aacFormat: (config: [UInt8], channels: Int)? {
            if let config = aacConfig { return (config, channels ?? AudioSpecificConfig(config)?.channels ?? 2) }
            if let latm = latmConfig { return (latm.audio.bytes, channels ?? latm.audio.channels) }
            return nil
        }

        static func bytes(hex: String) -> [UInt8]? {
            let digits = Array(hex.utf8)
            guard !digits.isEmpty, digits.count % 2 == 0, digits.count <= 512 else { return nil }
            var bytes: [UInt8] = []
            for index in stride(from: 0, to: digits.count, by: 2) {
                guard let byte = UInt8(String(decoding: digits[index..<index + 2], as: UTF8.self), radix: 16) else { return nil }
                bytes.append(byte)
            }
            return bytes
        }
    }

    public var sessionName: String
    public var origin: String
    public var control: String?
    public var sessionAttributes: [String]
    public var media: [Media]

    public init(sessionName: String = "abr-worker", origin: String = "- 0 0 IN IP4 127.0.0.1", control: String? = "*",
                sessionAttributes: [String] = [], media: [Media]) {
        self.sessionName = sessionName
        self.origin = origin
        self.control = control
        self.sessionAttributes = sessionAttributes
        self.media = media
    }

    public enum ParseError: Error, Sendable, Equatable, CustomStringConvertible {
        case tooLarge(Int)
        case malformedLine(Int, String)
        case noMedia
        case badMedia(Int, String)

        public var description: String {
            switch self {
            case let .tooLarge(size): "SDP of \(size) bytes is too large"
            case let .malformedLine(number, line): "SDP line \(number) is malformed: \(line)"
            case .noMedia: "SDP describes no media"
            case let .badMedia(number, reason): "SDP line \(number): \(reason)"
            }
        }
    }

    public static let maximumSize = 16 * 1024
    /// A publisher sends video and audio; a few more sections are tolerated (and ignored), not dozens.
    public static let maximumMediaCount = 8
    /// 192 kHz audio is the highest rate in use; video clocks are 90 kHz.
    public static let maximumClockRate = 192_000
    public static let maximumChannels = 8

    public static func parse(_ text: String) throws(ParseError) -> SessionDescription {
        guard text.utf8.count <= maximumSize else { throw .tooLarge(text.utf8.count) }
        var description = SessionDescription(sessionName: "", origin: "", control: nil, media: [])
        var current: Media?
        var rtpmaps: [UInt8: (String, Int, Int?)] = [:]
        var fmtps: [UInt8: [String: String]] = [:]
        func finishMedia() {
            guard var media = current else { return }
            if let map = rtpmaps[media.payloadType] {
                media.encoding = map.0
                media.clockRate = map.1
                media.channels = map.2
            }
            media.formatParameters = fmtps[media.payloadType] ?? [:]
            description.media.append(media)
            current = nil
            rtpmaps = [:]
            fmtps = [:]
        }
        for (index, rawLine) in text.split(omittingEmptySubsequences: true, whereSeparator: { $0 == "\n" || $0 == "\r\n" }).enumerated() {
            let number = index + 1
            let line = rawLine.trimmed
            if line.isEmpty { continue }
            guard line.count >= 2, line[line.index(after: line.startIndex)] == "=" else { throw .malformedLine(number, String(line.prefix(60))) }
            let type = line.first!
            let value = String(line.dropFirst(2))
            switch type {
            case "s": description.sessionName = value
            case "o": description.origin = value
            case "m":
                finishMedia()
                guard description.media.count < maximumMediaCount else {
                    throw .badMedia(number, "more than \(maximumMediaCount) media sections")
                }
                let fields = value.split(separator: " ").map(String.init)
                guard fields.count >= 4, let portText = fields[1].split(separator: "/").first, let port = Int(portText), (0...65535).contains(port) else {
                    throw .badMedia(number, "expected m=<media> <port> <proto> <fmt> (got \(value.prefix(60)))")
                }
                guard let payloadType = UInt8(fields[3]), payloadType < 128 else {
                    throw .badMedia(number, "payload type must be 0-127 (got \(fields[3].prefix(10)))")
                }
                current = Media(kind: fields[0], port: port, proto: fields[2], payloadType: payloadType,
                                encoding: Self.staticEncoding(payloadType), clockRate: 90000)
            case "b":
                if value.uppercased().hasPrefix("AS:"), let kbps = Int(value.dropFirst(3)) { current?.bandwidthKbps = kbps }
                if value.uppercased().hasPrefix("TIAS:"), let bps = Int(value.dropFirst(5)) { current?.bandwidthTIAS = bps }
            case "a":
                let parts = value.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
                // `a=` and `a=:x` name nothing: skipped, as RFC 4566 §5 tells parsers to ignore what they do not know.
                guard let name = parts.first, !name.isEmpty else { continue }
                let attributeValue = parts.count > 1 ? parts[1] : ""
                switch name {
                case "rtpmap":
                    let fields = attributeValue.split(separator: " ", maxSplits: 1)
                    guard fields.count == 2, let payloadType = UInt8(fields[0]) else { throw .badMedia(number, "bad rtpmap \(attributeValue.prefix(60))") }
                    let encoding = fields[1].split(separator: "/").map(String.init)
                    guard encoding.count >= 2, let clock = Int(encoding[1]), (1...maximumClockRate).contains(clock) else {
                        throw .badMedia(number, "rtpmap clock rate must be 1-\(maximumClockRate) Hz (got \(attributeValue.prefix(60)))")
                    }
                    var channels: Int?
                    if encoding.count > 2 {
                        guard let count = Int(encoding[2]), (1...maximumChannels).contains(count) else {
                            throw .badMedia(number, "rtpmap channels must be 1-\(maximumChannels) (got \(encoding[2].prefix(10)))")
                        }
                        channels = count
                    }
                    rtpmaps[payloadType] = (encoding[0], clock, channels)
                case "fmtp":
                    let fields = attributeValue.split(separator: " ", maxSplits: 1)
                    guard let payloadType = UInt8(fields.first ?? "") else { throw .badMedia(number, "bad fmtp \(attributeValue.prefix(60))") }
                    var parameters: [String: String] = [:]
                    if fields.count > 1 {
                        for parameter in fields[1].split(separator: ";") {
                            let pair = parameter.split(separator: "=", maxSplits: 1)
                            guard let key = pair.first?.trimmed, !key.isEmpty else { continue }
                            parameters[key.lowercased()] = pair.count > 1 ? pair[1].trimmed : ""
                        }
                    }
                    fmtps[payloadType] = parameters
                case "control":
                    if current != nil { current?.control = attributeValue } else { description.control = attributeValue }
                default:
                    if current != nil { current?.attributes.append(value) } else { description.sessionAttributes.append(value) }
                }
            default:
                continue
            }
        }
        finishMedia()
        guard !description.media.isEmpty else { throw .noMedia }
        return description
    }

    static func staticEncoding(_ payloadType: UInt8) -> String {
        switch payloadType {
        case 0: "PCMU"
        case 8: "PCMA"
        case 14: "MPA"
        case 26: "JPEG"
        case 33: "MP2T"
        default: ""
        }
    }

    public func render() -> String {
        var lines = ["v=0", "o=\(origin)", "s=\(sessionName)", "c=IN IP4 0.0.0.0", "t=0 0"]
        if let control { lines.append("a=control:\(control)") }
        lines += sessionAttributes.map { "a=\($0)" }
        for media in media {
            lines.append("m=\(media.kind) \(media.port) \(media.proto) \(media.payloadType)")
            if let kbps = media.bandwidthKbps { lines.append("b=AS:\(kbps)") }
            if let bps = media.bandwidthTIAS { lines.append("b=TIAS:\(bps)") }
            let channels = media.channels.map { "/\($0)" } ?? ""
            lines.append("a=rtpmap:\(media.payloadType) \(media.encoding)/\(media.clockRate)\(channels)")
            if !media.formatParameters.isEmpty {
                let parameters = media.formatParameters.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ";")
                lines.append("a=fmtp:\(media.payloadType) \(parameters)")
            }
            lines += media.attributes.map { "a=\($0)" }
            if let control = media.control { lines.append("a=control:\(control)") }
        }
        return lines.joined(separator: "\r\n") + "\r\n"
    }
}
