import Dispatch
#if canImport(Glibc)
import Glibc
#endif
import Ingest
import Logging
import MediaCore
import NIOCore
import NIOPosix
import RTSP
import RTSPServer
import ServiceLifecycle
import Synchronization
import WebRTC
import WebRTCTransport

/// WebRTC playback over WHEP (RFC 9725): one UDP port for every viewer, packets told apart by
/// their first byte (RFC 7983: STUN, DTLS, SRTP/SRTCP). The node is ICE-lite and the DTLS server;
/// each viewer is a `PacketPlayer` of its rung, so it shares the pictures RTSP players get.
public final class WebRTCService: Sendable {
    public struct Configuration: Sendable {
        public var host = "127.0.0.1"
        /// The one UDP port (MediaMTX's default for WebRTC media).
        public var port = 8189
        /// Addresses announced as host candidates (NAT, Kubernetes); empty: the listening address
        /// (on a wildcard, the node's interfaces' addresses: `announcedHosts`).
        public var candidates: [String] = []
        /// Viewers at once, and from one IP address (as for RTSP connections).
        public var maximumSessions = 256
        public var maximumSessionsPerAddress = 16
        /// Seconds a session may take to finish ICE and DTLS, and seconds of silence (no STUN
        /// consent check, no RTCP) after which it ends.
        public var setupTimeout = 15.0
        public var silenceTimeout = 30.0
        /// What viewers' timeouts, pacing and feedback are measured on.
        public var clock = NodeClock.system
        /// Paced media goes to the kernel with UDP segmentation offload where Linux has it (see
        /// `SegmentedRuns`). The node turns it off by itself if the kernel refuses a send.
        public var segmentationOffload = true
        public init() {}
    }

    /// Why an offer was not served: the HTTP status and the reason (the API's one error body).
    public struct Refusal: Error, Equatable, CustomStringConvertible {
        public var status: Int
        public var reason: String
        public var description: String { reason }
    }

    public let configuration: Configuration
    let registry: StreamRegistry
    let logger: Logger
    let identity: DTLSIdentity
    let quota: ConnectionQuota
    let refusals = RefusalLog()
    private let state = Mutex<State>(State())
    /// Whether paced media goes out in segmented sends (off: the kernel has no `UDP_SEGMENT`,
    /// the operator turned it off, or a segmented send failed once).
    private let segmenting: Atomic<Bool>
    private let segmentedCount = Atomic<Int>(0)

    /// Whether paced media goes out in segmented sends now, and how many datagrams went so.
    public var segmentationOffload: Bool { segmenting.load(ordering: .relaxed) }
    public var segmentedDatagrams: Int { segmentedCount.load(ordering: .relaxed) }

    struct State {
        /// The port's socket: on the listening address, or the wildcard's catch-all.
        var channel: Channel?
        /// On a wildcard, a socket on each IPv4 address of the node's interfaces, same port: a
        /// reply leaves from the address the viewer reached (`replyVia`), which ICE requires
        /// (RFC 8445 §7.2.5.2.1). The wildcard socket alone replies from whichever address the
        /// kernel's route picks, and swift-nio cannot send with `IP_PKTINFO` to choose it.
        var addressChannels: [Channel] = []
        /// The socket each viewer's address reached, where not `channel`.
        var replyVia: [SocketAddress: Channel] = [:]
        var group: MultiThreadedEventLoopGroup?
        var port = 0
        var byUfrag: [String: WebRTCViewer] = [:]
        var byID: [String: WebRTCViewer] = [:]
        var byAddress: [SocketAddress: WebRTCViewer] = [:]
        var sweep: RepeatedTask?
        /// The host candidates every answer carries (`announcedHosts`, at start).
        var announced: [String] = []
    }

    public init(configuration: Configuration, registry: StreamRegistry, logger: Logger = Logger(label: "abr.webrtc")) throws {
        self.configuration = configuration
        self.registry = registry
        self.logger = logger
        identity = try DTLSIdentity()
        quota = ConnectionQuota(total: configuration.maximumSessions, perAddress: configuration.maximumSessionsPerAddress)
        segmenting = Atomic(configuration.segmentationOffload && System.supportsUDPSegmentationOffload)
    }

    /// Binds the UDP port; returns it (useful with port 0).
    public func start() throws -> Int {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        do {
            // Every socket of the port on the one event loop: the pacing timer serves them all.
            let bootstrap = DatagramBootstrap(group: group)
                .channelOption(.socketOption(.so_reuseaddr), value: 1)
                .channelOption(.socketOption(.so_rcvbuf), value: 4 << 20)
                .channelOption(.socketOption(.so_sndbuf), value: 4 << 20)
                .channelInitializer { [self] channel in
                    channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(DatagramHandler(service: self)) }
                }
            let channel = try bootstrap.bind(host: configuration.host, port: configuration.port).wait()
            let port = channel.localAddress?.port ?? configuration.port
            let interfaces = ((try? System.enumerateDevices()) ?? []).compactMap { device -> String? in
                guard case .v4 = device.address else { return nil }
                return device.address?.ipAddress
            }
            var addressChannels: [Channel] = []
            if configuration.host == "0.0.0.0" {
                // The kernel gives a datagram to the socket bound to its destination address
                // before the wildcard's; an address that cannot be bound stays with the wildcard.
                for address in Set(interfaces).sorted() {
                    do {
                        addressChannels.append(try bootstrap.bind(host: address, port: port).wait())
                    } catch {
                        logger.warning("WebRTC: replies to viewers who reach this address may leave from another",
                                       metadata: ["webrtc.address": "\(address)", "error": "\(error)"])
                    }
                }
            }
            let announced = Self.announcedHosts(candidates: configuration.candidates, host: configuration.host, interfaceAddresses: interfaces)
            let sweep = channel.eventLoop.scheduleRepeatedTask(initialDelay: .seconds(1), delay: .seconds(1)) { [self] _ in expire() }
            state.withLock {
                $0.channel = channel
                $0.addressChannels = addressChannels
                $0.group = group
                $0.port = port
                $0.sweep = sweep
                $0.announced = announced
            }
            logger.info("WebRTC listening", metadata: ["webrtc.port": "\(port)", "webrtc.candidates": "\(announced.joined(separator: ", "))",
                                                       "dtls.fingerprint": "\(identity.fingerprint)"])
            return port
        } catch {
            try? group.syncShutdownGracefully()
            throw error
        }
    }

    public var port: Int { state.withLock { $0.port } }
    /// The host candidates answers carry (set at start).
    public var announcedCandidates: [String] { state.withLock { $0.announced } }

    /// The host candidates a viewer is offered: the operator's (`--webrtc-candidate`), else the
    /// listening address. On a wildcard (`0.0.0.0`) that address names no host, so the node offers
    /// every IPv4 address of its interfaces, loopback last, as MediaMTX gathers them: a browser
    /// on another host then reaches the node without `--webrtc-candidate` (it had been offered
    /// 127.0.0.1 alone, and could not).
    static func announcedHosts(candidates: [String], host: String, interfaceAddresses: [String]) -> [String] {
        guard candidates.isEmpty else { return candidates }
        guard host == "0.0.0.0" else { return [host] }
        var seen = Set<String>()
        let unique = interfaceAddresses.filter { seen.insert($0).inserted }
        let ordered = unique.filter { !$0.hasPrefix("127.") } + unique.filter { $0.hasPrefix("127.") }
        return ordered.isEmpty ? ["127.0.0.1"] : ordered
    }

    public func shutdown() {
        let (channels, group, viewers, sweep) = state.withLock { state in
            defer {
                state.byUfrag = [:]
                state.byID = [:]
                state.byAddress = [:]
                state.replyVia = [:]
                state.channel = nil
                state.addressChannels = []
                state.group = nil
            }
            return (state.channel.map { [$0] + state.addressChannels } ?? [], state.group, Array(state.byID.values), state.sweep)
        }
        sweep?.cancel()
        pacing.withLock { pacing in
            pacing.next?.task.cancel()
            pacing.next = nil
            pacing.viewers = [:]
        }
        for viewer in viewers { viewer.end(reason: "node shutting down") }
        for channel in channels { try? channel.close().wait() }
        try? group?.syncShutdownGracefully()
    }

    // MARK: - WHEP

    /// A WHEP POST: `path` names a rung (`live/stream1_2`); `pinned` keeps the viewer on it.
    /// Returns the session's id (its resource) and the SDP answer.
    public func offer(_ sdp: String, path requested: String, pinned: Bool, from address: String) throws(Refusal) -> (id: String, answer: String) {
        guard let asked = registry.existingStream(requested), asked.isPlayable else {
            throw Refusal(status: 404, reason: "no such stream: \(requested)")
        }
        let (path, stream) = try Self.webRTCRung(for: asked, path: requested, pinned: pinned, registry: registry)
        guard let video = stream.video else { throw Refusal(status: 404, reason: "no such stream: \(requested)") }
        let offer: WebRTCOffer
        do {
            offer = try WebRTCOffer.parse(sdp)
        } catch {
            throw Refusal(status: 400, reason: error.description)
        }
        guard video.sps.count >= 4 else { throw Refusal(status: 406, reason: "the stream's SPS is too short to name its profile") }
        let profile = lowercaseHex(video.sps[1...3])
        let (channel, port, hosts) = state.withLock { ($0.channel, $0.port, $0.announced) }
        guard let channel else { throw Refusal(status: 503, reason: "WebRTC is not listening") }
        guard quota.admit(address) else {
            refusals.log(logger, "WebRTC session refused: too many sessions", kind: "sessions", metadata: ["webrtc.address": "\(address)"])
            throw Refusal(status: 503, reason: "too many WebRTC sessions (\(quota.total) in all, \(quota.perAddress) from one address)")
        }
        var generator = SystemRandomNumberGenerator()
        let ufrag = Self.token(8, using: &generator)
        let plan = WHEPAnswer.Plan(iceUfrag: ufrag, icePassword: Self.token(24, using: &generator), fingerprint: identity.fingerprint,
                                   candidates: hosts.map { ($0, port) }, videoProfileLevelID: profile,
                                   videoSSRC: generator.next(), retransmissionSSRC: generator.next(),
                                   audioSSRC: stream.audio != nil && stream.carriesOpus ? generator.next() : nil,
                                   streamID: path.replacingOccurrences(of: "/", with: "-"))
        let answer: WHEPAnswer
        do {
            answer = try WHEPAnswer.answer(offer, plan: plan)
        } catch {
            quota.release(address)
            throw Refusal(status: error.status, reason: error.reason)
        }
        let viewer: WebRTCViewer
        do {
            viewer = try WebRTCViewer(service: self, channel: channel, path: path, pinned: pinned, plan: plan, answer: answer,
                                      remoteAddress: address)
        } catch {
            quota.release(address)
            throw Refusal(status: 500, reason: "cannot start DTLS: \(error)")
        }
        state.withLock {
            $0.byUfrag[ufrag] = viewer
            $0.byID[viewer.id] = viewer
        }
        logger.info("WebRTC viewer offered", metadata: ["stream.guid": "\(path)", "session": "\(viewer.id)", "video.payloadType": "\(answer.videoPayloadType)"])
        return (viewer.id, answer.sdp)
    }

    /// The rung a viewer asking for `path` starts on: that rung, unless WebRTC cannot carry it
    /// (`LiveStream.webRTCRefusal`); then, for an adaptive viewer, the highest rung of its ladder
    /// that WebRTC can carry, as an RTSP player asking for a shed rung gets the next one. A pinned
    /// viewer asked for that rung alone: it gets 406 and the reason, with the rungs it could watch.
    static func webRTCRung(for stream: LiveStream, path: String, pinned: Bool,
                           registry: StreamRegistry) throws(Refusal) -> (path: String, stream: LiveStream) {
        guard let why = stream.webRTCRefusal else { return (path, stream) }
        let carried = (stream.ladder ?? [:]).sorted { $0.key < $1.key }.compactMap { _, rung -> (String, LiveStream)? in
            guard let candidate = registry.existingStream(rung), candidate.isPlayable, candidate.webRTCRefusal == nil else { return nil }
            return (rung, candidate)
        }
        if !pinned, let best = carried.first { return best }
        let others = carried.isEmpty ? "no rung of this stream can be" : "WebRTC viewers can watch " + carried.map(\.0).joined(separator: ", ")
        throw Refusal(status: 406, reason: "\(path) cannot be sent over WebRTC: \(why); \(others)")
    }

    /// A WHEP DELETE: false when there is no such session.
    public func end(id: String) -> Bool {
        guard let viewer = state.withLock({ $0.byID[id] }) else { return false }
        viewer.end(reason: "the viewer deleted its session")
        return true
    }

    public var sessionCount: Int { state.withLock { $0.byID.count } }

    /// Each viewer's figures, for status.
    public var viewers: [WebRTCViewer.Status] { state.withLock { Array($0.byID.values) }.map(\.status) }

    // MARK: - Datagrams

    /// A datagram from `address`, which reached the socket `channel`.
    func receive(_ bytes: [UInt8], from address: SocketAddress, on channel: Channel) {
        guard let first = bytes.first else { return }
        if STUNMessage.mightBeSTUN(first) {
            let ip = address.ipAddress.flatMap(Self.addressBytes) ?? [0, 0, 0, 0]
            let outcome = ICELiteResponder.respond(to: bytes, from: ip, port: UInt16(truncatingIfNeeded: address.port ?? 0)) { ufrag in
                state.withLock { $0.byUfrag[ufrag]?.credentials }
            }
            switch outcome {
            case let .answer(response, ufrag, nominated):
                send([response], to: address, via: channel)
                guard let viewer = state.withLock({ $0.byUfrag[ufrag] }) else { return }
                if let previous = viewer.consent(from: address, nominated: nominated) {
                    state.withLock { state in
                        if let previous {
                            state.byAddress.removeValue(forKey: previous)
                            state.replyVia.removeValue(forKey: previous)
                        }
                        state.byAddress[address] = viewer
                        state.replyVia[address] = channel === state.channel ? nil : channel
                    }
                }
            case let .refuse(response, reason):
                if let response { send([response], to: address, via: channel) }
                refusals.log(logger, "STUN refused: \(reason)", kind: "stun", metadata: ["webrtc.peer": "\(address)"])
            case .ignore:
                break
            }
            return
        }
        // DTLS and SRTP only from an address that passed ICE for its session.
        guard let viewer = state.withLock({ $0.byAddress[address] }) else {
            refusals.log(logger, "datagram from an address without ICE dropped", kind: "unknown-peer", metadata: ["webrtc.peer": "\(address)"])
            return
        }
        if first >= 20, first <= 63 {
            viewer.receiveDTLS(bytes)
        } else if first >= 128, first <= 191 {
            viewer.receiveSRTP(bytes)
        }
    }

    func send(_ bytes: [UInt8], to address: SocketAddress) {
        send([bytes], to: address)
    }

    /// Viewers whose pacers hold media, and the one timer that serves them all. A timer of each
    /// viewer's own, and a wake-up for each picture, woke the port's event loop some 6,000 times
    /// a second for 50 viewers of a 2 Mbit/s rung: a quarter of what that thread spent.
    /// The timer sleeps until the first moment any pacer may let something go (an audio packet
    /// due, a picture's budget paid back), at most one `pacingTick` apart. A tick every 5 ms
    /// whether or not anything was due woke the loop 200 times a second: at 10 viewers, 14 % of
    /// the loop's time went to switching its thread in for ticks that mostly found nothing to send.
    private let pacing = Mutex<Pacing>(Pacing())

    struct Pacing {
        var viewers: [ObjectIdentifier: WebRTCViewer] = [:]
        /// The next pace: when, and its timer (nil: no pacer holds anything).
        var next: (deadline: NIODeadline, task: Scheduled<Void>)?
        /// The tick's datagrams, every viewer's end to end. Kept from tick to tick: once the
        /// flush has sent them it is the only reference to its storage, so the next tick writes
        /// into the same memory (a buffer for each viewer each tick was 10,000 allocations a
        /// second for 50 viewers). A tick whose datagrams wait in the channel gets a new one.
        var buffer: ByteBuffer?
    }

    /// A viewer's datagrams of this tick: where they lie in the tick's buffer, and their sizes.
    struct PacedDatagrams {
        var peer: SocketAddress
        var offset: Int
        var sizes: [Int]
    }

    /// A tick's buffer past this size is not kept (a burst of keyframes for many viewers).
    static let keptTickBufferBytes = 1 << 20

    /// The shortest time between two paces: what a packet may wait beyond its due time.
    static let pacingTick = TimeAmount.milliseconds(5)

    /// `viewer`'s pacer holds media that may leave in `seconds` (`MediaPacer.nextRelease`): it is
    /// served then, or by a pace already planned within a tick after that, and at every pace
    /// until its pacer is empty.
    func pace(_ viewer: WebRTCViewer, in seconds: Double) {
        guard let channel = state.withLock({ $0.channel }) else { return }
        let due = NIODeadline.now() + .nanoseconds(Int64(max(0, min(1, seconds)) * 1e9))
        pacing.withLock { pacing in
            pacing.viewers[ObjectIdentifier(viewer)] = viewer
            plan(&pacing, at: due, on: channel.eventLoop)
        }
    }

    /// A pace at `due`, unless one is planned by a tick after it: that wake-up serves this too.
    private func plan(_ pacing: inout Pacing, at due: NIODeadline, on loop: EventLoop) {
        if let next = pacing.next, next.deadline <= due + Self.pacingTick { return }
        pacing.next?.task.cancel()
        pacing.next = (due, loop.scheduleTask(deadline: due) { [self] in pace() })
    }

    private func pace() {
        guard let channel = state.withLock({ $0.channel }) else { return }
        var buffer = ByteBuffer()
        let started = NIODeadline.now()
        let viewers = pacing.withLock { pacing in
            if let kept = pacing.buffer.take() { buffer = kept }
            // This pace is the one planned (or a later one was planned since, which stays).
            if let next = pacing.next, next.deadline <= started { pacing.next = nil }
            return Array(pacing.viewers.values)
        }
        if buffer.capacity == 0 { buffer = channel.allocator.buffer(capacity: 64 * 1024) }
        buffer.clear()  // new storage only if the last tick's datagrams still wait in the channel
        var emptied: [WebRTCViewer] = []
        var datagrams: [PacedDatagrams] = []
        var soonest: Double?
        for viewer in viewers {
            let (next, written) = viewer.releasePaced(into: &buffer)
            if let next { soonest = min(soonest ?? next, next) } else { emptied.append(viewer) }
            if let written { datagrams.append(written) }
        }
        // Sliced once every viewer has written: a slice shares the buffer's storage, and a
        // write after one would copy it all.
        for written in datagrams {
            let length = written.sizes.reduce(0, +)
            if let slice = buffer.getSlice(at: written.offset, length: length) { write(slice, sizes: written.sizes, to: written.peer) }
        }
        // Every viewer's datagrams of this tick leave in one flush: one `sendmmsg` for many
        // viewers instead of a system call each (a socket with nothing written returns at once).
        channel.flush()
        for other in state.withLock({ $0.addressChannels }) { other.flush() }
        let now = NIODeadline.now()
        pacing.withLock { pacing in
            if buffer.capacity <= Self.keptTickBufferBytes { pacing.buffer = buffer }
            // A viewer whose pacer took media again since it emptied stays (its `pace(_:in:)`
            // found it still here, or comes after this).
            for viewer in emptied where !viewer.isPacing { pacing.viewers[ObjectIdentifier(viewer)] = nil }
            if let soonest {
                plan(&pacing, at: max(now + Self.pacingTick, now + .nanoseconds(Int64(min(1, soonest) * 1e9))), on: channel.eventLoop)
            }
        }
    }

    /// Datagrams for one peer (handshakes, STUN, RTCP), written together and flushed once: NIO
    /// hands a flush's datagrams to the kernel in one `sendmmsg`.
    func send(_ datagrams: [[UInt8]], to address: SocketAddress, via socket: Channel? = nil) {
        guard !datagrams.isEmpty, let channel = socket ?? replyChannel(to: address) else { return }
        for bytes in datagrams {
            channel.write(AddressedEnvelope(remoteAddress: address, data: channel.allocator.buffer(bytes: bytes)), promise: nil)
        }
        channel.flush()
    }

    /// `write(_:sizes:to:)`, flushed now (resends and probes, outside the pacing tick).
    func send(_ buffer: ByteBuffer, sizes: [Int], to address: SocketAddress) {
        write(buffer, sizes: sizes, to: address)
        replyChannel(to: address)?.flush()
    }

    /// The socket replies to `address` leave from: the one it reached.
    private func replyChannel(to address: SocketAddress) -> Channel? {
        state.withLock { $0.replyVia[address] ?? $0.channel }
    }

    /// Datagrams for one peer laid end to end in `buffer` (`sizes` their lengths, in order),
    /// written for the pacing tick's flush: each run of one size goes as one segmented send
    /// (`SegmentedRuns`), the rest as plain datagrams. The slices share the buffer: no copies.
    func write(_ buffer: ByteBuffer, sizes: [Int], to address: SocketAddress) {
        guard !sizes.isEmpty, let channel = replyChannel(to: address) else { return }
        let segmented = segmenting.load(ordering: .relaxed)
        var offset = buffer.readerIndex
        var watched = false
        for run in segmented ? SegmentedRuns.runs(sizes) : sizes.indices.map({ $0..<($0 + 1) }) {
            let length = sizes[run].reduce(0, +)
            guard let slice = buffer.getSlice(at: offset, length: length) else { return }
            offset += length
            guard run.count > 1 else {
                channel.write(AddressedEnvelope(remoteAddress: address, data: slice), promise: nil)
                continue
            }
            segmentedCount.add(run.count, ordering: .relaxed)
            // A kernel or device that cannot segment refuses every segmented send alike, so one
            // watched send a batch is enough to learn it (a promise for each was an allocation
            // and a callback per send on the port's event loop).
            var promise: EventLoopPromise<Void>?
            if !watched {
                watched = true
                promise = channel.eventLoop.makePromise(of: Void.self)
                promise?.futureResult.whenFailure { [self] error in segmentedSendFailed(error) }
            }
            channel.write(AddressedEnvelope(remoteAddress: address, data: slice,
                                            metadata: .init(ecnState: .transportNotCapable, packetInfo: nil, segmentSize: sizes[run.lowerBound])),
                          promise: promise)
        }
    }

    /// A kernel or a device that cannot segment (no checksum offload on the route's device, a
    /// path MTU under the segment) refuses the whole send: the node stops segmenting. What that
    /// send carried is lost once, as a dropped packet would be, and NACKs recover it. Other
    /// failures (a socket buffer full for a moment) are the send's own and change nothing.
    func segmentedSendFailed(_ error: Error) {
        guard let failure = error as? IOError, Self.segmentationRefusals.contains(failure.errnoCode),
              segmenting.exchange(false, ordering: .relaxed) else { return }
        logger.warning("UDP segmentation offload refused; WebRTC media goes out a datagram at a time", metadata: ["error": "\(error)"])
    }

    /// What the kernel answers a segmented send it cannot make (`udp_send_skb`, `udp_sendmsg`).
    static let segmentationRefusals: Set<CInt> = [EIO, EINVAL, EMSGSIZE, EOPNOTSUPP, ENOPROTOOPT]

    /// Observers of viewers' moves between rungs (status, events, metrics), as for RTSP players.
    private let switchObservers = Mutex<[@Sendable (PlayerSwitchEvent) -> Void]>([])

    public func observeViewerSwitches(_ handler: @escaping @Sendable (PlayerSwitchEvent) -> Void) {
        switchObservers.withLock { $0.append(handler) }
    }

    func viewerSwitched(id: String, requested: String, from: Int, to: Int, reason: String, ladder: [Int: String]) {
        let event = PlayerSwitchEvent(session: id, requested: requested, from: ladder[from] ?? "", to: ladder[to] ?? "",
                                      fromLevel: from, toLevel: to, reason: reason)
        for observer in switchObservers.withLock({ $0 }) { observer(event) }
    }

    func ended(_ viewer: WebRTCViewer) {
        let removed = state.withLock { state -> Bool in
            guard state.byID.removeValue(forKey: viewer.id) != nil else { return false }
            state.byUfrag.removeValue(forKey: viewer.credentials.localUfrag)
            if let address = viewer.peerAddress {
                state.byAddress.removeValue(forKey: address)
                state.replyVia.removeValue(forKey: address)
            }
            return true
        }
        if removed { quota.release(viewer.remoteAddress) }
    }

    /// Sessions that never finished ICE and DTLS, or went silent, end.
    private func expire() {
        let now = configuration.clock.nanoseconds
        for viewer in state.withLock({ Array($0.byID.values) }) {
            if let reason = viewer.expiry(now: now, setupTimeout: configuration.setupTimeout, silenceTimeout: configuration.silenceTimeout) {
                viewer.end(reason: reason)
            }
        }
    }

    static func token(_ length: Int, using generator: inout SystemRandomNumberGenerator) -> String {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        return String((0..<length).map { _ in alphabet[Int(generator.next() % UInt64(alphabet.count))] })
    }

    static func addressBytes(_ text: String) -> [UInt8]? {
        let parts = text.split(separator: ".").compactMap { UInt8($0) }
        return parts.count == 4 ? parts : nil
    }
}

/// The UDP port's one handler: every datagram goes to the service.
final class DatagramHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    let service: WebRTCService

    init(service: WebRTCService) { self.service = service }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let envelope = unwrapInboundIn(data)
        service.receive(Array(envelope.data.readableBytesView), from: envelope.remoteAddress, on: context.channel)
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        // An ICMP port unreachable from a viewer that left surfaces here: nothing to do.
    }
}
