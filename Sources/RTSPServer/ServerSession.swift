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
        /// The announced tracks, from RTP to what the sink hears.
        var reception = PublisherReception(media: [])
        var trackTransports: [Int: RTSPTransport] = [:]
        var recordStarted: UInt64?
        var lastReceiverReport: UInt64 = 0
        /// Our SSRC as a receiver, in the reports we send the publisher.
        var receiverSSRC = UInt32.random(in: 1...UInt32.max)
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
                            address: remoteAddress?.routeKey, droppedPictures: subscriber.droppedFrames)
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

    /// Runs one RTP packet from the publisher through its track (`PublisherReception`) and hands
    /// what completes to the sink, outside the lock. Returns why the publish must stop when the
    /// stream's own parameter sets announce a picture the node does not take (the ANNOUNCE's were
    /// checked before): larger than `maximumPixels`, or refused by the sink. When `forgeable` (UDP),
    /// one such packet is not enough (see `PublisherReception.receive`).
    func receiveRTP(_ buffer: ByteBuffer, track index: Int, maximumPixels: Int, forgeable: Bool = false) -> String? {
        guard let packet = try? RTPPacket(parsing: buffer) else { return nil }
        let (outcome, sink) = state.withLock { state -> (PublisherReception.Outcome?, (any MediaSink)?) in
            guard !state.ended, let started = state.recordStarted else { return (nil, nil) }
            let now = clock.nanoseconds
            let sink = state.sink
            let outcome = state.reception.receive(packet, bytes: buffer.readableBytes, track: index, now: now,
                                                  sinceRecord: Double(now &- started) / 1e9, forgeable: forgeable) { format in
                PublishAdmission.refusal(of: format, maximumPixels: maximumPixels, sink: sink).map { "\(path): \($0)" }
            }
            guard let outcome else { return (nil, nil) }
            state.lastActivity = now
            state.lastMedia = now
            return (outcome, sink)
        }
        if let stop = outcome?.stop { return stop }
        guard let outcome, let sink else { return nil }
        for event in outcome.events { event.deliver(to: sink) }
        return nil
    }

    /// RTCP receiver reports for a publisher, one per track with its transport, when due.
    func receiverReportsIfDue(interval: UInt64) -> [(transport: RTSPTransport, report: RTCPPacket)] {
        state.withLock { state in
            let now = clock.nanoseconds
            guard role == .publisher, !state.ended, state.recordStarted != nil, now &- state.lastReceiverReport >= interval else { return [] }
            state.lastReceiverReport = now
            var reports: [(RTSPTransport, RTCPPacket)] = []
            for index in state.reception.tracks.indices {
                guard let transport = state.trackTransports[index], let block = state.reception.reportBlock(track: index) else { continue }
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
