import MediaCore
import Synchronization

/// Who holds each stream's one publisher slot, whatever the protocol: a publish over RTSP, RTMP
/// or SRT claims it before its media reaches the stream, and gives it back when it ends.
public final class PublisherSlots: Sendable {
    /// Who holds a path's publisher slot, and how to end that publish from outside.
    struct PublisherClaim: Sendable {
        var session: String
        var revoke: @Sendable (String) -> Void
        /// Seconds since that publisher last sent media.
        var silence: @Sendable () -> Double
    }

    private let state = Mutex<[String: PublisherClaim]>([:])

    public init() {}

    /// Claims `path` for one publisher session, whatever its protocol; false when another holds
    /// it. `revoke` ends that publish (its argument says why) when the path's provision is deleted
    /// or replaced, or a new connection of the same publisher takes over.
    package func claimPublisher(_ path: String, session: String, revoke: @escaping @Sendable (String) -> Void,
                                silence: @escaping @Sendable () -> Double = { 0 }) -> Bool {
        state.withLock { state in
            guard state[path] == nil else { return false }
            state[path] = PublisherClaim(session: session, revoke: revoke, silence: silence)
            return true
        }
    }

    /// Claims `path`, or takes it over from a publisher that has sent nothing for `takeoverSilence`
    /// seconds: an app that lost its connection reconnects before its old session times out. The
    /// caller has checked the new publisher passed the same authentication. False when the path
    /// is held by a publisher that is still sending.
    package func claimOrTakeOver(_ path: String, session: String, takeoverSilence: Double, revoke: @escaping @Sendable (String) -> Void,
                                 silence: @escaping @Sendable () -> Double) -> (claimed: Bool, tookOver: Bool) {
        if claimPublisher(path, session: session, revoke: revoke, silence: silence) { return (true, false) }
        guard let holder = state.withLock({ $0[path] }), holder.silence() >= takeoverSilence else { return (false, false) }
        revokePublisher(path, reason: "a new connection of the publisher took over")
        return (claimPublisher(path, session: session, revoke: revoke, silence: silence), true)
    }

    /// Whether a publish of `path` could claim it now: it is free, or its holder has been silent
    /// for `takeoverSilence` seconds. (For a handshake that must answer before it can claim.)
    package func canClaimPublisher(_ path: String, takeoverSilence: Double) -> Bool {
        guard let holder = state.withLock({ $0[path] }) else { return true }
        return holder.silence() >= takeoverSilence
    }

    /// The session holding `path`'s publisher slot.
    package func publisherSession(_ path: String) -> String? {
        state.withLock { $0[path]?.session }
    }

    /// Frees `path` when `session` holds it.
    package func releasePublisher(_ path: String, session: String) {
        state.withLock { state in
            if state[path]?.session == session { state.removeValue(forKey: path) }
        }
    }

    /// Ends the publish of `path`, if any: its provision was deleted or replaced, and a publisher
    /// that authenticated with the old credentials must not keep the stream.
    public func revokePublisher(_ path: String, reason: String) {
        let claim = state.withLock { $0.removeValue(forKey: path) }
        claim?.revoke(reason)
    }
}

/// When a publisher last sent media, readable from any thread: a new connection of the same
/// publisher may take its stream over once it has been silent long enough.
public final class PublisherActivity: Sendable {
    private let clock: NodeClock
    private let uptime: Atomic<UInt64>

    public init(clock: NodeClock = .system) {
        self.clock = clock
        uptime = Atomic(clock.nanoseconds)
    }

    public func touch() { uptime.store(clock.nanoseconds, ordering: .relaxed) }

    /// Seconds since the last `touch`.
    public var silence: Double { clock.seconds(since: uptime.load(ordering: .relaxed)) }
}
