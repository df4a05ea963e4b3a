import MediaCore
import ServiceLifecycle

/// What a publish protocol tells the rest of the node about itself: its name, and the URL a
/// publisher pushes a stream to. The control plane, the fleet, the metrics and the start banner
/// know a protocol only through this value, so a new protocol names itself here, in its own module.
public struct IngestProtocol: Sendable, Equatable, Codable {
    /// The URL scheme, and the protocol's name in status, logs and metrics: `rtmp`, `srt`.
    public var scheme: String
    /// How people write it: `RTMP`, `SRT`.
    public var name: String
    /// A publish URL with `{host}`, `{port}` and `{stream}` to fill in (SRT's stream goes in its
    /// `streamid`, RTMP's in the path).
    public var urlTemplate: String
    /// Said after the URL in the node's start banner: what it carries.
    public var note: String

    public init(scheme: String, name: String, urlTemplate: String, note: String = "") {
        self.scheme = scheme
        self.name = name
        self.urlTemplate = urlTemplate
        self.note = note
    }

    /// Where a publisher of `stream` (`live/stream1_1`) pushes on `host:port` (an IPv6 host is
    /// bracketed here).
    public func publishURL(host: String, port: Int, stream: String) -> String {
        let host = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
        return urlTemplate.replacing("{host}", with: host).replacing("{port}", with: String(port)).replacing("{stream}", with: stream)
    }

    /// The command-line option that sets its port (`-1` turns it off).
    public var portOption: String { "--\(scheme)-port" }
}

/// A listener for one publish protocol, as the node runs it. The protocol's module parses its
/// wire and hands authenticated tracks to the `PublishPolicy`'s sink, through `PublishAdmission`
/// and the shared `PublisherSlots`, as every protocol does. As a swift-service-lifecycle service
/// it runs until the node shuts down, then closes.
public protocol IngestListener: AnyObject, Service {
    var ingestProtocol: IngestProtocol { get }
    /// Binds the port and starts accepting publishers; the port bound (0 asks for any free one).
    func start() throws -> Int
    /// Closes the port and every publish on it.
    func shutdown()
    /// Publishers connected now, admitted or still in their handshake.
    var connectionCount: Int { get }
}

/// What every ingest listener is made from: where it listens, and the node's one publisher
/// registry and publish policy. `environment` carries secrets kept out of argv (`ps` shows argv).
public struct IngestContext: Sendable {
    public var host: String
    public var port: Int
    public var publishers: PublisherSlots
    public var policy: any PublishPolicy
    public var environment: [String: String]
    /// The node's clock, for every timeout and silence the listener measures.
    public var clock: NodeClock

    public init(host: String, port: Int, publishers: PublisherSlots, policy: any PublishPolicy, environment: [String: String] = [:],
                clock: NodeClock = .system) {
        self.host = host
        self.port = port
        self.publishers = publishers
        self.policy = policy
        self.environment = environment
        self.clock = clock
    }
}

/// A listener the node runs, and the port it bound.
public struct IngestEndpoint: Sendable, Equatable, Codable {
    public var ingestProtocol: IngestProtocol
    public var port: Int

    public init(_ ingestProtocol: IngestProtocol, port: Int) {
        self.ingestProtocol = ingestProtocol
        self.port = port
    }
}
