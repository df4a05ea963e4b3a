/// A username and password an RTSP client must present: a provision's publisher credentials
/// (SM 2.0 `credentials`, SM 1.0 `meta.authentication`) or the node's player credentials.
/// Never printed: `description` hides the password, and the HTTP API returns provisions only
/// to token holders.
public struct StreamCredentials: Sendable, Hashable, Codable, CustomStringConvertible {
    public var username: String
    public var password: String

    public init(username: String, password: String) {
        self.username = username
        self.password = password
    }

    public var description: String { "\(username):***" }
}
