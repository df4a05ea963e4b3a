import Foundation

/// A real PostgreSQL server for a test: Debian's `initdb` into a temporary folder, the server on a
/// free loopback port as this test's own child process (so no daemon outlives the test), stopped
/// (and its folder removed) by `stop()`. Over TCP, trust authentication, or SCRAM-SHA-256 when the
/// server is made with a password; the tools (`createdb`, `psql`) come in through its Unix socket,
/// trusted. As root, it runs as the `postgres` user, which `initdb` requires.
public final class PostgresServer: @unchecked Sendable {
    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    public let directory: URL
    public let port: Int
    public let database = "abr"
    public let user = "abr"
    /// The user's password, asked for (SCRAM-SHA-256) on every TCP connection; nil for trust.
    public let password: String?
    /// The server's certificate (PEM), when it speaks TLS: the root a client must trust.
    public var certificatePath: String { directory.appendingPathComponent("server.crt").path }
    private let binaries: URL
    private let asUser: [String]
    private let server = Process()

    /// `postgres://abr@127.0.0.1:PORT/abr?sslmode=disable` (with `:password` when it has one)
    public var url: String { url(password: password) }

    public func url(password: String?, sslmode: String = "disable") -> String {
        let secret = password.map { ":" + ($0.addingPercentEncoding(withAllowedCharacters: .urlPasswordAllowed) ?? $0) } ?? ""
        return "postgres://\(user)\(secret)@127.0.0.1:\(port)/\(database)?sslmode=\(sslmode)"
    }

    /// With `tls`, the server speaks TLS too, with a self-signed certificate for 127.0.0.1 (`certificatePath`).
    public init(password: String? = nil, tls: Bool = false) throws {
        self.password = password
        guard let binaries = Self.binaries() else {
            throw Failure(description: "PostgreSQL's server programs are not installed (./abr deps installs Debian's postgresql)")
        }
        self.binaries = binaries
        directory = URL(fileURLWithPath: "/tmp/abr-pg-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        // setpriv execs the program itself: signals reach the server, not a wrapper.
        asUser = getuid() == 0 ? ["/usr/bin/setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--"] : []
        if getuid() == 0 { _ = try runProcess("/usr/bin/chown", ["postgres:postgres", directory.path]) }
        port = try Self.freePort()
        let data = directory.appendingPathComponent("data").path
        var serverTLS: [String] = []
        if tls {
            let key = directory.appendingPathComponent("server.key").path
            let made = try runProcess("/usr/bin/openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key,
                                                           "-out", certificatePath, "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                                      timeout: 30)
            guard made.status == 0 else { throw Failure(description: "openssl could not make a certificate: \(made.stderr)") }
            // The server refuses a key others can read, and as root it runs as postgres.
            _ = try runProcess("/usr/bin/chmod", ["600", key])
            if getuid() == 0 { _ = try runProcess("/usr/bin/chown", ["postgres:postgres", key, certificatePath]) }
            serverTLS = ["-c", "ssl=on", "-c", "ssl_cert_file=\(certificatePath)", "-c", "ssl_key_file=\(key)"]
        }
        var initdb = ["-D", data, "-U", user, "--no-sync", "-E", "UTF8"]
        if let password {
            let passwordFile = directory.appendingPathComponent("password").path
            FileManager.default.createFile(atPath: passwordFile, contents: Data(password.utf8))
            initdb += ["--auth-local=trust", "--auth-host=scram-sha-256", "--pwfile=\(passwordFile)"]
        } else {
            initdb += ["--auth=trust"]
        }
        try run("initdb", initdb)
        // Loopback only, a socket folder of its own, and no durability work a test does not need.
        let command = asUser + [binaries.appendingPathComponent("postgres").path, "-D", data, "-c", "listen_addresses=127.0.0.1", "-c", "port=\(port)",
                                "-c", "unix_socket_directories=\(directory.path)", "-c", "fsync=off", "-c", "max_connections=200"] + serverTLS
        let log = directory.appendingPathComponent("server.log")
        FileManager.default.createFile(atPath: log.path, contents: nil)
        server.executableURL = URL(fileURLWithPath: command[0])
        server.arguments = Array(command.dropFirst())
        server.standardOutput = try FileHandle(forWritingTo: log)
        server.standardError = try FileHandle(forWritingTo: log)
        server.standardInput = FileHandle.nullDevice
        try server.runDeliveringSignals()
        var created = false
        for _ in 0..<300 where server.isRunning && !created {
            created = (try? run("createdb", ["-h", directory.path, "-p", "\(port)", "-U", user, database])) != nil
            if !created { Thread.sleep(forTimeInterval: 0.1) }
        }
        guard created else {
            stopProcess(server, signal: SIGKILL)
            throw Failure(description: "PostgreSQL did not start: \((try? String(contentsOf: log, encoding: .utf8)) ?? "")")
        }
    }

    /// Output goes to a file, not a pipe: the server `pg_ctl` starts would inherit a pipe and
    /// keep it open for its whole life.
    private func run(_ program: String, _ arguments: [String]) throws {
        let command = asUser + [binaries.appendingPathComponent(program).path] + arguments
        let output = directory.appendingPathComponent("\(program).out")
        FileManager.default.createFile(atPath: output.path, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: command[0])
        process.arguments = Array(command.dropFirst())
        let handle = try FileHandle(forWritingTo: output)
        defer { try? handle.close() }
        process.standardOutput = handle
        process.standardError = handle
        process.standardInput = FileHandle.nullDevice
        try process.runDeliveringSignals()
        guard waitUntil(timeout: 120, every: 0.05, { !process.isRunning }) else {
            stopProcess(process, signal: SIGKILL)
            throw Failure(description: "\(program) did not finish within 120 s")
        }
        guard process.terminationStatus == 0 else {
            throw Failure(description: "\(program) failed (\(process.terminationStatus)): \((try? String(contentsOf: output, encoding: .utf8)) ?? "")")
        }
    }

    /// A SQL statement through psql, its rows as text.
    public func query(_ sql: String) throws -> String {
        let result = try runProcess(binaries.appendingPathComponent("psql").path,
                                    ["-h", directory.path, "-p", "\(port)", "-U", user, "-d", database, "-At", "-c", sql], timeout: 60)
        guard result.status == 0 else { throw Failure(description: "psql: \(result.stderr)") }
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Fast shutdown (SIGINT): connections closed, the server gone before this returns.
    public func stop() {
        stopProcess(server, signal: SIGINT, grace: 20)
        try? FileManager.default.removeItem(at: directory)
    }

    /// Debian keeps the server programs in /usr/lib/postgresql/<version>/bin.
    static func binaries() -> URL? {
        let root = URL(fileURLWithPath: "/usr/lib/postgresql")
        let versions = ((try? FileManager.default.contentsOfDirectory(atPath: root.path)) ?? []).compactMap(Int.init).sorted()
        return versions.last.map { root.appendingPathComponent("\($0)/bin") }
            .flatMap { FileManager.default.fileExists(atPath: $0.appendingPathComponent("pg_ctl").path) ? $0 : nil }
    }

    /// A port nothing listens on now (bound and released).
    public static func freePort() throws -> Int {
        let socket = Foundation.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { throw Failure(description: "socket() failed") }
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socket, $0, length) == 0 && getsockname(socket, $0, &length) == 0 }
        }
        guard bound else { throw Failure(description: "bind() failed") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
