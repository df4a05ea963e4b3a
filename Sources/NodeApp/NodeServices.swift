import ChildProcess
import ControlPlane
import Foundation
import Logging
import MediaCore
import ServiceLifecycle
import Store
import Synchronization

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
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                // The charts' samples, from the first moment: a page opened at start has a point.
                group.addTask {
                    while !Task.isCancelled {
                        plane.recordHistory()
                        try? await Task.sleep(for: .seconds(NodeHistory.interval))
                    }
                }
                if statusInterval > 0 {
                    group.addTask {
                        while !Task.isCancelled {
                            try? await Task.sleep(for: .seconds(statusInterval))
                            if !Task.isCancelled { logStatus() }
                        }
                    }
                }
            }
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

    func run() async throws {
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            // The service group ignores SIGINT/SIGTERM to handle them itself, and children inherit
            // ignored signals: give ffmpeg its defaults back so it can be stopped cleanly. (They
            // also inherit the spawning thread's mask: see `runDeliveringSignals`.)
            process.arguments = ["--default-signal=INT,TERM", "ffmpeg", "-hide_banner", "-loglevel", "error", "-re", "-stream_loop", "-1", "-i", file,
                                 "-c", "copy", "-f", "rtsp", "-rtsp_transport", "tcp", url]
            process.standardInput = FileHandle.nullDevice
            do {
                try process.runDeliveringSignals()
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
