import ArgumentParser
import Dispatch
import Foundation
import Logging
import RTSPServer

struct Serve: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the live node: RTSP publish and play, live ladders for provisioned streams.")

    @Option(help: "Address to listen on.")
    var host = "127.0.0.1"

    @Option(help: "RTSP port for publishers and players.")
    var rtspPort = 8554

    @Option(help: "Server RTP port for UDP transport (RTCP is the next one); 0 picks a free pair.")
    var rtpPort = 0

    @Flag(help: "Relay publishes to streams that are not provisioned, as a single variant.")
    var allowUnprovisioned = false

    func run() throws {
        LoggingSystem.bootstrap { StreamLogHandler.standardError(label: $0) }
        var configuration = RTSPService.Configuration()
        configuration.host = host
        configuration.port = rtspPort
        configuration.rtpPort = rtpPort
        let registry = StreamRegistry()
        let service = RTSPService(configuration: configuration, registry: registry,
                                  policy: RelayPolicy(registry: registry, allowUnprovisioned: allowUnprovisioned))
        let port = try service.start()
        print("RTSP: rtsp://\(host):\(port)/<stream guid>")
        let done = DispatchSemaphore(value: 0)
        let sources = [SIGINT, SIGTERM].map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { done.signal() }
            source.resume()
            return source
        }
        done.wait()
        sources.forEach { $0.cancel() }
        service.shutdown()
    }
}

/// Until provisions drive jobs: relay unprovisioned publishes when allowed.
struct RelayPolicy: PublishPolicy {
    let registry: StreamRegistry
    let allowUnprovisioned: Bool

    func decide(_ request: PublishRequest) -> PublishDecision {
        guard allowUnprovisioned else { return .refuse(status: 404, reason: "\(request.path) is not provisioned") }
        return .accept(RelaySink(stream: registry.stream(request.path)))
    }
}
