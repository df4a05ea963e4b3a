import AccessTokens
import Foundation
import Ingest
import LiveNode
import Logging
import MediaCore
import NIOPosix
import RTSPServer
import Store
import Synchronization
import Transcoder
import WebRTCServer

/// The node as a stream manager sees it: provisions (validated, stored, handed to the live
/// node), jobs and their figures, hints, events, capacity and metrics. `HTTPAPI` puts it on
/// HTTP; everything here is testable without a socket.
public final class ControlPlane: Sendable {
    public struct Configuration: Sendable {
        public var credentials: NodeCredentials
        /// What the API's throttles measure time on.
        public var clock = NodeClock.system
        public var tokenLifetime: TimeInterval = 3600
        /// Stream Manager 1.0's `accessToken`; the 1.0 API is off when nil.
        public var sm1AccessToken: String?
        public var capacity = CapacityMonitor.Configuration()
        /// HTTP connections the node holds, in all and per address, and the request timeout.
        public var httpConnections = HTTPConnectionLimiter.Limits()
        /// Seconds an HTTP connection may stay open with no request under way (or with a request
        /// head still arriving) before it is closed.
        public var httpIdleTimeout: Int64 = 30
        /// This node in its fleet: id, group, sub-group, advertised address.
        public var identity = FleetMembership.Identity()
        /// Seconds a publisher stays connected after HARD_SUNSET ended its job (the node's grace).
        public var publisherReleaseAfterHardSunset = 30.0
        /// hls.js as an ES module (`--hls-js`), served at `/assets/hls.mjs`: the status page's
        /// player then plays Low-Latency HLS with it. nil: the page plays HLS natively.
        public var hlsPlayerScript: URL?

        public init(credentials: NodeCredentials) {
            self.credentials = credentials
        }
    }

    public let configuration: Configuration
    public let store: any NodeStore
    public let fleet: FleetMembership
    public let node: LiveNode
    public let registry: StreamRegistry
    public let provisions: ProvisionBook
    public let events: EventHub
    public let capacity: CapacityMonitor
    public let metrics: NodeMetrics
    public let tokens: TokenAuthority
    /// Signed playback: mints tokens and checks them for RTSP, HLS and WHEP viewers.
    public let playback: PlaybackAuthority
    public let hlsFiles: HLSFiles
    /// Live rungs' Low-Latency playlists, where blocked reloads wait (the writers publish there).
    public let livePlaylists = LivePlaylists.shared
    /// The last ten minutes, for the status page's charts (`/v1/history`).
    public let history = NodeHistory()
    public let httpConnections: HTTPConnectionLimiter
    /// Failed logins per address: 10 at once, then one every 3 s.
    let loginThrottle = AddressThrottle(burst: 10, interval: 3)
    /// Wrong Stream Manager 1.0 accessTokens, throttled like failed logins: the shared token
    /// cannot be guessed at the speed of the network either.
    let accessTokenThrottle = AddressThrottle(burst: 10, interval: 3)
    /// Refused requests (failed logins, bad tokens): one log line a second at most.
    let refusals = RefusalLog()
    /// New placements by open node requests per address: 16 at once, then one a second. A reservation
    /// lasts `PlacementPolicy.reservationLifetime` (15 s), so one address holds at most about 31.
    let placementThrottle = AddressThrottle(burst: 16, interval: 1)
    let logger: Logger
    private let readiness = Atomic<Bool>(false)
    /// `rtsp://host:port` once the RTSP server listens: links on the status page and in job views.
    private let rtspBase = Mutex<String?>(nil)
    /// The listeners of the other publish protocols, once they listen, and the host they listen on.
    private let ingestListeners = Mutex<[(host: String, endpoint: IngestEndpoint)]>([])
    /// The RTSP server, once attached: its players, and new players refused in HARD_SUNSET.
    let rtspService = Mutex<RTSPService?>(nil)
    let webrtcService = Mutex<WebRTCService?>(nil)

    public init(configuration: Configuration, nodeConfiguration: LiveNode.Configuration, registry: StreamRegistry,
                store: any NodeStore, metrics: NodeMetrics = NodeMetrics(), logger: Logger = Logger(label: "abr.control")) async {
        self.configuration = configuration
        self.store = store
        let fleet = FleetMembership(identity: configuration.identity)
        self.fleet = fleet
        self.registry = registry
        self.metrics = metrics
        self.logger = logger
        let events = EventHub(store: store)
        self.events = events
        // The monitor reads the node's jobs and the node asks the monitor before each publish.
        let nodeReference = Mutex<LiveNode?>(nil)
        let capacity = CapacityMonitor(configuration: configuration.capacity) {
            nodeReference.withLock { $0 }?.jobs.map(\.status) ?? []
        }
        self.capacity = capacity
        var nodeConfiguration = nodeConfiguration
        nodeConfiguration.admission = { ladder, topPassesThrough, resuming in
            fleet.refusal(resuming: resuming) ?? capacity.admissionRefusal(ladder, topPassesThrough: topPassesThrough)
        }
        let node = LiveNode(configuration: nodeConfiguration, registry: registry, logger: Logger(label: "abr.node")) { guid, event in
            events.publish(streamGuid: guid, time: event.time, kind: event.kind, detail: event.detail)
        }
        nodeReference.withLock { $0 = node }
        self.node = node
        provisions = ProvisionBook(store: store, node: node)
        tokens = TokenAuthority(secret: configuration.credentials.jwtSecret, lifetime: configuration.tokenLifetime)
        playback = PlaybackAuthority(secret: configuration.credentials.playbackSecret) { path in
            Self.ladder(holding: path, in: node)
        }
        hlsFiles = HLSFiles(root: nodeConfiguration.dataDirectory.appendingPathComponent(HLSLayout.liveRoot))
        httpConnections = HTTPConnectionLimiter(limits: configuration.httpConnections)
    }

    /// Shows `rtsp`'s players in job views and on the status page, and turns their moves between
    /// rungs into `playerSwitched` events and the switch counter.
    let webrtcPortValue = Mutex<Int?>(nil)
    public func setWebRTCPort(_ port: Int) { webrtcPortValue.withLock { $0 = port } }
    public var webrtcPort: Int? { webrtcPortValue.withLock { $0 } }

    /// WHEP's viewers, when the node listens for WebRTC.
    public func attachWebRTC(_ webrtc: WebRTCService) {
        webrtcService.withLock { $0 = webrtc }
        webrtc.observeViewerSwitches { [self] move in playerSwitched(move) }
    }

    public func attachPlayers(_ rtsp: RTSPService) {
        rtspService.withLock { $0 = rtsp }
        rtsp.observePlayerSwitches { [self] move in playerSwitched(move) }
    }

    func playerSwitched(_ move: PlayerSwitchEvent) {
        metrics.countPlayerSwitch(direction: move.direction)
        guard let ladder = ladder(containing: move.requested) else { return }
        history.noteSwitch(ladder: ladder.streamGuid)
        events.publish(streamGuid: ladder.streamGuid, time: Date().timeIntervalSince1970, kind: "playerSwitched",
                       detail: "session \(move.session) \(move.direction) from \(move.from) to \(move.to): \(move.reason)")
    }

    /// Adds a sample to `history` (the node's service does, every `NodeHistory.interval`).
    public func recordHistory() {
        history.record(time: Date().timeIntervalSince1970, views: jobViews(), usage: ProcessUsage.current())
    }

    /// Ready: the RTSP server listens and the node is INSERVICE (false in SOFT_SUNSET, HARD_SUNSET
    /// and while shutting down), so a load balancer sends it nothing new.
    public var isReady: Bool { readiness.load(ordering: .relaxed) && fleet.nodeState == .inService }
    public func setReady(_ ready: Bool, rtspBase base: String? = nil) {
        if let base { rtspBase.withLock { $0 = base } }
        readiness.store(ready, ordering: .relaxed)
    }
    public var rtspBaseURL: String? { rtspBase.withLock { $0 } }

    /// A publish protocol's listener, once it listens on `host`: its URLs are shown, and the fleet
    /// tells stream managers about it.
    public func addIngest(_ endpoint: IngestEndpoint, host: String) {
        ingestListeners.withLock { $0.append((host, endpoint)) }
        fleet.setPorts { $0.ingest.append(endpoint) }
    }

    /// The publish protocols the node listens on besides RTSP, in the order they started.
    public var ingestEndpoints: [IngestEndpoint] { ingestListeners.withLock { $0.map(\.endpoint) } }

    /// Every URL a publisher may push `top` (`live/stream1_1`) to, one per protocol the node listens on.
    public func publishURLs(top: String) -> [String] {
        let others = ingestListeners.withLock { $0 }.map { $0.endpoint.ingestProtocol.publishURL(host: $0.host, port: $0.endpoint.port, stream: top) }
        return [rtspBaseURL.map { "\($0)/\(top)" }].compactMap { $0 } + others
    }

    // MARK: Views

    /// A job as `GET /v1/jobs` shows it.
    public struct JobView: Codable, Sendable {
        public struct Publisher: Codable, Sendable {
            public var address: String
            /// The protocol's URL scheme: `rtsp`, `rtmp`, `srt`.
            public var `protocol`: String?
            public var since: Double?
            public var codecs: String?
            public var width: Int?
            public var height: Int?
            public var fps: Double?
        }

        public struct VariantView: Codable, Sendable {
            public var streamGuid: String
            public var abrLevel: Int
            public var width: Int
            public var height: Int
            public var declaredBitRate: Int
            public var passthrough: Bool
            public var framesIn: Int
            public var framesOut: Int
            public var droppedFrames: Int
            public var droppedAudioPackets: Int
            public var fps: Double
            public var averageBitRate: Int
            public var peakBitRate: Int
            public var players: Int
            public var latencyP50Ms: Double?
            public var latencyP99Ms: Double?
            /// HLS segments that could not be written (disk full) and were skipped.
            public var segmentWriteFailures: Int
            /// The node is over capacity and stopped encoding this rung (lowest rungs go first).
            public var shed: Bool
            /// Frames not encoded while the rung was shed.
            public var shedFrames: Int
            public var rtsp: String?
            public var hls: String
            /// The rung's WHEP path, or nil with `webrtcUnavailable` saying why browsers cannot
            /// be sent it over WebRTC (B-frames in a passed-through top).
            public var whep: String?
            public var webrtcUnavailable: String?
        }

        /// One RTSP player of the job's variants.
        public struct PlayerView: Codable, Sendable {
            public var session: String
            /// The variant it asked for.
            public var requested: String
            /// The variant it gets now, and its level.
            public var streamGuid: String?
            public var abrLevel: Int?
            /// Moved between rungs as its link changes (false: pinned with `?abr=off`).
            public var adaptive: Bool
            public var estimateBitRate: Int?
            public var switches: Int
            public var transport: String
            public var address: String?
            /// RTSP players: pictures skipped while their backlog was over the limit (a slow link or player).
            public var droppedPictures: Int?
            /// WebRTC viewers: round trip (ms) and video lost (%) from their reports, NACKs received and packets resent.
            public var roundTripMs: Double?
            public var lossPercent: Double?
            public var nacks: Int?
            public var retransmissions: Int?
            /// WebRTC viewers: the least playout delay the node asks the browser for, so that its
            /// rung's keyframes cross the link without a freeze (0 where they cross in time).
            public var playoutDelayMs: Int?
            /// WebRTC viewers: the Opus rendition they get, `full` or `light` (on the lowest rung
            /// of a link that cannot carry it with the full audio).
            public var audio: String?
        }

        public var streamGuid: String
        public var state: String
        public var publisher: Publisher?
        public var players: [PlayerView]
        public var droppedAtIngest: Int
        /// Publisher notifications not recorded (unknown names, over the rate limit).
        public var notificationsRefused: Int
        public var hlsMaster: String
        public var variants: [VariantView]
        /// The job history from the store (detail views only).
        public var history: [JobEvent]?
    }

    public func jobViews() -> [JobView] {
        node.ladders.map { jobView($0) }
    }

    /// A job by its top guid or any of its variants' guids, with its history from the store.
    public func jobView(_ guid: String) async -> JobView? {
        guard let ladder = ladder(containing: guid) else { return nil }
        var view = jobView(ladder)
        view.history = try? await store.history(ladder.streamGuid, limit: 100)
        return view
    }

    /// The ladder `path` names or one of whose variants it names, by at most two dictionary
    /// lookups (a variant's guid is always `<ladder guid>_<level>`): it runs on every player's
    /// session start and every signed HLS request.
    static func ladder(holding path: String, in node: LiveNode) -> Ladder? {
        if let ladder = node.ladder(path) { return ladder }
        guard let underscore = path.lastIndex(of: "_"), let ladder = node.ladder(String(path[..<underscore])), ladder.holds(path) else { return nil }
        return ladder
    }

    public func ladder(containing guid: String) -> Ladder? {
        node.ladder(guid) ?? node.ladders.first { $0.variants.contains { $0.streamGuid == guid } }
    }

    private func jobView(_ ladder: Ladder) -> JobView {
        let status = node.job(ladder.streamGuid)?.status
        let measured = Dictionary((status?.variants ?? []).map { ($0.abrLevel, $0) }, uniquingKeysWith: { a, _ in a })
        let rtsp = rtspBaseURL
        let layout = HLSLayout(ladderGuid: ladder.streamGuid)
        let variants = ladder.variants.map { variant -> JobView.VariantView in
            let v = measured[variant.level]
            let refusal = registry.existingStream(variant.streamGuid)?.webRTCRefusal
            return JobView.VariantView(
                streamGuid: variant.streamGuid, abrLevel: variant.level, width: variant.width, height: variant.height,
                declaredBitRate: variant.bitRate, passthrough: v?.passthrough ?? false, framesIn: v?.framesIn ?? 0,
                framesOut: v?.framesOut ?? 0, droppedFrames: v?.droppedFrames ?? 0,
                droppedAudioPackets: v?.droppedAudioPackets ?? 0, fps: v?.fps ?? 0,
                averageBitRate: v?.averageBitRate ?? 0, peakBitRate: v?.peakBitRate ?? 0,
                players: registry.existingStream(variant.streamGuid)?.playerCount ?? 0,
                latencyP50Ms: v?.latencyP50.map(roundedMilliseconds), latencyP99Ms: v?.latencyP99.map(roundedMilliseconds),
                segmentWriteFailures: v?.segmentWriteFailures ?? 0, shed: v?.shed ?? false, shedFrames: v?.shedFrames ?? 0,
                rtsp: rtsp.map { "\($0)/\(variant.streamGuid)" },
                hls: layout.liveURLPath(layout.variantPlaylist(level: variant.level)),
                whep: refusal == nil ? "/whep/\(variant.streamGuid)" : nil, webrtcUnavailable: refusal)
        }
        let publisher = status?.publisher.map {
            JobView.Publisher(address: $0, protocol: status?.publisherProtocol, since: status?.publisherSince, codecs: status?.sourceCodecs, width: status?.sourceWidth,
                              height: status?.sourceHeight, fps: status?.sourceFrameRate)
        }
        let guids = Set(ladder.variants.map(\.streamGuid))
        let players = (rtspService.withLock { $0 }?.players() ?? []).filter { guids.contains($0.requested) }.map {
            JobView.PlayerView(session: $0.session, requested: $0.requested, streamGuid: $0.stream, abrLevel: $0.level, adaptive: $0.adaptive,
                               estimateBitRate: $0.estimateBitRate, switches: $0.switches, transport: $0.transport, address: $0.address,
                               droppedPictures: $0.droppedPictures)
        } + (webrtcService.withLock { $0 }?.viewers ?? []).filter { guids.contains($0.path) && $0.state == "playing" }.map {
            JobView.PlayerView(session: $0.id, requested: $0.path, streamGuid: $0.level.flatMap { level in ladder.variants.first { $0.level == level }?.streamGuid },
                               abrLevel: $0.level, adaptive: $0.adaptive, estimateBitRate: $0.estimate.map { Int($0) }, switches: $0.switches,
                               transport: "webrtc", address: $0.peer, roundTripMs: $0.roundTrip.map { ($0 * 10_000).rounded() / 10 },
                               lossPercent: $0.fractionLost.map { ($0 * 1000).rounded() / 10 }, nacks: $0.nacks, retransmissions: $0.retransmissions,
                               playoutDelayMs: $0.playoutDelay.map { Int(($0 * 1000).rounded()) }, audio: $0.audio.map { "\($0)" })
        }
        return JobView(streamGuid: ladder.streamGuid, state: status?.state.rawValue ?? "provisioned", publisher: publisher, players: players,
                       droppedAtIngest: status?.droppedAtIngest ?? 0, notificationsRefused: status?.notificationsRefused ?? 0, hlsMaster: layout.liveURLPath(),
                       variants: variants, history: nil)
    }

    /// The live hints (`abr.json`'s schema), declared figures until measured.
    public func hints(_ guid: String) -> BandwidthHints? {
        ladder(containing: guid).flatMap { node.job($0.streamGuid)?.hints }
    }

    public func capacitySnapshot() -> CapacityMonitor.Snapshot {
        let waiting = node.jobs.filter { $0.state == .waitingForPublisher || $0.state == .interrupted }.map(\.ladder)
        return capacity.snapshot(waiting: waiting)
    }

    public func metricsExposition() -> String {
        metrics.exposition(statuses: node.jobs.map(\.status), capacity: capacitySnapshot(), provisions: node.ladders.count, nodeState: fleet.nodeState,
                           registryOfStreams: registry, sseListeners: events.listenerCount,
                           publishProtocols: ["rtsp"] + ingestEndpoints.map(\.ingestProtocol.scheme),
                           webrtcViewers: webrtcService.withLock { $0 }?.viewers ?? [])
    }

    /// Stops taking publishers, ends every job (current segments finished, playlists closed,
    /// players torn down) and ends event streams.
    public func drain() {
        setReady(false)
        node.shutdown()
        events.finishAll()
    }
}

private func roundedMilliseconds(_ value: Double) -> Double { (value * 10).rounded() / 10 }
