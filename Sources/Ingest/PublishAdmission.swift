import MediaCore

/// The checks every publish protocol makes the same way, whatever its wire: the provision's
/// credentials, and the picture a publisher announces in-band. Each protocol then answers a
/// refusal in its own terms (RTSP's status, RTMP's `onStatus` code, SRT's reject reason).
public enum PublishAdmission {
    /// The largest picture a publisher may send (4096×2304), unless the node is told otherwise.
    public static let defaultMaximumPixels = 4096 * 2304

    /// Whether a publisher presenting `user` and `password` (RTMP's query or stream key, SRT's
    /// stream ID) may publish `path`: true when the policy asks for no credentials.
    public static func credentialsAccepted(for path: String, user: String?, password: String?, policy: any PublishPolicy) -> Bool {
        guard let required = policy.publisherCredentials(for: path) else { return true }
        guard let user, let password else { return false }
        // Both compared, whatever the first gives: the time taken says nothing about either.
        let userMatches = constantTimeEqual(user, required.username)
        let passwordMatches = constantTimeEqual(password, required.password)
        return userMatches && passwordMatches
    }

    /// Why a picture format read from the stream itself (an SPS in-band) cannot be published:
    /// larger than `maximumPixels`, or refused by the sink (a ladder that cannot take it); nil when it can.
    public static func refusal(of format: VideoFormat, maximumPixels: Int, sink: (any MediaSink)?) -> String? {
        if format.width * format.height > maximumPixels {
            return "the stream's SPS announces a \(format.width)x\(format.height) picture, larger than the node's limit of \(maximumPixels) pixels"
        }
        return sink?.refusal(of: format)
    }
}

/// The admission sequence every publish protocol runs, written once: the provision's
/// credentials, the node's policy, then the stream's one publisher slot. Each protocol parses its
/// own wire, gives this what the publisher asked for, and answers the verdict in its own terms
/// (RTSP's status, RTMP's `onStatus` code, SRT's reject reason).
public struct PublishGate: Sendable {
    public let policy: any PublishPolicy
    public let slots: PublisherSlots
    /// Seconds a publisher's session must have been silent before a new connection that passes
    /// the same authentication may take its stream over.
    public let takeoverSilence: Double

    public init(policy: any PublishPolicy, slots: PublisherSlots, takeoverSilence: Double) {
        self.policy = policy
        self.slots = slots
        self.takeoverSilence = takeoverSilence
    }

    /// Where a publisher's credentials stand when it asks.
    public enum Credentials: Sendable {
        /// The protocol checked them itself, against `policy.publisherCredentials(for:)`
        /// (RTSP's Digest or Basic, which needs the request's method and URI), and they hold.
        case proven
        /// What the publisher presented (RTMP's query or stream key, SRT's stream ID).
        case presented(user: String?, password: String?)
    }

    /// Who would hold the slot, how to end that publish from outside (the provision went away,
    /// or the same publisher's new connection takes over), and how long it has sent nothing.
    public struct Claim: Sendable {
        public var session: String
        public var revoke: @Sendable (String) -> Void
        public var silence: @Sendable () -> Double

        public init(session: String, revoke: @escaping @Sendable (String) -> Void, silence: @escaping @Sendable () -> Double) {
            self.session = session
            self.revoke = revoke
            self.silence = silence
        }
    }

    /// Why a publish is refused, for the protocol to say in its own terms.
    public enum Refusal: Sendable, Equatable {
        /// Credentials missing or wrong.
        case credentials
        /// The node's policy: a status in HTTP's sense (403, 404, 415, 503) and its reason.
        case policy(status: Int, reason: String)
        /// Another publisher holds the stream and is still sending.
        case alreadyPublished
    }

    public enum Verdict {
        /// The publish goes on into `sink`; `tookOver` when it replaced the same publisher's silent session.
        case admitted(any MediaSink, tookOver: Bool)
        case refused(Refusal)
    }

    /// Runs the sequence for `request`. With a `claim`, the slot is claimed (or taken over) now;
    /// without, only whether it could be is checked, for a handshake that must answer before its
    /// connection exists (SRT): that caller claims with `claim(_:path:)` once it does.
    public func admit(_ request: PublishRequest, credentials: Credentials, claim: Claim?) -> Verdict {
        if case let .presented(user, password) = credentials,
           !PublishAdmission.credentialsAccepted(for: request.path, user: user, password: password, policy: policy) {
            return .refused(.credentials)
        }
        let sink: any MediaSink
        switch policy.decide(request) {
        case let .refuse(status, reason):
            return .refused(.policy(status: status, reason: reason))
        case let .accept(accepted):
            sink = accepted
        }
        guard let claim else {
            return slots.canClaimPublisher(request.path, takeoverSilence: takeoverSilence) ? .admitted(sink, tookOver: false) : .refused(.alreadyPublished)
        }
        switch self.claim(claim, path: request.path) {
        case let .some(tookOver): return .admitted(sink, tookOver: tookOver)
        case .none: return .refused(.alreadyPublished)
        }
    }

    /// Claims `path`'s slot, or takes it over from a publisher silent for `takeoverSilence`:
    /// whether it took over, or nil when another publisher still holds it.
    public func claim(_ claim: Claim, path: String) -> Bool? {
        let result = slots.claimOrTakeOver(path, session: claim.session, takeoverSilence: takeoverSilence, revoke: claim.revoke, silence: claim.silence)
        return result.claimed ? result.tookOver : nil
    }
}
