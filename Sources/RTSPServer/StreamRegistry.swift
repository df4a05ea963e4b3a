import Synchronization

/// Every stream the node serves, by path (`live/stream1_2`), and who publishes each.
public final class StreamRegistry: Sendable {
    /// Who holds a path's publisher slot, and how to end that publish from outside.
    struct PublisherClaim: Sendable {
        var session: String
        var revoke: @Sendable (String) -> Void
        /// Seconds since that publisher last sent media.
        var silence: @Sendable () -> Double
    }

    private let state = Mutex<(streams: [String: LiveStream], publishers: [String: PublisherClaim])>(([:], [:]))

    public init() {}

    /// The stream at `path`, created when missing.
    public func stream(_ path: String) -> LiveStream {
        state.withLock { state in
            if let stream = state.streams[path] { return stream }
            let stream = LiveStream(path: path)
            state.streams[path] = stream
            return stream
        }
    }

    /// The stream a relayed publish of `path` writes into: when its publisher leaves, the stream
    /// ends and is forgotten, so ended relays hold no memory.
    public func relayStream(_ path: String) -> LiveStream {
        state.withLock { state in
            if let stream = state.streams[path] { return stream }
            let stream = LiveStream(path: path) { [weak self] ended in self?.remove(ended) }
            state.streams[path] = stream
            return stream
        }
    }

    public func existingStream(_ path: String) -> LiveStream? {
        state.withLock { $0.streams[path] }
    }

    /// Forgets the stream at `path` (its GOP cache goes with the last reference).
    public func remove(_ path: String) {
        _ = state.withLock { $0.streams.removeValue(forKey: path) }
    }

    /// Forgets `stream` if it is still the one at its path (a newer one may have taken its place).
    public func remove(_ stream: LiveStream) {
        state.withLock { state in
            if state.streams[stream.path] === stream { state.streams.removeValue(forKey: stream.path) }
        }
    }

    public var paths: [String] { state.withLock { $0.streams.keys.sorted() } }
    public var count: Int { state.withLock { $0.streams.count } }

    /// Claims `path` for one publisher session, whatever its protocol; false when another holds
    /// it. `revoke` ends that publish (its argument says why) when the path's provision is deleted
    /// or replaced, or a new connection of the same publisher takes over.
    package func claimPublisher(_ path: String, session: String, revoke: @escaping @Sendable (String) -> Void,
                                silence: @escaping @Sendable () -> Double = { 0 }) -> Bool {
        state.withLock { state in
            guard state.publishers[path] == nil else { return false }
            state.publishers[path] = PublisherClaim(session: session, revoke: revoke, silence: silence)
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
        guard let holder = state.withLock({ $0.publishers[path] }), holder.silence() >= takeoverSilence else { return (false, false) }
        revokePublisher(path, reason: "a new connection of the publisher took over")
        return (claimPublisher(path, session: session, revoke: revoke, silence: silence), true)
    }

    /// Whether a publish of `path` could claim it now: it is free, or its holder has been silent
    /// for `takeoverSilence` seconds. (For a handshake that must answer before it can claim.)
    package func canClaimPublisher(_ path: String, takeoverSilence: Double) -> Bool {
        guard let holder = state.withLock({ $0.publishers[path] }) else { return true }
        return holder.silence() >= takeoverSilence
    }

    /// The session holding `path`'s publisher slot.
    package func publisherSession(_ path: String) -> String? {
        state.withLock { $0.publishers[path]?.session }
    }

    /// Frees `path` when `session` holds it.
    package func releasePublisher(_ path: String, session: String) {
        state.withLock { state in
            if state.publishers[path]?.session == session { state.publishers.removeValue(forKey: path) }
        }
    }

    /// Ends the publish of `path`, if any: its provision was deleted or replaced, and a publisher
    /// that authenticated with the old credentials must not keep the stream.
    public func revokePublisher(_ path: String, reason: String) {
        let claim = state.withLock { $0.publishers.removeValue(forKey: path) }
        claim?.revoke(reason)
    }
}

/// When a publisher last sent media, readable from any thread: a new connection of the same
/// publisher may take its stream over once it has been silent long enough.
public final class PublisherActivity: Sendable {
    private let uptime = Atomic<UInt64>(DispatchTime.now().uptimeNanoseconds)

    public init() {}

    public func touch() { uptime.store(DispatchTime.now().uptimeNanoseconds, ordering: .relaxed) }

    /// Seconds since the last `touch`.
    public var silence: Double { Double(DispatchTime.now().uptimeNanoseconds &- uptime.load(ordering: .relaxed)) / 1e9 }
}

import Dispatch
