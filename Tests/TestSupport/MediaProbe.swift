@_exported import ChildProcess  // every test that starts a peer uses `runDeliveringSignals`
import Foundation

public let fixturesDirectory = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("Fixtures")

public func fixture(_ path: String) -> String { fixturesDirectory.appendingPathComponent(path).path }

/// A file of the repository (`README.md`, `docs/…`), for tests that hold the manual to its word.
public func repositoryFile(_ path: String) -> String { fixturesDirectory.deletingLastPathComponent().appendingPathComponent(path).path }

public struct ProcessResult: Sendable {
    public var status: Int32
    public var stdout: String
    public var stderr: String
}

/// Runs a program to completion with a time limit, capturing its output.
@discardableResult
/// `started`, when given, gets the running process (to signal it before it ends on its own).
public func runProcess(_ executable: String, _ arguments: [String], timeout: TimeInterval = 300,
                       started: ((Process) -> Void)? = nil) throws -> ProcessResult {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable.hasPrefix("/") ? executable : "/usr/bin/\(executable)")
    process.arguments = arguments
    let out = Pipe()
    let err = Pipe()
    process.standardOutput = out
    process.standardError = err
    process.standardInput = FileHandle.nullDevice
    try process.runDeliveringSignals()
    started?(process)
    // Read both pipes while the process runs so neither can fill and block it.
    nonisolated(unsafe) var outData = Data()
    nonisolated(unsafe) var errData = Data()
    let group = DispatchGroup()
    group.enter()
    DispatchQueue.global().async { outData = out.fileHandleForReading.readDataToEndOfFile(); group.leave() }
    group.enter()
    DispatchQueue.global().async { errData = err.fileHandleForReading.readDataToEndOfFile(); group.leave() }
    if group.wait(timeout: .now() + timeout) == .timedOut {
        stopProcess(process)
        _ = group.wait(timeout: .now() + 5)
    }
    process.waitUntilExit()
    return ProcessResult(status: process.terminationStatus,
                         stdout: String(decoding: outData, as: UTF8.self),
                         stderr: String(decoding: errData, as: UTF8.self))
}

/// Stops a peer for good: SIGTERM (or SIGINT, which ffmpeg and gst-launch handle more gracefully),
/// then SIGKILL after a deadline, so no test can hang on a peer that ignores signals.
public func stopProcess(_ process: Process, signal: Int32 = SIGTERM, grace: TimeInterval = 5) {
    guard process.isRunning else { return }
    kill(process.processIdentifier, signal)
    let deadline = Date().addingTimeInterval(grace)
    while process.isRunning, Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
    if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    process.waitUntilExit()
}

/// Waits for a peer to finish on its own; past the deadline it is stopped and the answer is false.
@discardableResult
public func waitForExit(_ process: Process, timeout: TimeInterval) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while process.isRunning, Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
    guard process.isRunning else { return true }
    stopProcess(process)
    return false
}

/// Facts about real media files, read with Debian's ffprobe: the independent judge of our output.
public enum MediaProbe {
    public struct VideoStream: Sendable {
        public var width: Int
        public var height: Int
        public var bitRate: Int
        public var frames: Int
        public var profile: String
        public init(width: Int, height: Int, bitRate: Int, frames: Int, profile: String) {
            self.width = width
            self.height = height
            self.bitRate = bitRate
            self.frames = frames
            self.profile = profile
        }
    }

    public struct VideoPacket: Sendable {
        public var pts: Double
        public var isKeyframe: Bool
        public init(pts: Double, isKeyframe: Bool) {
            self.pts = pts
            self.isKeyframe = isKeyframe
        }
    }

    public static func videoStream(_ path: String) throws -> VideoStream {
        let result = try runProcess("ffprobe", ["-v", "error", "-select_streams", "v:0", "-count_packets",
                                                "-show_entries", "stream=width,height,bit_rate,nb_read_packets,profile",
                                                "-of", "default=noprint_wrappers=1", path])
        var fields: [String: String] = [:]
        for line in result.stdout.split(separator: "\n") {
            let parts = line.split(separator: "=", maxSplits: 1).map(String.init)
            if parts.count == 2 { fields[parts[0]] = parts[1] }
        }
        return VideoStream(width: Int(fields["width"] ?? "") ?? 0, height: Int(fields["height"] ?? "") ?? 0,
                           bitRate: Int(fields["bit_rate"] ?? "") ?? 0, frames: Int(fields["nb_read_packets"] ?? "") ?? 0,
                           profile: fields["profile"] ?? "")
    }

    public static func videoPackets(_ path: String) throws -> [VideoPacket] {
        let result = try runProcess("ffprobe", ["-v", "error", "-select_streams", "v:0",
                                                "-show_entries", "packet=pts_time,flags", "-of", "csv=p=0", path])
        return result.stdout.split(separator: "\n").compactMap { line in
            let parts = line.split(separator: ",", omittingEmptySubsequences: false)
            guard parts.count >= 2, let pts = Double(parts[0]) else { return nil }
            return VideoPacket(pts: pts, isKeyframe: parts[1].contains("K"))
        }
    }

    /// Keyframe times rounded to the millisecond, for comparing across variants.
    public static func keyframeTimes(_ path: String) throws -> [Double] {
        try videoPackets(path).filter(\.isKeyframe).map { ($0.pts * 1000).rounded() / 1000 }
    }

    public static func decodedFrameCount(_ path: String) throws -> Int {
        let result = try runProcess("ffprobe", ["-v", "error", "-select_streams", "v:0", "-count_frames",
                                                "-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", path])
        // MPEG-TS adds a line per program; the stream's count is the first number.
        return result.stdout.split(separator: "\n").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }.first ?? -1
    }

    public static func hasAudio(_ path: String) throws -> Bool {
        let result = try runProcess("ffprobe", ["-v", "error", "-select_streams", "a", "-show_entries", "stream=codec_name", "-of", "csv=p=0", path])
        return result.stdout.contains("aac")
    }
}
