import ArgumentParser
import FFmpegBridge
import Dispatch
import Foundation
import LiveNode
import Logging
import MediaCore
import RTSPServer
import Transcoder

struct Serve: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the live node: RTSP publish and play, live ladders for provisioned streams, live HLS.")

    @Option(help: "Address to listen on.")
    var host = "127.0.0.1"

    @Option(help: "RTSP port for publishers and players.")
    var rtspPort = 8554

    @Option(help: "Server RTP port for UDP transport (RTCP is the next one); 0 picks a free pair.")
    var rtpPort = 0

    @Option(help: "Data directory: live HLS under DATA_DIR/hls/<top guid>/.")
    var dataDir = "./data"

    @Option(help: "Provision file to load at start (Stream Manager 2.0 or 1.0); repeatable.")
    var provision: [String] = []

    @Option(help: "Seconds a job waits for its publisher to come back before it ends.")
    var grace: Double = 30

    @OptionGroup var encoding: EncodingOptions

    @Option(help: "Also push every variant to this RTSP origin (rtsp://host:port), reconnecting when it goes away.")
    var origin: String?

    @Flag(help: "Relay publishes to streams that are not provisioned, as a single variant.")
    var allowUnprovisioned = false

    @Option(help: "Seconds between status lines in the log (0: none).")
    var statusInterval: Double = 10

    func validate() throws {
        guard grace >= 0, grace <= 3600 else { throw ValidationError("--grace must be 0 to 3600 seconds (got \(grace))") }
        guard (1...65535).contains(rtspPort) || rtspPort == 0 else { throw ValidationError("--rtsp-port must be 0 to 65535 (got \(rtspPort))") }
        if let origin, OriginPusher.hostAndPort(origin) == nil {
            throw ValidationError("--origin must be rtsp://host[:port] (got \(origin))")
        }
    }

    func run() throws {
        LoggingSystem.bootstrap { StreamLogHandler.standardError(label: $0) }
        FFmpegLibrary.setLogLevel(.error)
        let logger = Logger(label: "abr.serve")
        let ladders = try provision.map { try loadLadder(path: $0, streamGuid: nil) }
        var nodeConfiguration = LiveNode.Configuration(dataDirectory: URL(fileURLWithPath: dataDir))
        nodeConfiguration.grace = grace
        nodeConfiguration.allowUnprovisioned = allowUnprovisioned
        nodeConfiguration.origin = origin
        nodeConfiguration.transcode = encoding.transcodeOptions()
        let registry = StreamRegistry()
        let node = LiveNode(configuration: nodeConfiguration, registry: registry)
        for ladder in ladders {
            do {
                try node.provision(ladder)
            } catch {
                throw CLIError(message: "\(ladder.streamGuid) is provisioned twice", status: .invalidProvisionOrArguments)
            }
        }
        var rtsp = RTSPService.Configuration()
        rtsp.host = host
        rtsp.port = rtspPort
        rtsp.rtpPort = rtpPort
        let service = RTSPService(configuration: rtsp, registry: registry, policy: node)
        let port: Int
        do {
            port = try service.start()
        } catch {
            throw CLIError(message: "cannot listen on \(host):\(rtspPort): \(error)", status: .failure)
        }
        print("RTSP: rtsp://\(host):\(port)/<stream guid>   HLS: \(dataDir)/hls/<top guid>/master.m3u8")
        for ladder in ladders {
            print("  publish \(ladder.top.streamGuid) to rtsp://\(host):\(port)/\(ladder.top.streamGuid); play " +
                  ladder.variants.map { "rtsp://\(host):\(port)/\($0.streamGuid)" }.joined(separator: " "))
        }

        let status = statusInterval > 0 ? DispatchSource.makeTimerSource(queue: .global()) : nil
        status?.schedule(deadline: .now() + statusInterval, repeating: statusInterval)
        status?.setEventHandler {
            for job in node.jobs {
                let s = job.status
                let variants = s.variants.map { v in
                    let latency = v.latencyP50.map { String(format: " %.0f/%.0fms", $0, v.latencyP99 ?? 0) } ?? ""
                    return "L\(v.abrLevel) \(v.framesOut)f \(v.droppedFrames)d \(v.averageBitRate / 1000)k\(latency)"
                }
                logger.info("job \(s.streamGuid) \(s.state.rawValue): \(variants.joined(separator: " | "))",
                            metadata: ["players": "\(s.variants.map { registry.existingStream($0.streamGuid)?.playerCount ?? 0 })"])
            }
        }
        status?.resume()

        let done = DispatchSemaphore(value: 0)
        let sources = onTerminationSignal { done.signal() }
        done.wait()
        sources.forEach { $0.cancel() }
        status?.cancel()
        logger.info("shutting down: finishing jobs")
        node.shutdown()
        service.shutdown()
    }
}
