import Foundation
import MediaCore
import NIOCore
import RTSP
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// A UDP socket pair on loopback (RTP on an even port, RTCP on the next), as a UDP client binds it.
final class UDPPeer {
    let rtpSocket: Int32
    let rtcpSocket: Int32
    let rtpPort: UInt16

    init() throws {
        for _ in 0..<100 {
            let port = UInt16.random(in: 20000...60000) & ~1
            guard let rtp = Self.bind(port) else { continue }
            guard let rtcp = Self.bind(port + 1) else {
                close(rtp)
                continue
            }
            rtpSocket = rtp
            rtcpSocket = rtcp
            rtpPort = port
            return
        }
        throw POSIXError(.EADDRINUSE)
    }

    deinit {
        close(rtpSocket)
        close(rtcpSocket)
    }

    private static func bind(_ port: UInt16) -> Int32? {
        let descriptor = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(port.bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else {
            close(descriptor)
            return nil
        }
        return descriptor
    }

    /// One datagram on the RTP socket, or nil after `timeout` seconds.
    func receiveRTP(timeout: Double) -> [UInt8]? {
        var descriptor = pollfd(fd: rtpSocket, events: Int16(POLLIN), revents: 0)
        guard poll(&descriptor, 1, Int32(timeout * 1000)) == 1 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 2048)
        let count = buffer.withUnsafeMutableBytes { recv(rtpSocket, $0.baseAddress, $0.count, 0) }
        return count > 0 ? Array(buffer.prefix(count)) : nil
    }

    /// Sends from the RTCP socket (a player's reports).
    func sendRTCP(_ bytes: [UInt8], toPort port: Int) {
        send(bytes, toPort: port, from: rtcpSocket)
    }

    func send(_ bytes: [UInt8], toPort port: Int) {
        send(bytes, toPort: port, from: rtpSocket)
    }

    private func send(_ bytes: [UInt8], toPort port: Int, from socket: Int32) {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        _ = bytes.withUnsafeBytes { raw in
            withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(socket, raw.baseAddress, raw.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        }
    }
}

/// H.264 access units of a clip made by x264 (no B-frames, so presentation order is decode order).
struct H264Clip {
    /// Each picture's NAL units (parameter sets travel with the IDRs).
    let pictures: [[[UInt8]]]
    let frameRate: Int

    init(width: Int, height: Int, rate: Int = 30, seconds: Int, keyframeInterval: Int = 30) throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("attack-\(UUID().uuidString.prefix(8)).h264").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let made = try runProcess("ffmpeg", ["-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi",
                                             "-i", "testsrc2=size=\(width)x\(height):rate=\(rate)", "-t", String(seconds),
                                             "-c:v", "libx264", "-preset", "ultrafast", "-bf", "0", "-g", String(keyframeInterval),
                                             "-x264-params", "repeat-headers=1", "-pix_fmt", "yuv420p", "-f", "h264", path])
        guard made.status == 0 else { throw POSIXError(.EIO) }
        var pictures: [[[UInt8]]] = []
        var pending: [[UInt8]] = []
        for unit in H264.annexBUnits(Array(try Data(contentsOf: URL(fileURLWithPath: path)))) {
            let type = (unit.first ?? 0) & 0x1F
            guard type != 9 else { continue }  // access unit delimiters
            pending.append(Array(unit))
            if type == 1 || type == 5 {
                pictures.append(pending)
                pending = []
            }
        }
        self.pictures = pictures
        frameRate = rate
    }

    var sps: [UInt8] { pictures.lazy.flatMap { $0 }.first { ($0.first ?? 0) & 0x1F == 7 } ?? [] }
    var pps: [UInt8] { pictures.lazy.flatMap { $0 }.first { ($0.first ?? 0) & 0x1F == 8 } ?? [] }

    /// An ANNOUNCE body with this clip's parameter sets.
    var sdp: String {
        RawRTSPClient.videoSDP + "a=fmtp:96 packetization-mode=1;sprop-parameter-sets=\(Data(sps).base64EncodedString()),\(Data(pps).base64EncodedString())\r\n"
    }
}

/// Sends a clip as RTP in real time, over TCP (interleaved channel 0) or UDP, with the timeline
/// and SSRC a test chooses.
final class RTPStreamer {
    private var packetizer: H264Packetizer
    private let send: ([UInt8]) -> Void
    private(set) var sequence: UInt16 = 0
    var timestampBase: UInt32 = 0x1234_0000
    let ssrc: UInt32

    init(ssrc: UInt32, send: @escaping ([UInt8]) -> Void) {
        self.ssrc = ssrc
        packetizer = H264Packetizer(ssrc: ssrc, initialSequence: 0)
        self.send = send
    }

    static func interleaved(_ client: RawRTSPClient, ssrc: UInt32 = 0xABCD_0001) -> RTPStreamer {
        RTPStreamer(ssrc: ssrc) { rtp in _ = client.send([0x24, 0, UInt8(rtp.count >> 8), UInt8(rtp.count & 0xFF)] + rtp) }
    }

    static func datagrams(_ peer: UDPPeer, serverPort: Int, ssrc: UInt32 = 0xABCD_0001) -> RTPStreamer {
        RTPStreamer(ssrc: ssrc) { rtp in peer.send(rtp, toPort: serverPort) }
    }

    /// Sends `clip`'s pictures from `first` for `count` pictures, at its frame rate (`pace` false: at once).
    func stream(_ clip: H264Clip, from first: Int = 0, count: Int, pace: Bool = true) {
        let start = Date()
        for index in 0..<count {
            let picture = clip.pictures[(first + index) % clip.pictures.count]
            let timestamp = timestampBase &+ UInt32((first + index) * 90000 / clip.frameRate)
            sendPicture(picture, timestamp: timestamp)
            if pace {
                let due = start.addingTimeInterval(Double(index + 1) / Double(clip.frameRate))
                let wait = due.timeIntervalSinceNow
                if wait > 0 { Thread.sleep(forTimeInterval: wait) }
            }
        }
    }

    func sendPicture(_ nalUnits: [[UInt8]], timestamp: UInt32) {
        for packet in packetizer.packetize(nalUnits.map { $0[...] }, timestamp: timestamp) {
            var buffer = ByteBuffer()
            packet.write(to: &buffer)
            send(Array(buffer.readableBytesView))
            sequence = packet.sequenceNumber &+ 1
        }
    }
}

extension RawRTSPClient {
    /// ANNOUNCE `sdp`, SETUP track 0 over UDP from `peer`'s ports, RECORD; returns the session, the
    /// server's RTP port and every status.
    func startPublishingOverUDP(_ url: String, sdp: String, peer: UDPPeer, authorization: String? = nil)
        -> (session: String, serverPort: Int, statuses: [Int?]) {
        let announced = announce(url, sdp: sdp, authorization: authorization)
        let session = Self.sessionID(in: announced)
        send("SETUP \(url)/streamid=0 RTSP/1.0\r\nCSeq: 2\r\nSession: \(session)\r\n"
             + "Transport: RTP/AVP;unicast;client_port=\(peer.rtpPort)-\(peer.rtpPort + 1);mode=record\r\n\r\n")
        let setup = receiveResponse()
        var serverPort: Int?
        if let range = setup.range(of: "server_port=") {
            serverPort = Int(String(setup[range.upperBound...].prefix { $0.isNumber }))
        }
        send("RECORD \(url) RTSP/1.0\r\nCSeq: 3\r\nSession: \(session)\r\n\r\n")
        return (session, serverPort ?? 0, [Int(announced.dropFirst(9).prefix(3)), Int(setup.dropFirst(9).prefix(3)), status()])
    }

    /// A keep-alive on `session`: its status (454 once the session is gone, nil when the connection closed).
    func keepAlive(_ url: String, session: String, cseq: Int = 50) -> Int? {
        send("GET_PARAMETER \(url) RTSP/1.0\r\nCSeq: \(cseq)\r\nSession: \(session)\r\n\r\n")
        return status()
    }
}

/// Open file descriptors of this process (the node runs in it).
func openDescriptorCount() -> Int {
    (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1
}
