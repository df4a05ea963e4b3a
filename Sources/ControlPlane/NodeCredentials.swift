import AccessTokens
import Foundation

/// The admin login and the JWT signing secret. Each comes from the environment
/// (`ABR_WORKER_ADMIN_USER`, `ABR_WORKER_ADMIN_PASSWORD`, `ABR_WORKER_JWT_SECRET`) or, when
/// unset, from `DATA_DIR/credentials.json`, generated on first start (mode 0600) so that a
/// restart keeps the password and every token already issued.
public struct NodeCredentials: Sendable, Equatable {
    public var adminUser: String
    public var adminPassword: String
    public var jwtSecret: String
    /// The secret playback token keys are derived from (`ABR_WORKER_PLAYBACK_SECRET`); the JWT
    /// signing secret when unset, which every node of a fleet shares already. Derived keys reveal
    /// neither.
    public var playbackSecretOverride: String?
    public var playbackSecret: String { playbackSecretOverride ?? jwtSecret }
    /// Which values were generated just now: the caller prints them once.
    public var generated: [String] = []

    public init(adminUser: String, adminPassword: String, jwtSecret: String) {
        self.adminUser = adminUser
        self.adminPassword = adminPassword
        self.jwtSecret = jwtSecret
    }

    private struct StoredSecrets: Codable {
        var adminPassword: String?
        var jwtSecret: String?
    }

    public static func fileURL(in dataDirectory: URL) -> URL {
        dataDirectory.appendingPathComponent("credentials.json")
    }

    /// HS256 keys shorter than the hash are weak (and jwt-kit refuses them).
    public static let minimumSecretBytes = 32

    public struct WeakSecret: Error, CustomStringConvertible {
        public var description: String {
            "ABR_WORKER_JWT_SECRET must be at least \(NodeCredentials.minimumSecretBytes) bytes; unset it to have one generated"
        }
    }

    /// - Throws: `WeakSecret`, or when the data directory cannot hold the generated secrets.
    public static func load(environment: [String: String], dataDirectory: URL) throws -> NodeCredentials {
        if let given = environment["ABR_WORKER_JWT_SECRET"], !given.isEmpty, given.utf8.count < minimumSecretBytes {
            throw WeakSecret()
        }
        let file = fileURL(in: dataDirectory)
        var stored = (try? Data(contentsOf: file)).flatMap { try? JSONDecoder().decode(StoredSecrets.self, from: $0) } ?? StoredSecrets()
        var generated: [String] = []
        func value(_ variable: String, _ keyPath: WritableKeyPath<StoredSecrets, String?>, bytes: Int) -> String {
            if let given = environment[variable], !given.isEmpty { return given }
            if let kept = stored[keyPath: keyPath], !kept.isEmpty { return kept }
            let made = randomSecret(bytes: bytes)
            stored[keyPath: keyPath] = made
            generated.append(variable)
            return made
        }
        var credentials = NodeCredentials(
            adminUser: environment["ABR_WORKER_ADMIN_USER"].flatMap { $0.isEmpty ? nil : $0 } ?? "admin",
            adminPassword: value("ABR_WORKER_ADMIN_PASSWORD", \.adminPassword, bytes: 12),
            jwtSecret: value("ABR_WORKER_JWT_SECRET", \.jwtSecret, bytes: 32))
        credentials.generated = generated
        credentials.playbackSecretOverride = environment["ABR_WORKER_PLAYBACK_SECRET"].flatMap { $0.isEmpty ? nil : $0 }
        if !generated.isEmpty {
            try FileManager.default.createDirectory(at: dataDirectory, withIntermediateDirectories: true)
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            try encoder.encode(stored).write(to: file, options: .atomic)
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: file.path)
        }
        return credentials
    }

    /// URL-safe random text from the system's generator.
    static func randomSecret(bytes: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        let raw = (0..<bytes).map { _ in UInt8.random(in: 0...255, using: &generator) }
        return Base64URL.encode(Data(raw))
    }
}

/// Equal-length, data-independent comparison: a wrong password or token takes as long whatever it shares.
