import ArgumentParser
import ControlPlane
import FFmpegBridge
import Foundation
import Logging
import Metrics
import NodeApp
import Prometheus
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

    // Unconditional: `--rtmp-port -1` as the manual writes it (the parser would otherwise read -1 as an option).
    @Option(parsing: .unconditional, help: "RTMP port for publishers (ffmpeg -f flv, OBS, GStreamer rtmp2sink); 0 picks a free one, -1 turns RTMP off.")
    var rtmpPort = 1935

    @Option(parsing: .unconditional, help: "SRT port for MPEG-TS publishers (stream ID: #!::r=live/stream1_1,m=publish,u=USER,p=PASSWORD); 0 picks a free one, -1 turns SRT off. ABR_WORKER_SRT_PASSPHRASE, when set, makes publishers encrypt with it.")
    var srtPort = 8890

    @Option(parsing: .unconditional, help: "UDP port for WebRTC viewers (WHEP at http://HOST:HTTP-PORT/whep/<stream guid>); 0 picks a free one, -1 turns WebRTC off.")
    var webrtcPort = 8189

    @Option(help: "An address browsers reach the WebRTC port at, announced as a host candidate (repeatable; for NAT and Kubernetes). Default: the listening address; on 0.0.0.0, every IPv4 address of the node's interfaces.")
    var webrtcCandidate: [String] = []

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

    @Option(help: "Low-Latency HLS on every rung: parts, blocking playlist reloads, preload hints and rendition reports (on or off). Players that do not know it play the same playlists as before.")
    var hlsLowLatency: OnOff = .on

    @Option(help: "hls.js as an ES module (exporting Hls as H, as the copy in PyPI's gradio wheel that `./abr deps` puts in .build/hlsjs/hls.mjs): the status page's player loads it from the node and plays Low-Latency HLS. Without it the page plays HLS natively.")
    var hlsJs: String?

    @Option(help: "PEM certificate chain (leaf first): the HTTP port serves HTTPS with HTTP/2 and HTTP/1.1. Needs --tls-key.")
    var tlsCert: String?

    @Option(help: "PEM private key of --tls-cert.")
    var tlsKey: String?

    @Option(help: "Lifetime of issued API tokens, seconds.")
    var tokenLifetime = 3600.0

    @Option(help: "Seconds between status lines in the log (0: none).")
    var statusInterval: Double = 10

    @Option(help: "How far below ingest and sending the encoder threads run: a nice increment, 0 to 19 (above 0 they are also SCHED_BATCH; 0 keeps the node's own scheduling). No privileges needed.")
    var encoderNice = EncoderPriority.background.niceIncrement

    /// The options as the library takes them.
    var settings: NodeSettings {
        var settings = NodeSettings()
        settings.host = host
        settings.httpHost = httpHost
        settings.maxConnections = maxConnections
        settings.maxConnectionsPerAddress = maxConnectionsPerAddress
        settings.maxHttpConnections = maxHttpConnections
        settings.maxHttpConnectionsPerAddress = maxHttpConnectionsPerAddress
        settings.rtspPort = rtspPort
        settings.rtmpPort = rtmpPort
        settings.srtPort = srtPort
        settings.srtLatencyMilliseconds = srtLatency
        settings.webrtcPort = webrtcPort
        settings.webrtcCandidates = webrtcCandidate
        settings.httpPort = httpPort
        settings.rtpPort = rtpPort
        settings.dataDirectory = dataDir
        settings.store = store
        settings.nodeId = nodeId
        settings.nodeGroup = nodeGroup
        settings.subGroup = subGroup
        settings.advertiseAddress = advertiseAddress
        settings.drainTimeout = drainTimeout
        settings.provisionFiles = provision
        settings.publishLoop = publishLoop
        settings.grace = grace
        settings.transcode = encoding.transcodeOptions()
        settings.transcode.encoderPriority = EncoderPriority(niceIncrement: encoderNice, batch: encoderNice > 0)
        settings.origin = origin
        settings.allowUnprovisioned = allowUnprovisioned
        settings.capacityCores = capacityCores
        settings.maxLoad = maxLoad
        settings.loadShedding = loadShedding
        settings.hlsLowLatency = hlsLowLatency == .on
        settings.hlsPlayerScript = hlsJs
        settings.tlsCertificate = tlsCert
        settings.tlsKey = tlsKey
        settings.tokenLifetime = tokenLifetime
        settings.statusInterval = statusInterval
        return settings
    }

    func validate() throws {
        guard (0...19).contains(encoderNice) else { throw ValidationError("--encoder-nice must be 0 to 19 (got \(encoderNice))") }
        do {
            try settings.validate()
        } catch {
            throw ValidationError("\(error)")
        }
    }

    /// Process-wide setup (logging, allocator, FFmpeg's log level, metrics), then the node the
    /// library builds (`buildApplication`), run until SIGTERM or SIGINT.
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
        let application: NodeApplication
        do {
            application = try await buildApplication(settings, metrics: metrics)
        } catch let failure as NodeStartFailure {
            throw CLIError(message: failure.description, status: failure.kind == .provision ? .invalidProvisionOrArguments : .failure)
        }
        try await application.run()
    }
}

/// A switch given as `on` or `off` (`--hls-low-latency off`).
enum OnOff: String, ExpressibleByArgument, CaseIterable {
    case on, off
}
