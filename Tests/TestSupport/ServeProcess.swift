import Foundation

/// The built `abr-worker`, next to this test bundle in the build folder.
public let workerExecutable: String = {
    let selfPath = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    return URL(fileURLWithPath: selfPath).deletingLastPathComponent().appendingPathComponent("abr-worker").path
}()

/// `abr-worker serve` as a real process on loopback, on ports the system picks, with the URLs
/// it prints read back; HTTP calls go through curl, an independent client.
public final class ServeProcess: @unchecked Sendable {
    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    public struct Reply: Sendable {
        public var status: Int
        public var body: String
        public var json: Any? { try? JSONSerialization.jsonObject(with: Data(body.utf8), options: [.fragmentsAllowed]) }
    }

    public let dataDirectory: URL
    public let process: Process
    public let httpBase: String
    public let rtspBase: String
    /// `rtmp://127.0.0.1:port` and `srt://127.0.0.1:port`, unless the test turned them off.
    public private(set) var rtmpBase: String?
    public private(set) var srtBase: String?
    public let outputFile: URL
    public let errorFile: URL
    /// What the node runs under (a namespace's `ip netns exec …`): its HTTP clients run there too.
    public let launcher: [String]

    /// Starts the node and waits (up to 60 s) until it prints where it listens.
    /// - Parameter launcher: a command the node runs under (`prlimit --nofile=…`), if any.
    /// - Parameter host: the loopback address it listens on (fleet tests give each node its own).
    public init(dataDirectory: URL, arguments: [String] = [], environment: [String: String] = [:], launcher: [String] = [],
                host: String = "127.0.0.1") throws {
        self.dataDirectory = dataDirectory
        self.launcher = launcher
        try FileManager.default.createDirectory(at: dataDirectory, withIntermediateDirectories: true)
        let stamp = UUID().uuidString.prefix(8)
        outputFile = dataDirectory.appendingPathComponent("../serve-\(stamp).out").standardizedFileURL
        errorFile = dataDirectory.appendingPathComponent("../serve-\(stamp).err").standardizedFileURL
        FileManager.default.createFile(atPath: outputFile.path, contents: nil)
        FileManager.default.createFile(atPath: errorFile.path, contents: nil)
        process = Process()
        process.executableURL = URL(fileURLWithPath: launcher.first ?? workerExecutable)
        // Tests count what every rung produces while the suite itself keeps the machine busy: a
        // rung shed for that would fail them for the wrong reason. Shedding has its own tests.
        process.arguments = launcher.dropFirst() + (launcher.isEmpty ? [] : [workerExecutable])
            + ["serve", "--host", host, "--rtsp-port", "0", "--rtmp-port", "0", "--srt-port", "0", "--webrtc-port", "0", "--http-port", "0", "--data-dir", dataDirectory.path,
               "--status-interval", "0", "--no-load-shedding"] + arguments
        var env = ProcessInfo.processInfo.environment
        for (key, value) in environment { env[key] = value }
        process.environment = env
        process.standardOutput = try FileHandle(forWritingTo: outputFile)
        process.standardError = try FileHandle(forWritingTo: errorFile)
        process.standardInput = FileHandle.nullDevice
        try process.runDeliveringSignals()
        let deadline = Date().addingTimeInterval(60)
        var http: String?, rtsp: String?
        while Date() < deadline, process.isRunning, http == nil || rtsp == nil {
            let output = (try? String(contentsOf: outputFile, encoding: .utf8)) ?? ""
            http = output.firstMatch(of: /HTTP: (https?:\/\/127\.\d+\.\d+\.\d+:\d+)\//).map { String($0.output.1) }
            rtsp = output.firstMatch(of: /RTSP: (rtsp:\/\/127\.\d+\.\d+\.\d+:\d+)\//).map { String($0.output.1) }
            Thread.sleep(forTimeInterval: 0.1)
        }
        guard let http, let rtsp else {
            stopProcess(process, signal: SIGKILL)
            throw Failure(description: "serve did not start: \((try? String(contentsOf: errorFile, encoding: .utf8)) ?? "")")
        }
        httpBase = http
        rtspBase = rtsp
        rtmpBase = output.firstMatch(of: /RTMP: (rtmp:\/\/127\.\d+\.\d+\.\d+:\d+)\//).map { String($0.output.1) }
        srtBase = output.firstMatch(of: /SRT: (srt:\/\/127\.\d+\.\d+\.\d+:\d+)\?/).map { String($0.output.1) }
    }

    public var output: String { (try? String(contentsOf: outputFile, encoding: .utf8)) ?? "" }
    public var log: String { (try? String(contentsOf: errorFile, encoding: .utf8)) ?? "" }

    /// One HTTP exchange with curl.
    public func http(_ method: String, _ path: String, headers: [String: String] = [:], body: String? = nil, user: String? = nil) throws -> Reply {
        var arguments = ["-s", "-S", "--max-time", "60", "-X", method, "-w", "\n%{http_code}", "--path-as-is"]
        // A node serving HTTPS in a test has a certificate made for the test.
        if httpBase.hasPrefix("https:") { arguments.append("-k") }
        for (name, value) in headers { arguments += ["-H", "\(name): \(value)"] }
        if let user { arguments += ["-u", user] }
        if let body { arguments += ["--data-binary", body] }
        // Under a namespace's launcher, curl runs inside it; a resource limit (prlimit) need not apply.
        let inside = launcher.first == "/usr/sbin/ip" ? launcher : []
        let result = try runProcess(inside.first ?? "/usr/bin/curl", inside.dropFirst() + (inside.isEmpty ? [] : ["/usr/bin/curl"]) + arguments + [httpBase + path],
                                    timeout: 90)
        guard let newline = result.stdout.lastIndex(of: "\n"), let status = Int(result.stdout[result.stdout.index(after: newline)...]) else {
            throw Failure(description: "curl \(method) \(path) failed: \(result.stderr)")
        }
        return Reply(status: status, body: String(result.stdout[..<newline]))
    }

    /// Logs in as `user:password` and returns the bearer token.
    public func login(user: String, password: String) throws -> String {
        let reply = try http("PUT", "/as/v1/auth/login", user: "\(user):\(password)")
        guard reply.status == 200, let token = (reply.json as? [String: Any])?["token"] as? String else {
            throw Failure(description: "login failed: \(reply.status) \(reply.body)")
        }
        return token
    }

    /// Polls until `condition` holds or the timeout passes; false on timeout.
    public func waitFor(timeout: TimeInterval, _ condition: () throws -> Bool) rethrows -> Bool {
        try waitUntil(timeout: timeout, every: 0.25, condition)
    }

    /// SIGINT by default: the node shuts down at once (SIGTERM drains its live jobs first, which a
    /// test asks for explicitly).
    public func stop(signal: Int32 = SIGINT) {
        stopProcess(process, signal: signal, grace: 40)
    }

    public func jobState(_ guid: String) -> String? {
        ((try? http("GET", "/v1/jobs/\(guid)"))?.json as? [String: Any])?["state"] as? String
    }
}

/// Polls until `condition` holds or the timeout passes; false on timeout. For state that another
/// thread changes when it gets to it (a job noticing its publisher left, a queue draining).
public func waitUntil(timeout: TimeInterval, every interval: TimeInterval = 0.05, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if try condition() { return true }
        Thread.sleep(forTimeInterval: interval)
    }
    return try condition()
}
