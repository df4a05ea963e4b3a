import Dispatch
import Ingest
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
    /// What its timeouts, silences and media arrival are measured on.
    let clock: NodeClock
    let created: UInt64
    let state: Mutex<State>

    struct State {
        var machine: RTSPSessionStateMachine
        var lastActivity: UInt64
        /// When the publisher's media last arrived (keep-alive requests do not count).
        var lastMedia: UInt64
        var ended = false
        // Publisher
        var sink: (any MediaSink)?
        /// The formats the sink was last told of: it hears again only when one changes.
        var announcedFormats: (video: VideoFormat?, audio: AudioFormat?) = (nil, nil)
        var tracks: [IncomingTrack] = []
        var trackTransports: [Int: RTSPTransport] = [:]
        var recordStarted: UInt64?
        var lastReceiverReport: UInt64 = 0
        /// Our SSRC as a receiver, in the reports we send the publisher.
        var receiverSSRC = UInt32.random(in: 1...UInt32.max)
        /// Every track's RTP timestamps on one timeline, in seconds since RECORD at the start.
        var timeline = PublisherTimeline(wrapBits: 32, clock: .perTrack([]))
        /// Refusals of the publisher's in-band parameter sets (UDP: one forged packet must not end the publish).
        var refusals = RefusalStreak()
        // Player
        var stream: LiveStream?
        var playerTransports: [Int: RTSPTransport] = [:]
        var subscriber: MediaSubscriber?
        /// Moves the player between its ladder's rungs (nil: pinned, UDP, or not a ladder).
        var adaptation: PlayerAdaptation?
        /// A TCP player's outbox: its acknowledgements keep the session alive.
        var outbox: TCPPlayerOutbox?
    }

    init(id: String, path: String, role: RTSPSessionStateMachine.Role, connection: Channel, clock: NodeClock) {
        self.id = id
        self.path = path
        self.role = role
        self.connection = connection
        self.remoteAddress = connection.remoteAddress
        self.clock = clock
        let now = clock.nanoseconds
        created = now
        self.state = Mutex(State(machine: RTSPSessionStateMachine(role: role), lastActivity: now, lastMedia: now))
    }

    /// RTCP from a UDP player: its receiver reports feed its adaptation, block by block, for the
    /// tracks it plays (blocks about other sources are ignored).
    func receivePlayerRTCP(_ data: ByteBuffer) {
        let (subscriber, adaptation) = state.withLock { ($0.subscriber, $0.adaptation) }
        guard let subscriber, let adaptation else { return }
        let ssrcs = subscriber.ssrcs
        for case let .receiverReport(_, blocks) in RTCPPacket.parseCompound(data) {
            for block in blocks {
                if block.ssrc == ssrcs.video { adaptation.receiverReport(block, track: 0) }
                if block.ssrc == ssrcs.audio, subscriber.hasAudio { adaptation.receiverReport(block, track: 1) }
            }
        }
    }

    /// What operators see of a playing player; nil for publishers and players not playing.
    var playerStatus: PlayerStatus? {
        let (subscriber, adaptation, transports) = state.withLock { ($0.subscriber, $0.adaptation, $0.playerTransports) }
        guard role == .player, let subscriber else { return nil }
        let current = subscriber.currentStream
        return PlayerStatus(session: id, requested: path, stream: current?.path, level: current?.rung?.level,
                            adaptive: adaptation != nil, estimateBitRate: adaptation?.estimate.map { Int($0) },
                            switches: subscriber.switches, transport: transports.values.allSatisfy(\.isTCP) ? "tcp" : "udp",
                            address: remoteAddress?.routeKey)
    }

    func touch() {
        state.withLock { $0.lastActivity = clock.nanoseconds }
    }

    /// A player over TCP that sends nothing back (a recorder, a relay, a small custom client)
    /// is alive as long as its connection acknowledges the media: each sweep asks the kernel.
    func checkAcknowledgements() {
        guard let outbox = state.withLock({ $0.outbox }) else { return }
        outbox.acknowledgementAdvanced { [self] in touch() }
    }

    /// A publisher that announced longer ago than `nanoseconds` and has not sent RECORD.
    func isAnnouncedWithoutRecord(for nanoseconds: UInt64) -> Bool {
        role == .publisher && clock.nanoseconds &- created > nanoseconds && state.withLock { $0.recordStarted == nil }
    }

    /// How long a publisher has sent no media that was accepted.
    var mediaIdleNanoseconds: UInt64 {
        clock.nanoseconds &- state.withLock { $0.lastMedia }
    }

    var idleNanoseconds: UInt64 {
        clock.nanoseconds &- state.withLock { $0.lastActivity }
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
    ///
    /// Packets of another SSRC, or far out of sequence, are dropped (`RTPSourceFilter`): over UDP
    /// anyone can send a datagram with the publisher's source address. A timestamp jump starts a
    /// new timeline: every track re-anchors after the furthest one so ticks stay increasing, and
    /// the sink hears of it before the first unit of the new timeline.
    ///
    /// Returns why the publish must stop when the stream's own parameter sets announce a picture
    /// the node does not take (the ANNOUNCE's were checked before): larger than `maximumPixels`, or
    /// refused by the sink. Nothing of that format reaches the sink. When `forgeable` (UDP), one
    /// such packet is not enough: the refused sets are set aside (with what follows them up to an
    /// IDR the node takes) and the publish stops only when the source keeps sending them for
    /// `refusalPersistence` seconds, as a publisher that really switched does at every keyframe.
    func receiveRTP(_ buffer: ByteBuffer, track index: Int, maximumPixels: Int, forgeable: Bool = false) -> String? {
        guard let packet = try? RTPPacket(parsing: buffer) else { return nil }
        var deliveries: [MediaSinkEvent] = []
        var stop: String?
        let sink: (any MediaSink)? = state.withLock { state in
            guard !state.ended, let started = state.recordStarted, index < state.tracks.count else { return nil }
            let now = clock.nanoseconds
            var track = state.tracks[index]
            guard track.sourceFilter.admit(ssrc: packet.ssrc, sequence: packet.sequenceNumber, now: Double(now) / 1e9) == .accept else {
                state.tracks[index] = track
                return nil
            }
            state.lastActivity = now
            state.lastMedia = now
            track.packetsReceived += 1
            track.bytesReceived += buffer.readableBytes
            guard packet.payloadType == track.media.payloadType || track.media.payloadType >= 96 else {
                state.tracks[index] = track
                return nil
            }
            let sinceStart = Double(now &- started) / 1e9
            track.reception.record(packet, arrival: Double(now) / 1e9, clockRate: track.media.clockRate)
            /// `timestamp` on the session's timeline, in the track's ticks; a jump starts a new timeline.
            func place(_ timestamp: UInt32) -> MediaTime {
                let (ticks, restarted) = state.timeline.place(Int64(timestamp), track: index, arrival: sinceStart)
                if restarted { deliveries.append(.timelineRestarted) }
                return track.time(ticks)
            }
            // The sink hears of a format before any media in it.
            func announceFormats() {
                state.tracks[index] = track
                let formats = state.tracks.formats
                guard formats.video != state.announcedFormats.video || formats.audio != state.announcedFormats.audio else { return }
                state.announcedFormats = formats
                deliveries.append(.formats(video: formats.video, audio: formats.audio))
            }
            for (ready, lost) in track.reorder.push(packet) {
                switch track.kind {
                case var .video(depacketizer):
                    // Held once while it takes the packet: left in `track` and in the table too, its
                    // buffers were shared, so each FU-A fragment copied the whole NAL unit gathered so
                    // far (a keyframe's fragments cost the square of its size). Put back below.
                    track.kind = .unsupported
                    state.tracks[index].kind = .unsupported
                    for unit in depacketizer.push(ready, lostBefore: lost) {
                        // Parameter sets in the unit itself, else the latest seen in-band (sent apart).
                        let sps = unit.nalUnits.last { ($0.first ?? 0) & 0x1F == 7 } ?? depacketizer.sps
                        let pps = unit.nalUnits.last { ($0.first ?? 0) & 0x1F == 8 } ?? depacketizer.pps
                        if let sps, let pps, track.videoFormat?.sps != sps || track.videoFormat?.pps != pps,
                           let format = VideoFormat(sps: sps, pps: pps, frameRate: track.media.frameRate) {
                            let refusal = PublishAdmission.refusal(of: format, maximumPixels: maximumPixels, sink: state.sink).map { "\(path): \($0)" }
                            if let refusal {
                                // Nothing of that format goes on: the unit, and what follows until an IDR with sets we take.
                                depacketizer.restoreParameterSets(sps: track.videoFormat?.sps, pps: track.videoFormat?.pps)
                                if !forgeable || state.refusals.persisted(now: now, for: Self.refusalPersistence) {
                                    stop = refusal
                                }
                                continue
                            }
                            track.videoFormat = format
                        }
                        let time = place(unit.timestamp)
                        guard track.videoFormat != nil else { continue }
                        announceFormats()
                        deliveries.append(.video(unit.nalUnits, time: time, isKeyframe: unit.containsIDR))
                    }
                    track.kind = .video(depacketizer)
                case .audio(var depacketizer, let format):
                    for frame in depacketizer.push(ready, lostBefore: lost) {
                        let time = place(frame.timestamp)
                        announceFormats()
                        deliveries.append(.audio(frame.data, time: time))
                    }
                    track.kind = .audio(depacketizer, format)
                case .unsupported:
                    break
                }
            }
            state.tracks[index] = track
            return state.sink
        }
        if let stop { return stop }
        guard let sink else { return nil }
        for delivery in deliveries { delivery.deliver(to: sink) }
        return nil
    }

    /// Seconds a forgeable (UDP) publisher must keep sending refused parameter sets before its publish stops.
    static let refusalPersistence = 2.0

    /// Refusals close together in time: a publisher that really switched to a refused format sends
    /// it at every keyframe, a forged packet once.
    struct RefusalStreak {
        private var first: UInt64?
        private var last: UInt64 = 0
        private var count = 0

        /// Counts a refusal at `now` (uptime nanoseconds); true once refusals have kept coming for
        /// `seconds`, no two of them further apart than that.
        mutating func persisted(now: UInt64, for seconds: Double) -> Bool {
            let window = UInt64(seconds * 1e9)
            if first == nil || now &- last > window {
                first = now
                count = 0
            }
            last = now
            count += 1
            return count >= 3 && now &- first! >= window
        }
    }

    /// RTCP receiver reports for a publisher, one per track with its transport, when due.
    func receiverReportsIfDue(interval: UInt64) -> [(transport: RTSPTransport, report: RTCPPacket)] {
        state.withLock { state in
            let now = clock.nanoseconds
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
        let (sink, subscriber, adaptation): ((any MediaSink)?, MediaSubscriber?, PlayerAdaptation?) = state.withLock { state in
            guard !state.ended else { return (nil, nil, nil) }
            state.ended = true
            return (state.sink, state.subscriber, state.adaptation)
        }
        adaptation?.stop()
        if role == .publisher, sink != nil {
            registry.publishers.releasePublisher(path, session: id)
            sink?.end(reason: reason)
        }
        subscriber?.leave()
    }
}

/// Every live session, and the UDP source addresses that map to publisher tracks.
final class SessionTable: Sendable {
    private let state = Mutex<(sessions: [String: ServerSession], routes: [String: (session: String, track: Int, isRTCP: Bool)])>(([:], [:]))

    var count: Int { state.withLock { $0.sessions.count } }

    struct Limits: Sendable {
        /// Sessions of the new session's role in all (publishers and players are counted apart).
        var role: Int
        /// Sessions one RTSP connection may hold: a client needs one (at most one per track).
        var perConnection: Int
        /// Sessions of one IP address, whatever the connection.
        var perAddress: Int
    }

    /// Adds a session; nil when it fits, else why not (the caller answers 503 with it).
    func insert(_ session: ServerSession, limits: Limits) -> String? {
        state.withLock { state in
            var (role, connection, address) = (0, 0, 0)
            let ip = session.remoteAddress?.ipAddress
            for other in state.sessions.values {
                if other.role == session.role { role += 1 }
                if other.connection === session.connection { connection += 1 }
                if ip != nil, other.remoteAddress?.ipAddress == ip { address += 1 }
            }
            if role >= limits.role { return session.role == .publisher ? "too many publishers" : "too many players" }
            if connection >= limits.perConnection { return "too many sessions on this connection (at most \(limits.perConnection))" }
            if address >= limits.perAddress { return "too many sessions from this address (at most \(limits.perAddress))" }
            state.sessions[session.id] = session
            return nil
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

    /// Routes datagrams from `address` to a session's track; false when the address is another
    /// live session's. The one exception is a publisher taking over its own stream (it passed that
    /// stream's authentication and claimed it, and sends from the same ports): it replaces the
    /// silent publisher's route. No session can take another stream's route, nor a player a
    /// publisher's. A session's earlier route for the same track and kind is dropped, so repeated
    /// SETUPs do not pile routes up.
    func addRoute(from address: String, session: ServerSession, track: Int, isRTCP: Bool) -> Bool {
        state.withLock { state in
            if let existing = state.routes[address], existing.session != session.id, let owner = state.sessions[existing.session] {
                guard session.role == .publisher, owner.role == .publisher, owner.path == session.path else { return false }
            }
            state.routes = state.routes.filter { !($0.value.session == session.id && $0.value.track == track && $0.value.isRTCP == isRTCP) }
            state.routes[address] = (session.id, track, isRTCP)
            return true
        }
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
