/// One transport specification from a `Transport:` header (RFC 2326 §12.39).
public struct RTSPTransport: Sendable, Equatable {
    public enum Lower: Sendable, Equatable {
        /// RTP and RTCP interleaved on the RTSP connection on these channels.
        case tcp(interleaved: ClosedRange<UInt8>?)
        /// RTP and RTCP over UDP; ports as given by the client and chosen by the server.
        case udp(clientPorts: ClosedRange<UInt16>?, serverPorts: ClosedRange<UInt16>?)
    }

    public var lower: Lower
    public var isMulticast = false
    /// `mode=record` (any case; GStreamer sends `RECORD`).
    public var isRecord = false
    public var ssrc: UInt32?
    /// Parameters we do not interpret, kept for echoing.
    public var other: [String] = []

    public init(lower: Lower, isRecord: Bool = false, ssrc: UInt32? = nil) {
        self.lower = lower
        self.isRecord = isRecord
        self.ssrc = ssrc
    }

    public var isTCP: Bool {
        if case .tcp = lower { return true }
        return false
    }

    /// Parses a whole header value: comma-separated alternatives, in the client's order of preference.
    public static func parseAlternatives(_ header: String) -> [RTSPTransport] {
        header.split(separator: ",").prefix(maximumAlternatives).compactMap { parse(String($0)) }
    }

    /// More offers than any client makes are ignored (each is tried in turn at SETUP).
    public static let maximumAlternatives = 8

    public static func parse(_ text: String) -> RTSPTransport? {
        let parts = text.split(separator: ";").map { $0.trimmed }
        guard let spec = parts.first?.uppercased() else { return nil }
        let isTCP: Bool
        switch spec {
        case "RTP/AVP", "RTP/AVP/UDP": isTCP = false
        case "RTP/AVP/TCP": isTCP = true
        default: return nil
        }
        var interleaved: ClosedRange<UInt8>?
        var clientPorts: ClosedRange<UInt16>?
        var serverPorts: ClosedRange<UInt16>?
        var transport = RTSPTransport(lower: .tcp(interleaved: nil))
        // Blank items (`;;`) and parameters without a name (`=5`) are skipped, not trusted.
        for parameter in parts.dropFirst() where !parameter.isEmpty {
            let pair = parameter.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).map { $0.trimmed }
            guard let key = pair.first?.lowercased(), !key.isEmpty else { continue }
            let value = pair.count > 1 ? pair[1] : ""
            switch key {
            case "unicast": break
            case "multicast": transport.isMulticast = true
            case "interleaved": interleaved = range(value, UInt8.self)
            case "client_port": clientPorts = range(value, UInt16.self)
            case "server_port": serverPorts = range(value, UInt16.self)
            case "mode": transport.isRecord = value.trimmingQuotes.lowercased() == "record"
            case "ssrc": transport.ssrc = UInt32(value, radix: 16)
            default: transport.other.append(parameter)
            }
        }
        transport.lower = isTCP ? .tcp(interleaved: interleaved) : .udp(clientPorts: clientPorts, serverPorts: serverPorts)
        return transport
    }

    /// Why a UDP client's `client_port` pair cannot be served, or nil. RTP goes to an even port
    /// with RTCP on the next (RFC 3550 §11); port 0 cannot be sent to, and ports below 1024 are
    /// the client host's system services, never a player's: the node would send media at them.
    public static func clientPortProblem(_ ports: ClosedRange<UInt16>) -> String? {
        if ports.lowerBound < 1024 { return "client_port \(ports.lowerBound): ports below 1024 are not served" }
        if ports.lowerBound % 2 != 0 { return "client_port \(ports.lowerBound): the RTP port must be even" }
        if ports.upperBound != ports.lowerBound + 1 {
            return "client_port \(ports.lowerBound)-\(ports.upperBound): RTCP must be on the port after RTP's"
        }
        return nil
    }

    /// What a server makes of one offered transport.
    public enum Answer: Sendable, Equatable {
        /// Serve it, replying with this transport.
        case serve(RTSPTransport)
        /// The server cannot (UDP without a client port pair, or a server without UDP): try the next offer.
        case skip
        /// The offer is unusable as written: answer 461 with this reason.
        case refuse(String)
    }

    /// The reply to this offer for `track` (0-based), in a publisher's (`isRecord`) or a player's
    /// session. Interleaved channels default to `2 × track` and the next; UDP is served from the
    /// server's `serverPorts` pair, nil when it has none.
    public func answer(track: Int, isRecord: Bool, serverPorts: ClosedRange<UInt16>?) -> Answer {
        var reply = self
        reply.isRecord = isRecord
        switch lower {
        case let .tcp(interleaved):
            guard let first = UInt8(exactly: track * 2) else { return .refuse("track \(track) has no interleaved channel pair") }
            reply.lower = .tcp(interleaved: interleaved ?? first...(first + 1))
        case let .udp(clientPorts, _):
            guard let clientPorts, let serverPorts else { return .skip }
            if let problem = Self.clientPortProblem(clientPorts) { return .refuse(problem) }
            reply.lower = .udp(clientPorts: clientPorts, serverPorts: serverPorts)
        }
        return .serve(reply)
    }

    /// `a-b` or a single `a` (meaning `a-a+1` for port pairs).
    static func range<T: FixedWidthInteger>(_ text: String, _: T.Type) -> ClosedRange<T>? {
        let bounds = text.split(separator: "-").compactMap { T($0.trimmed) }
        switch bounds.count {
        case 1: return bounds[0] < T.max ? bounds[0]...(bounds[0] + 1) : nil
        case 2 where bounds[0] <= bounds[1]: return bounds[0]...bounds[1]
        default: return nil
        }
    }

    public var headerValue: String {
        var parts: [String]
        switch lower {
        case let .tcp(interleaved):
            parts = ["RTP/AVP/TCP", "unicast"]
            if let interleaved { parts.append("interleaved=\(interleaved.lowerBound)-\(interleaved.upperBound)") }
        case let .udp(clientPorts, serverPorts):
            parts = ["RTP/AVP", "unicast"]
            if let clientPorts { parts.append("client_port=\(clientPorts.lowerBound)-\(clientPorts.upperBound)") }
            if let serverPorts { parts.append("server_port=\(serverPorts.lowerBound)-\(serverPorts.upperBound)") }
        }
        if let ssrc { parts.append("ssrc=\(String(ssrc, radix: 16, uppercase: true))") }
        if isRecord { parts.append("mode=record") }
        return parts.joined(separator: ";")
    }
}

extension StringProtocol {
    var trimmingQuotes: String {
        var text = String(self)
        if text.hasPrefix("\"") { text.removeFirst() }
        if text.hasSuffix("\"") { text.removeLast() }
        return text
    }
}
