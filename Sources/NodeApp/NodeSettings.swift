import ControlPlane
import Foundation
import RTSPServer
import Store
import Transcoder

/// Everything `abr-worker serve` is told, as plain values: the command line fills it in, a test
/// or an embedding program sets it directly. The defaults are the command's.
public struct NodeSettings: Sendable {
    /// Address RTSP, RTMP and SRT listen on (and HTTP unless `httpHost` is set).
    public var host = "127.0.0.1"
    public var httpHost: String?
    public var maxConnections = 1024
    public var maxConnectionsPerAddress = 64
    public var maxHttpConnections = 512
    public var maxHttpConnectionsPerAddress = 64
    /// 0 picks a free port.
    public var rtspPort = 8554
    /// 0 picks a free port, -1 turns the listener off.
    public var rtmpPort = 1935
    /// 0 picks a free port, -1 turns the listener off.
    public var srtPort = 8890
    public var srtLatencyMilliseconds = 120
    /// WHEP viewers' one UDP port; 0 picks a free port, -1 turns WebRTC off.
    public var webrtcPort = 8189
    /// Addresses announced to browsers as host candidates (empty: the listening address).
    public var webrtcCandidates: [String] = []
    /// 0 picks a free port.
    public var httpPort = 5080
    /// The server's RTP port for UDP transport (RTCP the next one); 0 picks a free pair.
    public var rtpPort = 0
    public var dataDirectory = "./data"
    /// `sqlite:PATH` or `postgres://…`; nil takes `ABR_WORKER_STORE`, then SQLite in the data directory.
    public var store: String?
    public var nodeId: String?
    public var nodeGroup = "default"
    public var subGroup = "default"
    public var advertiseAddress: String?
    /// Seconds SIGTERM waits for live jobs before ending them.
    public var drainTimeout: Double = 60
    /// Provision files loaded at start unless already stored.
    public var provisionFiles: [String] = []
    /// A media file published to the first provision's top in a loop (the demo publisher).
    public var publishLoop: String?
    /// Seconds a job waits for its publisher to come back.
    public var grace: Double = 30
    public var transcode = TranscodeOptions()
    public var origin: String?
    public var allowUnprovisioned = false
    /// Cores the node may fill with encoding; nil: all of them.
    public var capacityCores: Double?
    public var maxLoad = 0.85
    public var loadShedding = true
    /// Low-Latency HLS on every rung.
    public var hlsLowLatency = true
    /// hls.js for the status page's player (`--hls-js`).
    public var hlsPlayerScript: String?
    /// PEM files: with both, the HTTP port serves HTTPS (HTTP/2 and HTTP/1.1).
    public var tlsCertificate: String?
    public var tlsKey: String?
    public var tokenLifetime = 3600.0
    /// Seconds between status lines in the log; 0: none.
    public var statusInterval: Double = 10

    public init() {}

    /// The first setting that cannot work, said as the command line names it.
    public struct Invalid: Error, CustomStringConvertible {
        public var description: String
    }

    public func validate() throws {
        func refuse(_ text: String) -> Invalid { Invalid(description: text) }
        guard grace >= 0, grace <= 3600 else { throw refuse("--grace must be 0 to 3600 seconds (got \(grace))") }
        for (name, port) in [("--rtsp-port", rtspPort), ("--http-port", httpPort)] where !(0...65535).contains(port) {
            throw refuse("\(name) must be 0 to 65535 (got \(port))")
        }
        guard (-1...65535).contains(rtmpPort) else { throw refuse("--rtmp-port must be -1 (off) or 0 to 65535 (got \(rtmpPort))") }
        if let script = hlsPlayerScript, !FileManager.default.isReadableFile(atPath: script) {
            throw refuse("--hls-js \(script): no readable file there (`./abr deps` puts hls.js in .build/hlsjs/hls.mjs)")
        }
        guard (tlsCertificate == nil) == (tlsKey == nil) else {
            throw refuse("--tls-cert and --tls-key go together (got only \(tlsCertificate == nil ? "--tls-key" : "--tls-cert"))")
        }
        guard (-1...65535).contains(webrtcPort) else { throw refuse("--webrtc-port must be -1 (off) or 0 to 65535 (got \(webrtcPort))") }
        guard (-1...65535).contains(srtPort) else { throw refuse("--srt-port must be -1 (off) or 0 to 65535 (got \(srtPort))") }
        guard (20...10_000).contains(srtLatencyMilliseconds) else {
            throw refuse("--srt-latency must be 20 to 10000 ms (got \(srtLatencyMilliseconds))")
        }
        if let origin, OriginPusher.hostAndPort(origin) == nil { throw refuse("--origin must be rtsp://host[:port] (got \(origin))") }
        if let capacityCores, !(capacityCores > 0) { throw refuse("--capacity-cores must be above 0 (got \(capacityCores))") }
        guard maxLoad > 0, maxLoad <= 1 else { throw refuse("--max-load must be above 0 and at most 1 (got \(maxLoad))") }
        guard maxConnections >= 1, maxConnectionsPerAddress >= 1, maxHttpConnections >= 1, maxHttpConnectionsPerAddress >= 1 else {
            throw refuse("--max-connections, --max-http-connections and their per-address limits must be at least 1")
        }
        guard drainTimeout >= 0, drainTimeout <= 86_400 else { throw refuse("--drain-timeout must be 0 to 86400 seconds (got \(drainTimeout))") }
        if let store {
            do { _ = try StoreLocation.parse(store) } catch { throw refuse("--store: \(error)") }
        }
        if let nodeId, !(1...128).contains(nodeId.count) || nodeId.contains(where: { $0.isWhitespace || $0 == "/" }) {
            throw refuse("--node-id must be 1 to 128 characters without spaces or '/' (got \(nodeId))")
        }
        guard ProvisionBook.isValidNodeGroup(nodeGroup), ProvisionBook.isValidNodeGroup(subGroup) else {
            throw refuse("--node-group and --sub-group must be 1 to 64 letters, digits, '.', '_' or '-'")
        }
        guard tokenLifetime >= 10 else { throw refuse("--token-lifetime must be at least 10 seconds (got \(tokenLifetime))") }
        if let publishLoop, !FileManager.default.isReadableFile(atPath: publishLoop) {
            throw refuse("--publish-loop: cannot read \(publishLoop)")
        }
    }
}
