#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import NIOCore
import RTSP
import Synchronization

/// Where a player's RTP and RTCP go: interleaved on its RTSP connection, or UDP datagrams.
protocol PlayerTransport: Sendable {
    /// Queues packets for `track`; they leave in one flush.
    func send(_ packets: [RTPPacket], track: Int)
    func send(_ rtcp: RTCPPacket, track: Int)
    /// Bytes handed to the network but not yet written: the player's backlog.
    var pendingBytes: Int { get }
    /// Ends the player's delivery (closes a TCP connection; UDP players just stop receiving).
    func close()
    /// Where timed sends for this player (its catch-up) run.
    var eventLoop: EventLoop { get }
    /// What the kernel knows of the player's TCP connection (nil on UDP, or where it cannot tell).
    func connectionInfo() -> EventLoopFuture<TCPInfo?>
    /// About `bytes` of RTCP APP padding on the video track's RTCP channel: a probe of the link
    /// that players ignore.
    func sendPadding(bytes: Int)
    /// What was sent, for the player's receiver reports to be read against (UDP); nil on TCP,
    /// where the kernel knows.
    var sentMedia: SentMediaLog? { get }
}

/// What was sent to one UDP player, per track: the meters its RTCP receiver reports are checked
/// against, and the probe padding sent beside the media.
final class SentMediaLog: Sendable {
    private let state = Mutex<(meters: [Int: ReceiverReportMeter], padding: Int64, paddingAtLastReading: Int64)>(([:], 0, 0))

    func sent(_ packets: [RTPPacket], track: Int) {
        state.withLock { state in
            for packet in packets {
                state.meters[track, default: ReceiverReportMeter()].sent(sequence: packet.sequenceNumber, bytes: packet.serializedSize)
            }
        }
    }

    func sent(_ rtcp: RTCPPacket, track: Int) {
        guard case let .senderReport(_, ntp, _, _, _) = rtcp else { return }
        let now = uptimeSeconds()
        state.withLock { $0.meters[track]?.sentReport(ntpTimestamp: ntp, at: now) }
    }

    func paddingSent(bytes: Int) {
        state.withLock { $0.padding += Int64(bytes) }
    }

    /// A report block about `track`, checked; with the video track's, the padding bytes sent since
    /// the previous reading.
    func receive(_ block: RTCPPacket.ReportBlock, track: Int, at time: Double) -> (reading: ReceiverReportMeter.Reading, paddingBytes: Int64)? {
        state.withLock { state in
            guard let reading = state.meters[track]?.receive(block, at: time) else { return nil }
            guard track == 0 else { return (reading, 0) }
            defer { state.paddingAtLastReading = state.padding }
            return (reading, state.padding - state.paddingAtLastReading)
        }
    }

    var ignoredReports: Int { state.withLock { $0.meters.values.reduce(0) { $0 + $1.ignoredReports } } }
}

/// Monotonic seconds, for feedback timing.
func uptimeSeconds() -> Double {
    Double(DispatchTime.now().uptimeNanoseconds) / 1e9
}

extension RTCPPacket {
    /// RTCP APP packets (RFC 3550 §6.7) named `name`, carrying `bytes` of zeros in all, each at most `maximumSize`.
    static func padding(ssrc: UInt32, name: [UInt8], bytes: Int, maximumSize: Int = 1400) -> [[UInt8]] {
        var packets: [[UInt8]] = []
        var left = bytes
        while left > 0 {
            let data = min(left, maximumSize - 12) & ~3
            guard data > 0 else { break }
            let words = (12 + data) / 4 - 1
            var packet: [UInt8] = [0x80, 204, UInt8(words >> 8), UInt8(words & 0xFF),
                                   UInt8(ssrc >> 24), UInt8(ssrc >> 16 & 0xFF), UInt8(ssrc >> 8 & 0xFF), UInt8(ssrc & 0xFF)]
            packet += name.prefix(4)
            packet += [UInt8](repeating: 0, count: data)
            packets.append(packet)
            left -= 12 + data
        }
        return packets
    }
}

/// Room for Linux's `struct tcp_info` (232 bytes on 6.x kernels), read whole by `getsockopt`.
struct TCPInfoStorage: Sendable {
    var words: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64,
                UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64)
        = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)

    var info: TCPInfo? {
        withUnsafeBytes(of: words) { TCPInfo(bytes: $0) }
    }
}

extension Channel {
    /// `TCP_INFO` of this channel's socket; nil when it is not a TCP socket.
    func tcpInfo() -> EventLoopFuture<TCPInfo?> {
        guard let provider = self as? SocketOptionProvider else { return eventLoop.makeSucceededFuture(nil) }
        let future: EventLoopFuture<TCPInfoStorage> = provider.unsafeGetSocketOption(
            level: NIOBSDSocket.OptionLevel(rawValue: CInt(IPPROTO_TCP)), name: NIOBSDSocket.Option(rawValue: CInt(TCP_INFO)))
        return future.map(\.info).recover { _ in nil }
    }
}

/// Counts bytes between `write` and its completion.
final class BacklogCounter: Sendable {
    private let bytes = Atomic<Int>(0)
    var value: Int { bytes.load(ordering: .relaxed) }
    func track(_ count: Int, _ future: EventLoopFuture<Void>) {
        bytes.add(count, ordering: .relaxed)
        future.whenComplete { [self] _ in bytes.subtract(count, ordering: .relaxed) }
    }
}

struct InterleavedTransport: PlayerTransport {
    let channel: Channel
    /// Per track: the RTP channel number (RTCP is the next one).
    let channels: [Int: UInt8]
    let backlog = BacklogCounter()

    func send(_ packets: [RTPPacket], track: Int) {
        guard let number = channels[track], !packets.isEmpty else { return }
        var buffer = channel.allocator.buffer(capacity: packets.reduce(0) { $0 + $1.serializedSize + 4 })
        var scratch = channel.allocator.buffer(capacity: 1500)
        for packet in packets {
            scratch.clear()
            packet.write(to: &scratch)
            RTSPSerialization.writeInterleaved(channel: number, payload: scratch, to: &buffer)
        }
        let size = buffer.readableBytes
        backlog.track(size, channel.writeAndFlush(buffer))
    }

    func send(_ rtcp: RTCPPacket, track: Int) {
        guard let number = channels[track] else { return }
        var payload = channel.allocator.buffer(capacity: 64)
        rtcp.write(to: &payload)
        var buffer = channel.allocator.buffer(capacity: payload.readableBytes + 4)
        RTSPSerialization.writeInterleaved(channel: number &+ 1, payload: payload, to: &buffer)
        channel.writeAndFlush(buffer, promise: nil)
    }

    var pendingBytes: Int { backlog.value }
    var eventLoop: EventLoop { channel.eventLoop }
    func connectionInfo() -> EventLoopFuture<TCPInfo?> { channel.tcpInfo() }
    var sentMedia: SentMediaLog? { nil }

    func sendPadding(bytes: Int) {
        guard let number = channels[0] else { return }
        let packets = RTCPPacket.padding(ssrc: 0, name: PlayerAdaptation.probeName, bytes: bytes)
        var buffer = channel.allocator.buffer(capacity: bytes + packets.count * 4)
        for packet in packets {
            RTSPSerialization.writeInterleaved(channel: number &+ 1, payload: ByteBuffer(bytes: packet), to: &buffer)
        }
        channel.writeAndFlush(buffer, promise: nil)
    }

    func close() {
        channel.close(promise: nil)
    }
}

/// The node's shared UDP pair, as it is now: `RTSPService` binds it again on the same ports if
/// a socket ever closes, and every UDP player sends through whatever pair is current.
protocol DatagramSockets: Sendable {
    var udpChannels: (rtp: Channel, rtcp: Channel)? { get }
}

struct DatagramTransport: PlayerTransport {
    let sockets: any DatagramSockets
    /// Per track: where the player listens for RTP and RTCP (checked at SETUP: unicast, ports ≥ 1024).
    let destinations: [Int: (rtp: SocketAddress, rtcp: SocketAddress)]
    let backlog = BacklogCounter()
    let eventLoop: EventLoop
    let log = SentMediaLog()

    func send(_ packets: [RTPPacket], track: Int) {
        guard let destination = destinations[track], !packets.isEmpty, let rtpChannel = sockets.udpChannels?.rtp else { return }
        log.sent(packets, track: track)
        var size = 0
        var last: EventLoopFuture<Void>?
        for packet in packets {
            var buffer = rtpChannel.allocator.buffer(capacity: packet.serializedSize)
            packet.write(to: &buffer)
            size += buffer.readableBytes
            last = rtpChannel.write(AddressedEnvelope(remoteAddress: destination.rtp, data: buffer))
        }
        rtpChannel.flush()
        if let last { backlog.track(size, last) }
    }

    func send(_ rtcp: RTCPPacket, track: Int) {
        guard let destination = destinations[track], let rtcpChannel = sockets.udpChannels?.rtcp else { return }
        var buffer = rtcpChannel.allocator.buffer(capacity: 64)
        rtcp.write(to: &buffer)
        log.sent(rtcp, track: track)
        rtcpChannel.writeAndFlush(AddressedEnvelope(remoteAddress: destination.rtcp, data: buffer), promise: nil)
    }

    var pendingBytes: Int { backlog.value }
    var sentMedia: SentMediaLog? { log }

    func connectionInfo() -> EventLoopFuture<TCPInfo?> { eventLoop.makeSucceededFuture(nil) }

    func sendPadding(bytes: Int) {
        guard let destination = destinations[0], let rtcpChannel = sockets.udpChannels?.rtcp else { return }
        var sent = 0
        for packet in RTCPPacket.padding(ssrc: 0, name: PlayerAdaptation.probeName, bytes: bytes) {
            sent += packet.count
            rtcpChannel.write(AddressedEnvelope(remoteAddress: destination.rtcp, data: ByteBuffer(bytes: packet)), promise: nil)
        }
        rtcpChannel.flush()
        log.paddingSent(bytes: sent)
    }

    func close() {}
}
