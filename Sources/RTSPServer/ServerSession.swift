import Dispatch
import MediaCore
import NIOCore
import RTSP
import Synchronization

/// One RTSP session (RFC 2326 §3): a publisher's or a player's, keyed by its `Session:` id.
final class ServerSession: Sendable {
    let id: String
    let path: String
    let role: RTSPSessionStateMachine.Role
    /// The RTSP connection that created the session; interleaved media uses it.
    let connection: Channel
    let remoteAddress: SocketAddress?
    let created = DispatchTime.now().uptimeNanoseconds
    let state: Mutex<State>

    struct State {
        var machine: RTSPSessionStateMachine
        var lastActivity = DispatchTime.now().uptimeNanoseconds
        var ended = false
        // Publisher
        var sink: (any PublishSink)?
        var tracks: [IncomingTrack] = []
        var trackTransports: [Int: RTSPTransport] = [:]
        var recordStarted: UInt64?
        var lastReceiverReport: UInt64 = 0
        /// Our SSRC as a receiver, in the reports we send the publisher.
        var receiverSSRC = UInt32.random(in: 1...UInt32.max)
        // Player
        var stream: LiveStream?
        var playerTransports: [Int: RTSPTransport] = [:]
        var subscriber: MediaSubscriber?
    }

    init(id: String, path: String, role: RTSPSessionStateMachine.Role, connection: Channel) {
        self.id = id
        self.path = path
        self.role = role
        self.connection = connection
        self.remoteAddress = connection.remoteAddress
        self.state = Mutex(State(machine: RTSPSessionStateMachine(role: role)))
    }

    func touch() {
        state.withLock { $0.lastActivity = DispatchTime.now().uptimeNanoseconds }
    }

    /// A publisher that announced longer ago than `nanoseconds` and has not sent RECORD.
    func isAnnouncedWithoutRecord(for nanoseconds: UInt64) -> Bool {
        role == .publisher && DispatchTime.now().uptimeNanoseconds &- created > nanoseconds && state.withLock { $0.recordStarted == nil }
    }

    var idleNanoseconds: UInt64 {
        DispatchTime.now().uptimeNanoseconds &- state.withLock { $0.lastActivity }
    }

    /// The track an interleaved channel carries, and whether it is the RTCP half.
    func track(forChannel channel: UInt8) -> (track: Int, isRTCP: Bool)? {
        state.withLock { state in
            for (track, transport) in state.trackTransports {
                if case let .tcp(interleaved?) = transport.lower, interleaved.contains(channel) {
                    return (track, channel != interleaved.lowerBound)
                }
            }
            return nil
        }
    }

    /// Runs one RTP packet from the publisher through its track and hands what completes to the sink.
    /// Returns why the publish must stop when the stream's own parameter sets announce a picture
    /// the node does not take (the ANNOUNCE's were checked before): larger than `maximumPixels`, or
    /// refused by the sink. The caller ends the session; nothing of that format reaches the sink.
    func receiveRTP(_ buffer: ByteBuffer, track index: Int, maximumPixels: Int) -> String? {
        guard let packet = try? RTPPacket(parsing: buffer) else { return nil }
        var newFormat: VideoFormat?
        var videoOut: [(H264AccessUnit, Int64, VideoFormat)] = []
        var audioOut: [([UInt8], Int64, AudioFormat)] = []
        let sink: (any PublishSink)? = state.withLock { state in
            guard !state.ended, let started = state.recordStarted, index < state.tracks.count else { return nil }
            state.lastActivity = DispatchTime.now().uptimeNanoseconds
            var track = state.tracks[index]
            track.packetsReceived += 1
            track.bytesReceived += buffer.readableBytes
            guard packet.payloadType == track.media.payloadType || track.media.payloadType >= 96 else {
                state.tracks[index] = track
                return nil
            }
            let sinceStart = Double(state.lastActivity &- started) / 1e9
            track.reception.record(packet, arrival: Double(state.lastActivity) / 1e9, clockRate: track.media.clockRate)
            for (ready, lost) in track.reorder.push(packet) {
                switch track.kind {
                case var .video(depacketizer):
                    let units = depacketizer.push(ready, lostBefore: lost)
                    if let sps = depacketizer.sps, let pps = depacketizer.pps,
                       track.videoFormat?.sps != sps || track.videoFormat?.pps != pps {
                        if let format = VideoFormat(sps: sps, pps: pps, frameRate: track.media.frameRate) {
                            track.videoFormat = format
                            newFormat = format
                        }
                    }
                    for unit in units {
                        let ticks = track.unwrap(unit.timestamp, startTicks: Int64(sinceStart * 90000))
                        if let format = track.videoFormat { videoOut.append((unit, ticks, format)) }
                    }
                    track.kind = .video(depacketizer)
                case .audio(var depacketizer, let format):
                    for frame in depacketizer.push(ready, lostBefore: lost) {
                        let ticks = track.unwrap(frame.timestamp, startTicks: Int64(sinceStart * Double(format.sampleRate)))
                        audioOut.append((frame.data, ticks, format))
                    }
                    track.kind = .audio(depacketizer, format)
                case .unsupported:
                    break
                }
            }
            state.tracks[index] = track
            return state.sink
        }
        guard let sink else { return nil }
        if let format = newFormat {
            if format.width * format.height > maximumPixels {
                return "\(path): the stream's SPS announces a \(format.width)x\(format.height) picture, larger than the node's limit of \(maximumPixels) pixels"
            }
            if let refusal = sink.refusal(of: format) { return refusal }
        }
        for (unit, ticks, format) in videoOut { sink.receiveVideo(unit, ticks: ticks, format: format) }
        for (frame, ticks, format) in audioOut { sink.receiveAudio(frame, ticks: ticks, format: format) }
        return nil
    }

    /// RTCP receiver reports for a publisher, one per track with its transport, when due.
    func receiverReportsIfDue(interval: UInt64) -> [(transport: RTSPTransport, report: RTCPPacket)] {
        state.withLock { state in
            let now = DispatchTime.now().uptimeNanoseconds
            guard role == .publisher, !state.ended, state.recordStarted != nil, now &- state.lastReceiverReport >= interval else { return [] }
            state.lastReceiverReport = now
            var reports: [(RTSPTransport, RTCPPacket)] = []
            for index in state.tracks.indices {
                guard let transport = state.trackTransports[index], let block = state.tracks[index].reception.reportBlock() else { continue }
                reports.append((transport, .receiverReport(ssrc: state.receiverSSRC, blocks: [block])))
            }
            return reports
        }
    }

    /// Ends the session once: a publisher's sink hears why, a player leaves its stream.
    func end(reason: String, registry: StreamRegistry) {
        let (sink, stream, subscriber): ((any PublishSink)?, LiveStream?, MediaSubscriber?) = state.withLock { state in
            guard !state.ended else { return (nil, nil, nil) }
            state.ended = true
            return (state.sink, state.stream, state.subscriber)
        }
        if role == .publisher, sink != nil {
            registry.releasePublisher(path)
            sink?.publisherEnded(reason: reason)
        }
        if let subscriber { stream?.unsubscribe(subscriber) }
    }
}

/// Every live session, and the UDP source addresses that map to publisher tracks.
final class SessionTable: Sendable {
    private let state = Mutex<(sessions: [String: ServerSession], routes: [String: (session: String, track: Int, isRTCP: Bool)])>(([:], [:]))

    var count: Int { state.withLock { $0.sessions.count } }

    /// Adds a session unless its role is at its limit (publishers and players are counted apart).
    func insert(_ session: ServerSession, limit: Int) -> Bool {
        state.withLock { state in
            guard state.sessions.values.lazy.filter({ $0.role == session.role }).count < limit else { return false }
            state.sessions[session.id] = session
            return true
        }
    }

    func session(_ id: String) -> ServerSession? {
        state.withLock { $0.sessions[id] }
    }

    func remove(_ id: String) {
        state.withLock { state in
            state.sessions.removeValue(forKey: id)
            state.routes = state.routes.filter { $0.value.session != id }
        }
    }

    var all: [ServerSession] { state.withLock { Array($0.sessions.values) } }

    func addRoute(from address: String, session: String, track: Int, isRTCP: Bool) {
        state.withLock { $0.routes[address] = (session, track, isRTCP) }
    }

    func route(from address: String) -> (session: ServerSession, track: Int, isRTCP: Bool)? {
        state.withLock { state in
            guard let route = state.routes[address], let session = state.sessions[route.session] else { return nil }
            return (session, route.track, route.isRTCP)
        }
    }

    static func newIdentifier() -> String {
        var generator = SystemRandomNumberGenerator()
        let value: UInt64 = generator.next()
        return String(value & 0x7FFF_FFFF_FFFF_FFFF, radix: 16, uppercase: true)
    }
}

extension SocketAddress {
    /// `ip:port`, the key for UDP routes.
    var routeKey: String { "\(ipAddress ?? "?"):\(port ?? 0)" }
}
