import ArgumentParser
import ControlPlane
import FFmpegBridge
import Foundation
import LiveNode
import Logging
import MediaCore
import Metrics
import Prometheus
import RTMPServer
import SRTServer
import RTSPServer
import ServiceLifecycle
import Store
import Synchronization
import Transcoder

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the node: RTSP publish and play, live ladders for provisioned streams, live HLS, and the HTTP control plane.",
        discussion: """
        Environment: ABR_WORKER_ADMIN_USER (default admin), ABR_WORKER_ADMIN_PASSWORD and ABR_WORKER_JWT_SECRET \
        (generated on first start, printed once, kept in DATA_DIR/credentials.json), ABR_WORKER_SM1_ACCESS_TOKEN \
        (turns on the Stream Manager 1.0 meta API).
        """)

    @Option(help: "Address to listen on for RTSP (and HTTP unless --http-host is given).")
    var host = "127.0.0.1"

    @Option(help: "Address the HTTP control plane, HLS and status page listen on (default: --host).")
    var httpHost: String?

    @Option(help: "TCP connections the RTSP server accepts at once.")
    var maxConnections = 1024

    @Option(help: "TCP connections the RTSP server accepts at once from one IP address.")
    var maxConnectionsPerAddress = 64

    @Option(help: "HTTP connections the control plane accepts at once.")
    var maxHttpConnections = 512

    @Option(help: "HTTP connections the control plane accepts at once from one IP address.")
    var maxHttpConnectionsPerAddress = 64

    @Option(help: "RTSP port for publishers and players; 0 picks a free one.")
    var rtspPort = 8554

    @Option(help: "RTMP port for publishers (ffmpeg -f flv, OBS, GStreamer rtmp2sink); 0 picks a free one, -1 turns RTMP off.")
    var rtmpPort = 1935

    @Option(help: "SRT port for MPEG-TS publishers (stream ID: #!::r=live/stream1_1,m=publish,u=USER,p=PASSWORD); 0 picks a free one, -1 turns SRT off. ABR_WORKER_SRT_PASSPHRASE, when set, makes publishers encrypt with it.")
    var srtPort = 8890

    @Option(help: "SRT receive latency in milliseconds (how long a lost packet may be waited for).")
    var srtLatency = 120

    @Option(help: "HTTP port of the control plane, HLS and status page; 0 picks a free one.")
    var httpPort = 5080

    @Option(help: "Server RTP port for UDP transport (RTCP is the next one); 0 picks a free pair.")
    var rtpPort = 0

    @Option(help: "Data directory: the SQLite store, credentials, live HLS under DATA_DIR/hls/<top guid>/.")
    var dataDir = "./data"

    @Option(help: "Where provisions, job history, the node registry and placements are kept: sqlite:PATH (default: DATA_DIR/abr-worker.sqlite) or postgres://user:password@host:port/database?sslmode=disable|prefer|require, shared by a fleet. ABR_WORKER_STORE sets it too (keeps the password out of argv).")
    var store: String?

    @Option(help: "This node's id in the fleet's registry (default: host name and a random suffix; on Kubernetes, the pod name).")
    var nodeId: String?

    @Option(help: "The node group this node serves (node requests name it).")
    var nodeGroup = "default"

    @Option(help: "The sub-group (region, zone) node requests report for this node.")
    var subGroup = "default"

    @Option(help: "The address publishers and players reach this node at, as node requests answer it (default: --host, or the host name when --host is 0.0.0.0).")
    var advertiseAddress: String?

    @Option(help: "Seconds SIGTERM waits for live jobs to end (SOFT_SUNSET) before ending them (HARD_SUNSET) and exiting.")
    var drainTimeout: Double = 60

    @Option(help: "Provision file to load at start (Stream Manager 2.0 or 1.0) unless already stored; repeatable.")
    var provision: [String] = []

    @Option(help: "Publish this media file to the first provision's top variant in a loop with ffmpeg (a demo publisher).")
    var publishLoop: String?

    @Option(help: "Seconds a job waits for its publisher to come back before it ends.")
    var grace: Double = 30

    @OptionGroup var encoding: EncodingOptions

    @Option(help: "Also push every variant to this RTSP origin (rtsp://host:port), reconnecting when it goes away.")
    var origin: String?

    @Flag(help: "Relay publishes to streams that are not provisioned, as a single variant.")
    var allowUnprovisioned = false

    @Option(help: "Cores the node may fill with encoding (default: all of them).")
    var capacityCores: Double?

    @Option(help: "Fraction of the capacity cores in use at which publishes are refused.")
    var maxLoad = 0.85

    @Flag(inversion: .prefixedNo, help: "When encoders fall behind real time, stop encoding the node's lowest rungs first (and bring them back when there is room).")
    var loadShedding = true

    @Option(help: "Lifetime of issued API tokens, seconds.")
    var tokenLifetime = 3600.0

    @Option(help: "Seconds between status lines in the log (0: none).")
    var statusInterval: Double = 10

    func validate() throws {
        guard grace >= 0, grace <= 3600 else { throw ValidationError("--grace must be 0 to 3600 seconds (got \(grace))") }
        for (name, port) in [("--rtsp-port", rtspPort), ("--http-port", httpPort)] where !(0...65535).contains(port) {
            throw ValidationError("\(name) must be 0 to 65535 (got \(port))")
        }
        guard (-1...65535).contains(rtmpPort) else { throw ValidationError("--rtmp-port must be -1 (off) or 0 to 65535 (got \(rtmpPort))") }
        guard (-1...65535).contains(srtPort) else { throw ValidationError("--srt-port must be -1 (off) or 0 to 65535 (got \(srtPort))") }
        guard (20...10_000).contains(srtLatency) else { throw ValidationError("--srt-latency must be 20 to 10000 ms (got \(srtLatency))") }
        if let origin, OriginPusher.hostAndPort(origin) == nil {
            throw ValidationError("--origin must be rtsp://host[:port] (got \(origin))")
        }
        if let capacityCores, !(capacityCores > 0) { throw ValidationError("--capacity-cores must be above 0 (got \(capacityCores))") }
        guard maxLoad > 0, maxLoad <= 1 else { throw ValidationError("--max-load must be above 0 and at most 1 (got \(maxLoad))") }
        guard maxConnections >= 1, maxConnectionsPerAddress >= 1, maxHttpConnections >= 1, maxHttpConnectionsPerAddress >= 1 else {
            throw ValidationError("--max-connections, --max-http-connections and their per-address limits must be at least 1")
        }
        guard drainTimeout >= 0, drainTimeout <= 86_400 else { throw ValidationError("--drain-timeout must be 0 to 86400 seconds (got \(drainTimeout))") }
        if let store { _ = try StoreLocation.parse(store) }
        if let nodeId, !(1...128).contains(nodeId.count) || nodeId.contains(where: { $0.isWhitespace || $0 == "/" }) {
            throw ValidationError("--node-id must be 1 to 128 characters without spaces or '/' (got \(nodeId))")
        }
        guard ProvisionBook.isValidNodeGroup(nodeGroup), ProvisionBook.isValidNodeGroup(subGroup) else {
            throw ValidationError("--node-group and --sub-group must be 1 to 64 letters, digits, '.', '_' or '-'")
        }
        guard tokenLifetime >= 10 else { throw ValidationError("--token-lifetime must be at least 10 seconds (got \(tokenLifetime))") }
        if let publishLoop, !FileManager.default.isReadableFile(atPath: publishLoop) {
            throw ValidationError("--publish-loop: cannot read \(publishLoop)")
        }
    }

    func run() async throws {
        // ABR_WORKER_LOG_LEVEL=debug adds, among others, each player's probes to the moves logged at info.
        let logLevel = ProcessInfo.processInfo.environment["ABR_WORKER_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .info
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = logLevel
            return handler
        }
        MemoryReturn.configureAllocator()
        FFmpegLibrary.setLogLevel(.error)
        let metrics = NodeMetrics()
        // HTTP request metrics from Hummingbird land in the same registry as the node's gauges.
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: metrics.registry))
        let logger = Logger(label: "abr.serve")
        let dataDirectory = URL(fileURLWithPath: dataDir)
        let ladders = try provision.map { (path: $0, ladder: try loadLadder(path: $0, streamGuid: nil)) }

        let environment = ProcessInfo.processInfo.environment
        let credentials: NodeCredentials
        do {
            credentials = try NodeCredentials.load(environment: environment, dataDirectory: dataDirectory)
        } catch {
            throw CLIError(message: "cannot use the data directory \(dataDirectory.path): \(error)", status: .failure)
        }
        let location = try (self.store ?? environment["ABR_WORKER_STORE"].flatMap { $0.isEmpty ? nil : $0 }).map(StoreLocation.parse)
            ?? .sqlite(path: dataDirectory.path + "/")
        let store: any NodeStore
        let storeTask: Task<Void, Never>
        do {
            switch location {
            case let .sqlite(path):
                store = try SQLiteStore(path: path)
                storeTask = Task {}
            case let .postgres(postgres):
                let shared = try PostgresStore(postgres, logger: Logger(label: "abr.store"))
                storeTask = Task { await shared.run() }
                try await shared.migrate()
                store = shared
            }
        } catch {
            throw CLIError(message: "cannot open the store \(Self.redacted(location)): \(String(reflecting: error))", status: .failure)
        }
        logger.info("store", metadata: ["location": "\(store.location)"])
        var configuration = ControlPlane.Configuration(credentials: credentials)
        configuration.tokenLifetime = tokenLifetime
        configuration.sm1AccessToken = environment["ABR_WORKER_SM1_ACCESS_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
        configuration.capacity = CapacityMonitor.Configuration(cores: capacityCores ?? Double(ProcessInfo.processInfo.activeProcessorCount))
        configuration.capacity.maximumLoad = maxLoad
        let descriptors = DescriptorBudget.plan(limit: DescriptorBudget.raiseLimit(), rtsp: maxConnections, http: maxHttpConnections)
        if descriptors.rtspConnections < maxConnections || descriptors.httpConnections < maxHttpConnections {
            logger.warning("the descriptor limit (ulimit -n) is \(descriptors.limit): connections capped at \(descriptors.rtspConnections) RTSP and \(descriptors.httpConnections) HTTP to keep \(DescriptorBudget.reserve) for files and the store; raise it for more")
        } else {
            logger.info("descriptors", metadata: ["limit": "\(descriptors.limit)", "rtsp.connections": "\(descriptors.rtspConnections)",
                                                  "http.connections": "\(descriptors.httpConnections)", "reserve": "\(DescriptorBudget.reserve)"])
        }
        var identity = FleetMembership.Identity(nodeId: nodeId ?? FleetMembership.defaultNodeId())
        identity.nodeGroup = nodeGroup
        identity.subGroup = subGroup
        identity.address = advertiseAddress ?? (["0.0.0.0", "::"].contains(host) ? ProcessInfo.processInfo.hostName : host)
        configuration.identity = identity
        configuration.publisherReleaseAfterHardSunset = grace
        configuration.httpConnections.total = descriptors.httpConnections
        configuration.httpConnections.perAddress = min(maxHttpConnectionsPerAddress, descriptors.httpConnections)
        var nodeConfiguration = LiveNode.Configuration(dataDirectory: dataDirectory)
        nodeConfiguration.grace = grace
        nodeConfiguration.allowUnprovisioned = allowUnprovisioned
        nodeConfiguration.origin = origin
        nodeConfiguration.transcode = encoding.transcodeOptions()
        nodeConfiguration.loadShedder = loadShedding ? .node : nil
        let registry = StreamRegistry()
        let plane = await ControlPlane(configuration: configuration, nodeConfiguration: nodeConfiguration, registry: registry,
                                       store: store, metrics: metrics)

        let restored = try await plane.provisions.restore()
        if !restored.restored.isEmpty { logger.info("provisions restored from the store", metadata: ["streams": "\(restored.restored)"]) }
        for problem in restored.problems { logger.error("stored provision no longer valid, left in the store: \(problem)") }
        for (path, ladder) in ladders {
            guard plane.node.ladder(ladder.streamGuid) == nil else {
                logger.info("\(ladder.streamGuid) from \(path) is already provisioned (kept from the store)")
                continue
            }
            try await storeProvisionFile(path: path, ladder: ladder, book: plane.provisions)
        }

        var rtsp = RTSPService.Configuration()
        rtsp.host = host
        rtsp.port = rtspPort
        rtsp.rtpPort = rtpPort
        rtsp.maximumConnections = descriptors.rtspConnections
        rtsp.maximumConnectionsPerAddress = min(maxConnectionsPerAddress, descriptors.rtspConnections)
        // Players authenticate only when the operator sets both (kept out of argv, which `ps` shows).
        if let user = environment["ABR_WORKER_PLAYER_USER"], !user.isEmpty {
            rtsp.playerCredentials = StreamCredentials(username: user, password: environment["ABR_WORKER_PLAYER_PASSWORD"] ?? "")
        }
        let rtspService = RTSPService(configuration: rtsp, registry: registry, policy: plane.node)
        plane.attachPlayers(rtspService)
        let rtspPort: Int
        do {
            rtspPort = try rtspService.start()
        } catch {
            throw CLIError(message: "cannot listen for RTSP on \(host):\(self.rtspPort): \(error)", status: .failure)
        }
        let rtspBase = "rtsp://\(host):\(rtspPort)"
        plane.fleet.setPorts { $0.rtsp = rtspPort }
        var rtmpService: RTMPService?
        if self.rtmpPort >= 0 {
            var rtmp = RTMPService.Configuration()
            rtmp.host = host
            rtmp.port = self.rtmpPort
            let service = RTMPService(configuration: rtmp, registry: registry, policy: plane.node)
            do {
                let port = try service.start()
                plane.setIngest(rtmp: "rtmp://\(host):\(port)")
                plane.fleet.setPorts { $0.rtmp = port }
            } catch {
                throw CLIError(message: "cannot listen for RTMP on \(host):\(self.rtmpPort): \(error) (--rtmp-port -1 turns RTMP off)", status: .failure)
            }
            rtmpService = service
        }
        var srtService: SRTService?
        if self.srtPort >= 0 {
            var srt = SRTService.Configuration()
            srt.host = host
            srt.port = self.srtPort
            srt.latencyMilliseconds = srtLatency
            srt.passphrase = environment["ABR_WORKER_SRT_PASSPHRASE"].flatMap { $0.isEmpty ? nil : $0 }
            let service = SRTService(configuration: srt, registry: registry, policy: plane.node)
            do {
                let port = try service.start()
                plane.setIngest(srt: "srt://\(host):\(port)")
                plane.fleet.setPorts { $0.srt = port }
            } catch {
                throw CLIError(message: "cannot listen for SRT on \(host):\(self.srtPort): \(error) (--srt-port -1 turns SRT off)", status: .failure)
            }
            srtService = service
        }
        plane.setReady(true, rtspBase: rtspBase)

        if !credentials.generated.isEmpty {
            var lines = ["Generated and kept in \(NodeCredentials.fileURL(in: dataDirectory).path) (shown once):"]
            if credentials.generated.contains("ABR_WORKER_ADMIN_PASSWORD") {
                lines.append("  admin user \(credentials.adminUser), password \(credentials.adminPassword)")
            }
            if credentials.generated.contains("ABR_WORKER_JWT_SECRET") { lines.append("  JWT signing secret generated") }
            FileHandle.standardOutput.write(Data((lines.joined(separator: "\n") + "\n").utf8))
        }
        let httpHost = httpHost ?? host
        let publishTarget = publishLoop.flatMap { file in
            plane.node.ladders.first.map { ladder in (file, Self.publishURL(rtspHost: host, port: rtspPort, ladder: ladder)) }
        }
        let http = HTTPAPI.makeApplication(plane, host: httpHost, port: httpPort) { port in
            plane.fleet.setPorts { $0.http = port }
            let base = "http://\(httpHost):\(port)"
            var lines = ["HTTP: \(base)/  (status page)   API: \(base)/as/v1/...   metrics: \(base)/metrics",
                         "RTSP: \(rtspBase)/<stream guid>"]
            if let rtmp = plane.ingestBaseURLs.rtmp { lines.append("RTMP: \(rtmp)/<stream guid>  (publish only)") }
            if let srt = plane.ingestBaseURLs.srt { lines.append("SRT: \(srt)?streamid=publish:<stream guid>  (publish only, MPEG-TS)") }
            for ladder in plane.node.ladders {
                let credentials = ladder.publisherCredentials.map { " (as user \($0.username), with the provision's password)" } ?? ""
                lines.append("  \(ladder.streamGuid): publish to \(plane.publishURLs(top: ladder.top.streamGuid).joined(separator: " or "))\(credentials)")
                lines.append("    HLS: \(base)\(HLSLayout(ladderGuid: ladder.streamGuid).liveURLPath())")
                lines.append("    RTSP: " + ladder.variants.map { "\(rtspBase)/\($0.streamGuid)" }.joined(separator: " "))
            }
            // Unbuffered: scripts and tests read the ports from here while the node runs.
            FileHandle.standardOutput.write(Data((lines.joined(separator: "\n") + "\n").utf8))
        }

        // SIGINT (Ctrl-C) ends jobs at once; SIGTERM (Kubernetes, systemd) drains them first.
        let interrupted = InterruptFlag()
        var services: [any Service] = [
            StoreService(store: store, task: storeTask, logger: logger),
            rtspService,
        ]
        if let rtmpService { services.append(rtmpService) }
        if let srtService { services.append(srtService) }
        services += [
            NodeService(plane: plane, statusInterval: statusInterval, logger: logger),
            FleetService(plane: plane),
            http,
            MemoryReturn(interval: .seconds(30), logger: logger),
        ]
        services.append(DrainService(plane: plane, timeout: drainTimeout, interrupted: { interrupted.isSet }, logger: logger))
        // The demo publisher is the node's own: it stops first, so a drain does not wait for it.
        if let (file, url) = publishTarget {
            services.append(LoopPublisher(file: file, url: url, logger: logger))
        }
        // Shutdown runs backwards: the demo publisher stops, the drain (SOFT_SUNSET, jobs end or time
        // out, HARD_SUNSET) runs while RTSP and HTTP still serve, HTTP stops taking requests, the node
        // leaves the registry, jobs finish (segments, playlists, sessions), and last the store is closed.
        let group = ServiceGroup(configuration: .init(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        try await group.run()
    }

    /// Where the demo publisher sends the ladder's top, with the provision's publisher credentials
    /// in the URL as ffmpeg takes them (`rtsp://user:pass@host/...`).
    static func publishURL(rtspHost: String, port: Int, ladder: Ladder) -> String {
        var userInfo = ""
        if let credentials = ladder.publisherCredentials {
            let allowed = CharacterSet.alphanumerics.union(CharacterSet(charactersIn: "-._~"))
            let encode = { (text: String) in text.addingPercentEncoding(withAllowedCharacters: allowed) ?? text }
            userInfo = "\(encode(credentials.username)):\(encode(credentials.password))@"
        }
        return "rtsp://\(userInfo)\(rtspHost):\(port)/\(ladder.top.streamGuid)"
    }

    static func redacted(_ location: StoreLocation) -> String {
        switch location {
        case let .sqlite(path): "sqlite:\(path)"
        case let .postgres(postgres): postgres.redacted
        }
    }

    /// A provision file given with `--provision` is stored like one posted to the API.
    private func storeProvisionFile(path: String, ladder: Ladder, book: ProvisionBook) async throws {
        do {
            let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: path)))
            let document = try JSONReader.parse(bytes)
            switch document {
            case .object where document["meta"] != nil:
                _ = try await book.add(streamManager1: bytes, streamGuid: ladder.streamGuid)
            case .object:
                _ = try await book.add(streamManager2: Array(JSONValue.array([document]).jsonText.utf8), nodeGroup: nodeGroup)
            default:
                _ = try await book.add(streamManager2: bytes, nodeGroup: nodeGroup)
            }
        } catch {
            throw CLIError(message: "cannot provision \(path): \(error)", status: .invalidProvisionOrArguments)
        }
    }
}

/// Keeps the store open while the node runs; closes it (events flushed, WAL checkpointed) last.
struct StoreService: Service {
    let store: any NodeStore
    /// The store's connections (PostgreSQL), started before the node served.
    let task: Task<Void, Never>
    let logger: Logger

    func run() async throws {
        try? await gracefulShutdown()
        do {
            try await store.close()
        } catch {
            logger.error("closing the store: \(error)")
        }
        task.cancel()
        await task.value
    }
}

/// Set when the process gets SIGINT, so the drain knows an operator wants out now.
// @unchecked: `source` is set once in init and only kept alive; the flag is atomic.
final class InterruptFlag: @unchecked Sendable {
    private let flag = Atomic<Bool>(false)
    // A dispatch source sees the signal even though the service group ignores it for its own handler.
    private let source: DispatchSourceSignal

    init() {
        source = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
        source.setEventHandler { [weak self] in self?.flag.store(true, ordering: .relaxed) }
        source.resume()
    }

    var isSet: Bool { flag.load(ordering: .relaxed) }
}

/// The live node: drained on shutdown so every job ends its playlists and tells its players
/// (the RTSP service, listed before it, closes the sockets after). Logs a status line per job now and then.
struct NodeService: Service {
    let plane: ControlPlane
    let statusInterval: Double
    let logger: Logger

    func run() async throws {
        if statusInterval > 0 {
            try? await cancelWhenGracefulShutdown {
                while true {
                    try await Task.sleep(for: .seconds(statusInterval))
                    logStatus()
                }
            }
        } else {
            try? await gracefulShutdown()
        }
        logger.info("shutting down: finishing jobs")
        _ = try? await ControlPlane.offload { plane.drain() }
    }

    private func logStatus() {
        for view in plane.jobViews() {
            let variants = view.variants.map { v in
                let latency = v.latencyP50Ms.map { String(format: " %.0f/%.0fms", $0, v.latencyP99Ms ?? 0) } ?? ""
                return "L\(v.abrLevel) \(v.framesOut)f \(v.droppedFrames)d \(v.averageBitRate / 1000)k \(v.players)p\(latency)"
            }
            logger.info("job \(view.streamGuid) \(view.state): \(variants.joined(separator: " | "))")
        }
    }
}

/// `--publish-loop`: ffmpeg publishing a file to the node in a loop, restarted if it stops.
struct LoopPublisher: Service {
    let file: String
    let url: String
    let logger: Logger

    func run() async throws {
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            // The service group ignores SIGINT/SIGTERM to handle them itself, and children inherit
            // ignored signals: give ffmpeg its defaults back so it can be stopped cleanly.
            process.arguments = ["--default-signal=INT,TERM", "ffmpeg", "-hide_banner", "-loglevel", "error", "-re", "-stream_loop", "-1", "-i", file,
                                 "-c", "copy", "-f", "rtsp", "-rtsp_transport", "tcp", url]
            process.standardInput = FileHandle.nullDevice
            do {
                try process.run()
            } catch {
                logger.error("cannot start ffmpeg for --publish-loop: \(error)")
                return
            }
            // The URL may carry the publisher's password: the log gets it without.
            let shown = url.replacingOccurrences(of: #"//[^/@]*@"#, with: "//***@", options: .regularExpression)
            logger.info("publishing \(file) to \(shown) in a loop")
            await withGracefulShutdownHandler {
                while process.isRunning && !Task.isShuttingDownGracefully {
                    try? await Task.sleep(for: .milliseconds(200))
                }
            } onGracefulShutdown: {
                process.interrupt()
            }
            if process.isRunning {
                process.interrupt()
                for _ in 0..<25 where process.isRunning { try? await Task.sleep(for: .milliseconds(200)) }
                if process.isRunning {
                    logger.warning("the loop publisher did not stop on SIGINT within 5 s; killed")
                    kill(process.processIdentifier, SIGKILL)
                }
                return
            }
            if Task.isShuttingDownGracefully { return }
            logger.warning("the loop publisher stopped (status \(process.terminationStatus)); restarting in 2 s")
            try? await Task.sleep(for: .seconds(2))
        }
    }
}
