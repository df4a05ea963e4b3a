import MediaCore

/// A publisher asking to publish `path`, over whichever protocol.
public struct PublishRequest: Sendable {
    public var path: String
    public var remoteAddress: String
    /// `rtsp`, `rtmp` or `srt`: for status, logs and metrics.
    public var transport: String
    /// The SPS announced before any media (RTSP's SDP); nil when it comes in-band (RTMP's
    /// sequence header, SRT's stream), and then `MediaSink.refusal(of:)` judges it.
    public var sps: H264SPS?

    public init(path: String, remoteAddress: String, transport: String, sps: H264SPS?) {
        self.path = path
        self.remoteAddress = remoteAddress
        self.transport = transport
        self.sps = sps
    }
}

public enum PublishDecision: Sendable {
    /// What the publisher sends goes to this sink, in order, from one of the server's threads at a
    /// time: formats before the media in them, times in each track's clock from the session's
    /// start, never decreasing except across `timelineRestarted`.
    case accept(any MediaSink)
    case refuse(status: Int, reason: String)
}

/// Decides who may publish what: the live node maps provisioned streams to jobs.
public protocol PublishPolicy: Sendable {
    /// What a publisher of `path` must authenticate with before `decide` is asked; nil for nobody.
    func publisherCredentials(for path: String) -> StreamCredentials?
    func decide(_ request: PublishRequest) -> PublishDecision
}

extension PublishPolicy {
    public func publisherCredentials(for path: String) -> StreamCredentials? { nil }
}
