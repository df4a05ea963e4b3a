#if canImport(Glibc)
import Glibc
#endif
import DequeModule
import Dispatch
import MediaCore
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
    /// Drops what is queued and not yet handed to the network: everything (a skip, a flushing
    /// switch) or a probe's padding (the probe ended).
    func dropQueued(paddingOnly: Bool)
    /// A skip to the live edge: drops what is queued before the newest keyframe it holds that has
    /// waited less than `age`, and says whether there was one (the player goes on from it); else
    /// drops everything, as `dropQueued(paddingOnly: false)`, and says false.
    func dropQueued(keepingKeyframeYoungerThan age: Double) -> Bool
    /// What the player's timing is measured on: its catch-up, its adaptation, its outbox.
    var clock: NodeClock { get }
    /// What its link carries beside each rung's video, as its estimate counts it.
    var linkCost: SwitchingPolicy.LinkCost { get }
    /// The queue on the path that a packet sent now would meet, seconds, where the transport can
    /// tell between its feedback (WebRTC); nil elsewhere.
    var pathQueue: Double? { get }
}

extension PlayerTransport {
    /// RTSP's estimates are compared with the rungs' video rates as they stand.
    var linkCost: SwitchingPolicy.LinkCost { .none }
    var pathQueue: Double? { nil }
    /// RTSP's outboxes do not tell keyframes apart: a skip drops all they hold.
    func dropQueued(keepingKeyframeYoungerThan age: Double) -> Bool {
        dropQueued(paddingOnly: false)
        return false
    }
}

/// What was sent to one UDP player, per track: the meters its RTCP receiver reports are checked
/// against, and the probe padding sent beside the media.
final class SentMediaLog: Sendable {
    let clock: NodeClock

    init(clock: NodeClock) {
        self.clock = clock
    }
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
        let now = clock.seconds
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

/// Counts every byte a connection writes, at the socket's end of its pipeline, so offsets in
/// what a player was written line up with the kernel's `bytes_acked` (RTSP replies included).
final class WrittenBytesCounter: ChannelOutboundHandler, Sendable {
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    private let count = Atomic<UInt64>(0)
    var value: UInt64 { count.load(ordering: .relaxed) }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        count.add(UInt64(unwrapOutboundIn(data).readableBytes), ordering: .relaxed)
        context.write(data, promise: promise)
    }
}

/// A TCP player's media on its way out. The node holds it until the connection may take more,
/// so what is outstanding (written, not yet acknowledged) stays under
/// `LinkEstimator.outstandingLimit`: beyond that, bytes wait in the kernel and in the path's
/// queues, where a skip cannot reach them and a bloated bottleneck makes seconds of lag. What is
/// held here a skip or a flushing switch drops. It also records where each piece of media ended
/// in the byte stream and when it was handed over, so the bytes the player acknowledged say how
/// long the oldest media it has not received has waited: its lag, right from the first packet.
final class TCPPlayerOutbox: Sendable {
    private struct Entry {
        var buffer: ByteBuffer
        var isMedia: Bool
        var isVideo: Bool
        var queuedAt: Double
    }

    private struct State {
        var held = Deque<Entry>()
        var heldBytes = 0
        /// Media written, oldest first: where it ends in the connection's bytes, and when it was handed over.
        var written = Deque<(end: UInt64, queuedAt: Double)>()
        var acknowledged: UInt64 = 0
        /// A player without adaptation keeps this; an adaptive one's follows its link.
        var limit = 256 * 1024
        /// A held picture was dropped: later pictures reference it, so video waits for the next keyframe.
        var dropUntilKeyframe = false
        var retryScheduled = false
        /// Bytes acknowledged at the last liveness check.
        var livenessMark: UInt64 = 0
    }

    private let channel: Channel
    private let counter: WrittenBytesCounter
    private let state = Mutex(State())

    let clock: NodeClock

    init(channel: Channel, counter: WrittenBytesCounter, clock: NodeClock) {
        self.channel = channel
        self.counter = counter
        self.clock = clock
    }

    var heldBytes: Int { state.withLock { $0.heldBytes } }

    /// Queues one picture's packets (or audio, or padding) and sends what the limit lets through.
    func enqueue(_ buffer: ByteBuffer, isMedia: Bool, isVideo: Bool, startsPicture: Bool) {
        let now = clock.seconds
        state.withLock { state in
            if isVideo, state.dropUntilKeyframe {
                guard startsPicture else { return }
                state.dropUntilKeyframe = false
            }
            state.held.append(Entry(buffer: buffer, isMedia: isMedia, isVideo: isVideo, queuedAt: now))
            state.heldBytes += buffer.readableBytes
        }
        if channel.eventLoop.inEventLoop { drain() } else { channel.eventLoop.execute { self.drain() } }
    }

    /// Drops everything held (a skip or a flushing switch; video resumes at the next keyframe if
    /// a picture went), or only padding.
    func dropHeld(paddingOnly: Bool = false) {
        state.withLock { state in
            if paddingOnly {
                state.held.removeAll { !$0.isMedia }
            } else {
                if state.held.contains(where: \.isVideo) { state.dropUntilKeyframe = true }
                state.held.removeAll()
            }
            state.heldBytes = state.held.reduce(0) { $0 + $1.buffer.readableBytes }
        }
    }

    /// The kernel's figures at `time`: what was acknowledged, and the least round trip (which
    /// every acknowledgement waits for, whatever the link carries).
    func observe(_ info: TCPInfo, at time: Double) -> LinkObservation {
        let (backlog, held) = state.withLock { state -> (Double, Int) in
            state.acknowledged = max(state.acknowledged, info.bytesAcked)
            while let first = state.written.first, first.end <= state.acknowledged { state.written.removeFirst() }
            let oldest = [state.written.first?.queuedAt, state.held.first(where: \.isMedia)?.queuedAt].compactMap { $0 }.min()
            let waited = oldest.map { time - $0 } ?? 0
            return (max(0, waited - Double(info.minimumRoundTripTime) / 1e6), state.heldBytes)
        }
        drain()
        // The sender waited on the link: media held here, bytes the kernel has not sent, or the
        // kernel's own last rate sample marked as limited by the network.
        let waiting = held > 0 || info.notSentBytes > 0 || !info.deliveryRateAppLimited
        return LinkObservation(time: time, deliveredBytes: info.bytesAcked, senderWaiting: waiting, backlogSeconds: backlog,
                               rateSample: info.deliveryRate > 0 ? Double(info.deliveryRate) * 8 : nil,
                               rateSampleAppLimited: info.deliveryRateAppLimited)
    }

    /// Asks the kernel whether the player acknowledged more since the last time, and calls
    /// `progress` if it did.
    func acknowledgementAdvanced(_ progress: @escaping @Sendable () -> Void) {
        channel.tcpInfo().whenSuccess { [self] info in
            guard let info else { return }
            let advanced = state.withLock { state -> Bool in
                defer { state.livenessMark = info.bytesAcked }
                return info.bytesAcked > state.livenessMark
            }
            if advanced { progress() }
        }
    }

    func setLimit(_ bytes: Int) {
        state.withLock { $0.limit = bytes }
    }

    /// Writes what the limit lets through, on the channel's event loop; when the limit holds
    /// media back, the kernel is asked again shortly (its acknowledgements move the limit).
    private func drain(refreshed: Bool = false) {
        guard channel.eventLoop.inEventLoop else {
            channel.eventLoop.execute { self.drain() }
            return
        }
        var wrote = false
        while true {
            let written = counter.value
            let entry: Entry? = state.withLock { state in
                guard let first = state.held.first else { return nil }
                let outstanding = written &- min(written, state.acknowledged)
                // One entry always goes when nothing is outstanding, however large.
                guard outstanding == 0 || outstanding + UInt64(first.buffer.readableBytes) <= UInt64(state.limit) else { return nil }
                state.held.removeFirst()
                state.heldBytes -= first.buffer.readableBytes
                return first
            }
            guard let entry else { break }
            channel.write(entry.buffer, promise: nil)
            wrote = true
            if entry.isMedia {
                let end = counter.value
                state.withLock { $0.written.append((end, entry.queuedAt)) }
            }
        }
        if wrote { channel.flush() }
        guard state.withLock({ $0.heldBytes > 0 }) else { return }
        // Held back by acknowledgements last read: read them again now (on the event loop the
        // kernel answers at once), and go on if they moved.
        let advanced = NIOLoopBoundBox(false, eventLoop: channel.eventLoop)
        channel.tcpInfo().whenSuccess { [self] info in
            guard let info else { return }
            advanced.value = state.withLock { state in
                defer { state.acknowledged = max(state.acknowledged, info.bytesAcked) }
                return info.bytesAcked > state.acknowledged
            }
        }
        if advanced.value, !refreshed { return drain(refreshed: true) }
        let retry = state.withLock { state -> Bool in
            guard state.heldBytes > 0, !state.retryScheduled else { return false }
            state.retryScheduled = true
            return true
        }
        guard retry else { return }
        channel.eventLoop.scheduleTask(in: .milliseconds(5)) { [self] in
            channel.tcpInfo().whenComplete { [self] result in
                state.withLock { state in
                    state.retryScheduled = false
                    if case let .success(info?) = result { state.acknowledged = max(state.acknowledged, info.bytesAcked) }
                }
                guard channel.isActive else { return dropHeld() }
                drain()
            }
        }
    }
}

struct InterleavedTransport: PlayerTransport {
    let channel: Channel
    /// Per track: the RTP channel number (RTCP is the next one).
    let channels: [Int: UInt8]
    let backlog = BacklogCounter()
    /// With a counter of the connection's bytes, media goes through an outbox (a player's
    /// connection); without one (a push to an origin), straight to the channel.
    let outbox: TCPPlayerOutbox?
    let clock: NodeClock

    init(channel: Channel, channels: [Int: UInt8], counter: WrittenBytesCounter? = nil, clock: NodeClock) {
        self.channel = channel
        self.channels = channels
        self.clock = clock
        outbox = counter.map { TCPPlayerOutbox(channel: channel, counter: $0, clock: clock) }
    }

    func send(_ packets: [RTPPacket], track: Int) {
        guard let number = channels[track], !packets.isEmpty else { return }
        var buffer = channel.allocator.buffer(capacity: packets.reduce(0) { $0 + $1.serializedSize + 4 })
        var scratch = channel.allocator.buffer(capacity: 1500)
        for packet in packets {
            scratch.clear()
            packet.write(to: &scratch)
            RTSPSerialization.writeInterleaved(channel: number, payload: scratch, to: &buffer)
        }
        if let outbox {
            // A keyframe's first packet carries its parameter sets, or its IDR's first fragment.
            let keyframe = track == 0 && H264Packetizer.startsKeyframe(packets[0].payload)
            outbox.enqueue(buffer, isMedia: true, isVideo: track == 0, startsPicture: keyframe)
            return
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

    var pendingBytes: Int { backlog.value + (outbox?.heldBytes ?? 0) }
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
        // Padding waits its turn behind media, under the same limit: a probe cannot bloat the path.
        if let outbox { return outbox.enqueue(buffer, isMedia: false, isVideo: false, startsPicture: false) }
        channel.writeAndFlush(buffer, promise: nil)
    }

    func dropQueued(paddingOnly: Bool) {
        outbox?.dropHeld(paddingOnly: paddingOnly)
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
    let log: SentMediaLog
    var clock: NodeClock { log.clock }

    init(sockets: any DatagramSockets, destinations: [Int: (rtp: SocketAddress, rtcp: SocketAddress)], eventLoop: EventLoop, clock: NodeClock) {
        self.sockets = sockets
        self.destinations = destinations
        self.eventLoop = eventLoop
        log = SentMediaLog(clock: clock)
    }

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

    func dropQueued(paddingOnly: Bool) {}

    func close() {}
}
