import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A blocking TCP client that sends whatever bytes a test wants: for malformed and hostile requests.
public final class RawRTSPClient {
    private let socketDescriptor: Int32

    /// - Parameter receiveBuffer: a small SO_RCVBUF makes a client that stops reading stall quickly.
    /// - Parameter sourceAddress: the loopback address to connect from (127.0.0.2 is another client).
    public init(port: Int, receiveBuffer: Int32? = nil, sourceAddress: String? = nil) throws {
        socketDescriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        if let sourceAddress {
            var local = sockaddr_in()
            local.sin_family = sa_family_t(AF_INET)
            local.sin_addr.s_addr = inet_addr(sourceAddress)
            _ = withUnsafePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socketDescriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
        }
        if var size = receiveBuffer {
            setsockopt(socketDescriptor, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(socketDescriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(socketDescriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else { throw POSIXError(.ECONNREFUSED) }
    }

    deinit { close(socketDescriptor) }

    public func send(_ text: String) { send(Array(text.utf8)) }

    /// - Parameter nonBlocking: return at once when the socket cannot take more.
    /// - Returns: how many bytes the kernel took (0 when none, never negative).
    @discardableResult
    public func send(_ bytes: [UInt8], nonBlocking: Bool = false) -> Int {
        let flags = Int32(MSG_NOSIGNAL) | (nonBlocking ? Int32(MSG_DONTWAIT) : 0)
        return max(0, bytes.withUnsafeBytes { Glibc.send(socketDescriptor, $0.baseAddress, $0.count, flags) })
    }

    /// Reads until a whole response head (and its body) arrived, or the timeout; "" on close.
    public func receiveResponse() -> String {
        var data = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            // Interleaved frames (RTCP receiver reports to a publisher) come between answers.
            while data.first == 0x24, data.count >= 4, data.count >= 4 + (Int(data[2]) << 8 | Int(data[3])) {
                data.removeFirst(4 + (Int(data[2]) << 8 | Int(data[3])))
            }
            let text = String(decoding: data, as: UTF8.self)
            if let end = text.range(of: "\r\n\r\n") {
                let head = text[..<end.lowerBound]
                let length = head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
                    .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
                if text.utf8.count - text.utf8.distance(from: text.startIndex, to: end.upperBound) >= length { return text }
            }
            let count = recv(socketDescriptor, &chunk, chunk.count, 0)
            if count <= 0 { return String(decoding: data, as: UTF8.self) }
            data += chunk[0..<count]
        }
    }

    /// What has arrived, at most `maximum` bytes, without waiting.
    public func receiveAvailable(maximum: Int) -> [UInt8] {
        var chunk = [UInt8](repeating: 0, count: maximum)
        let count = recv(socketDescriptor, &chunk, maximum, Int32(MSG_DONTWAIT))
        return count > 0 ? Array(chunk[0..<count]) : []
    }

    /// Whatever arrives within `seconds` (the socket's receive timeout bounds each read).
    public func receiveRaw(for seconds: Double) -> [UInt8] {
        var data = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 65536)
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            let count = recv(socketDescriptor, &chunk, chunk.count, Int32(MSG_DONTWAIT))
            if count > 0 { data += chunk[0..<count] } else { Thread.sleep(forTimeInterval: 0.05) }
        }
        return data
    }

    /// A minimal H.264 stream description, as a publisher announces it.
    public static let videoSDP = "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=x\r\nt=0 0\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\na=control:streamid=0\r\n"

    /// The `Session:` id in a response, without its timeout.
    public static func sessionID(in response: String) -> String {
        response.split(separator: "\r\n").first { $0.hasPrefix("Session:") }
            .map { String($0.dropFirst(8).split(separator: ";")[0]).trimmingCharacters(in: .whitespaces) } ?? ""
    }

    public func announce(_ url: String, sdp: String = RawRTSPClient.videoSDP, authorization: String? = nil) -> String {
        let auth = authorization.map { "Authorization: \($0)\r\n" } ?? ""
        send("ANNOUNCE \(url) RTSP/1.0\r\nCSeq: 1\r\n\(auth)Content-Type: application/sdp\r\nContent-Length: \(sdp.utf8.count)\r\n\r\n\(sdp)")
        return receiveResponse()
    }

    /// An `Authorization` value for HTTP Basic.
    public static func basic(_ user: String, _ password: String) -> String {
        "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
    }

    /// ANNOUNCE, SETUP of track 0 over TCP (interleaved 0-1) and RECORD, as a publisher; returns the
    /// session id and every status, in order.
    public func startPublishing(_ url: String, authorization: String? = nil) -> (session: String, statuses: [Int?]) {
        let announced = announce(url, authorization: authorization)
        let session = Self.sessionID(in: announced)
        send("SETUP \(url)/streamid=0 RTSP/1.0\r\nCSeq: 2\r\nSession: \(session)\r\nTransport: RTP/AVP/TCP;unicast;interleaved=0-1;mode=record\r\n\r\n")
        let setup = status()
        send("RECORD \(url) RTSP/1.0\r\nCSeq: 3\r\nSession: \(session)\r\n\r\n")
        return (session, [Int(announced.dropFirst(9).prefix(3)), setup, status()])
    }

    /// The status code of the next response, or nil when the server closed the connection.
    public func status() -> Int? {
        let response = receiveResponse()
        guard response.hasPrefix("RTSP/1.0 ") else { return nil }
        return Int(response.dropFirst(9).prefix(3))
    }
}
