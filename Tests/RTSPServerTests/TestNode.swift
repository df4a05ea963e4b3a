import Foundation
import Ingest
import Logging
import RTSPServer
import TestSupport

/// An RTSP service on a free loopback port, shut down when released.
final class TestNode {
    let registry = StreamRegistry()
    let service: RTSPService
    let port: Int

    init(sessionTimeout: Int = 60, playerBacklogLimit: Int = 4 * 1024 * 1024,
         makePolicy: (StreamRegistry) -> any PublishPolicy = { RelayEverything(registry: $0) },
         configure: (inout RTSPService.Configuration) -> Void = { _ in }) throws {
        var configuration = RTSPService.Configuration()
        configuration.port = 0
        configuration.sessionTimeout = sessionTimeout
        configuration.playerBacklogLimit = playerBacklogLimit
        // Small kernel buffers, so a client that stops reading backs up into the node's own queue quickly.
        if playerBacklogLimit < 1024 * 1024 { configuration.socketSendBuffer = 64 * 1024 }
        configure(&configuration)
        var logger = Logger(label: "test.rtsp")
        logger.logLevel = .warning
        service = RTSPService(configuration: configuration, registry: registry, policy: makePolicy(registry), logger: logger)
        port = try service.start()
    }

    deinit {
        service.shutdown()
    }

    func url(_ path: String) -> String { "rtsp://127.0.0.1:\(port)/\(path)" }

    /// Waits until `path` has something to play, or gives up after `timeout` seconds.
    func waitUntilPlayable(_ path: String, timeout: TimeInterval = 15) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if registry.existingStream(path)?.isPlayable == true, registry.existingStream(path)!.framesWritten > 0 { return true }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return false
    }
}

struct RefuseEverything: PublishPolicy {
    func decide(_ request: PublishRequest) -> PublishDecision { .refuse(status: 404, reason: "\(request.path) is not provisioned") }
}

/// A real publisher: ffmpeg sending a fixture in a loop, in real time, for a bounded time.
final class FFmpegPublisher {
    let process = Process()
    let errors = Pipe()

    init(url: String, transport: String, seconds: Int, input: String = fixture("720p30-h264-aac.mp4")) throws {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/ffmpeg")
        process.arguments = ["-hide_banner", "-loglevel", "error", "-re", "-stream_loop", "-1", "-i", input, "-t", String(seconds),
                             "-c", "copy", "-f", "rtsp", "-rtsp_transport", transport, url]
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = errors
        try process.runDeliveringSignals()
    }

    var errorText: String {
        process.isRunning ? "" : String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    }

    func stop() {
        stopProcess(process, signal: SIGINT)
    }

    deinit { stop() }
}

/// Plays `url` with ffmpeg for `seconds` and reports what arrived, judged by ffprobe on the recording.
func play(_ url: String, transport: String, seconds: Double) throws -> (status: Int32, stream: MediaProbe.VideoStream, keyframes: [Double], stderr: String) {
    let file = FileManager.default.temporaryDirectory.appendingPathComponent("play-\(UUID().uuidString).mkv").path
    defer { try? FileManager.default.removeItem(atPath: file) }
    let result = try runProcess("ffmpeg", ["-hide_banner", "-loglevel", "error", "-rtsp_transport", transport, "-timeout", "10000000",
                                           "-i", url, "-t", String(seconds), "-c", "copy", "-y", file], timeout: seconds + 20)
    let stream = (try? MediaProbe.videoStream(file)) ?? MediaProbe.VideoStream(width: 0, height: 0, bitRate: 0, frames: 0, profile: "")
    return (result.status, stream, (try? MediaProbe.keyframeTimes(file)) ?? [], result.stderr)
}
