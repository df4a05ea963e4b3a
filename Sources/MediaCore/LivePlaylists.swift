import Synchronization

/// Where a live rung's Low-Latency HLS playlist is, between the thread that writes its parts and
/// the HTTP requests that wait for them (blocking playlist reload, preload hints). Each rung's
/// writer publishes its playlist after every part; a request for a part or playlist that does
/// not exist yet waits here, without a thread or a task of its own, until one does or its time
/// runs out.
///
/// A published playlist is rendered once, full and as a delta update, with the rendition reports
/// of the other rungs in the same ladder folder: every player waiting on it gets the same text.
///
/// Keyed by the playlist file's absolute path: the file system's own namespace, which every
/// node in a process already shares without colliding.
public final class LivePlaylists: Sendable {
    public static let shared = LivePlaylists()

    /// One published state of a rung's playlist.
    public struct Snapshot: Sendable {
        public var playlist: HLSMediaPlaylist
        /// The text, full and as a delta update (`_HLS_skip=YES`).
        public var full: String
        public var delta: String
        /// The latest part: its segment's media sequence number and its index in that segment.
        public var position: Position
        /// Files of parts the playlist lists (or hints), by name: a request for the hinted one waits for it.
        public var partNames: Set<String>
    }

    /// A part's place: (media sequence number, part index), ordered.
    public struct Position: Sendable, Comparable, Hashable {
        public var mediaSequence: Int
        public var part: Int
        public init(mediaSequence: Int, part: Int) {
            self.mediaSequence = mediaSequence
            self.part = part
        }
        public static func < (a: Position, b: Position) -> Bool {
            (a.mediaSequence, a.part) < (b.mediaSequence, b.part)
        }
    }

    private struct Waiter {
        var path: String
        var deadline: ContinuousClock.Instant
        var ready: @Sendable (Snapshot) -> Bool
        var continuation: CheckedContinuation<Snapshot?, Never>
    }

    private struct State {
        var snapshots: [String: Snapshot] = [:]
        /// Who published each path last: a writer that goes away removes only its own entry,
        /// not that of a newer writer of the same rung (a job started again on the same folder).
        var owners: [String: ObjectIdentifier] = [:]
        var waiters: [Int: Waiter] = [:]
        var nextWaiter = 0
        /// Whether the task that ends overdue waits is running (it runs while anyone waits).
        var sweeping = false
    }

    /// How often overdue waits are ended: one task for every waiter, where a timer task each
    /// cost more than the rest of a blocked reload (hundreds of them a second). A wait so ends up
    /// to this much after its time, against limits of seconds.
    static let sweepInterval = Duration.milliseconds(100)

    private let state = Mutex(State())

    public init() {}

    /// The rung's latest playlist (nil: none published, or the rung ended).
    public func snapshot(_ path: String) -> Snapshot? { state.withLock { $0.snapshots[path] } }

    /// A rung's writer (`owner`) has a new playlist (a part or a segment more). Wakes whoever it satisfies.
    public func publish(_ playlist: HLSMediaPlaylist, path: String, owner: ObjectIdentifier? = nil) {
        let woken: [(CheckedContinuation<Snapshot?, Never>, Snapshot)] = state.withLock { state in
            let folder = Self.parent(path)
            let reports = state.snapshots.keys.filter { $0 != path && Self.parent(Self.parent($0)) == Self.parent(folder) && Self.parent($0) != folder }
                .sorted().compactMap { other -> HLSMediaPlaylist.RenditionReport? in
                    guard let position = state.snapshots[other]?.position else { return nil }
                    let relative = "../" + Self.lastTwo(other)
                    return .init(uri: relative, lastMediaSequence: position.mediaSequence, lastPart: position.part)
                }
            var playlist = playlist
            playlist.lowLatency?.renditionReports = reports
            let snapshot = Snapshot(playlist: playlist, full: playlist.render(), delta: playlist.render(skipping: true),
                                    position: Self.position(of: playlist), partNames: Self.partNames(of: playlist))
            state.snapshots[path] = snapshot
            state.owners[path] = owner
            var woken: [(CheckedContinuation<Snapshot?, Never>, Snapshot)] = []
            for (id, waiter) in state.waiters where waiter.path == path && waiter.ready(snapshot) {
                woken.append((waiter.continuation, snapshot))
                state.waiters[id] = nil
            }
            return woken
        }
        for (continuation, snapshot) in woken { continuation.resume(returning: snapshot) }
    }

    /// The rung is gone (its job ended, or its writer went away): its waiters get nothing, and
    /// no new one waits. With `owner`, only if that writer published the rung last.
    public func remove(path: String, owner: ObjectIdentifier? = nil) {
        let woken: [CheckedContinuation<Snapshot?, Never>] = state.withLock { state in
            if let owner, state.owners[path] != owner { return [] }
            state.snapshots[path] = nil
            state.owners[path] = nil
            let ids = state.waiters.filter { $0.value.path == path }.map(\.key)
            return ids.compactMap { state.waiters.removeValue(forKey: $0)?.continuation }
        }
        for continuation in woken { continuation.resume(returning: nil) }
    }

    /// The rung's playlist once `ready` holds for it, or nil after `timeout` (or when the rung is gone).
    public func wait(path: String, timeout: Duration, until ready: @escaping @Sendable (Snapshot) -> Bool) async -> Snapshot? {
        if let now = snapshot(path), ready(now) { return now }
        let deadline = ContinuousClock.now + timeout
        return await withCheckedContinuation { continuation in
            // Published between the first look and now, or gone: no need to wait.
            let (waits, answer, startsSweeping): (Bool, Snapshot?, Bool) = state.withLock { state in
                if let now = state.snapshots[path], ready(now) { return (false, now, false) }
                guard state.snapshots[path] != nil else { return (false, nil, false) }
                state.nextWaiter += 1
                state.waiters[state.nextWaiter] = Waiter(path: path, deadline: deadline, ready: ready, continuation: continuation)
                let startsSweeping = !state.sweeping
                state.sweeping = true
                return (true, nil, startsSweeping)
            }
            if !waits { continuation.resume(returning: answer) }
            if startsSweeping { sweepOverdueWaits() }
        }
    }

    /// Ends the waits whose time is up, every `sweepInterval`, until no one waits.
    private func sweepOverdueWaits() {
        Task {
            while true {
                try? await Task.sleep(for: Self.sweepInterval)
                let (overdue, goesOn): ([CheckedContinuation<Snapshot?, Never>], Bool) = state.withLock { state in
                    let now = ContinuousClock.now
                    let ids = state.waiters.compactMap { $0.value.deadline <= now ? $0.key : nil }
                    let overdue = ids.compactMap { state.waiters.removeValue(forKey: $0)?.continuation }
                    state.sweeping = !state.waiters.isEmpty
                    return (overdue, state.sweeping)
                }
                for continuation in overdue { continuation.resume(returning: nil) }
                if !goesOn { return }
            }
        }
    }

    /// Requests waiting now (they count against the node's HTTP limits, not its threads).
    public var waiting: Int { state.withLock { $0.waiters.count } }

    /// The latest part, or the last segment's last part when no part of the next one exists yet.
    static func position(of playlist: HLSMediaPlaylist) -> Position {
        let last = playlist.lastMediaSequence
        if let open = playlist.lowLatency?.openParts, !open.isEmpty {
            return Position(mediaSequence: last + 1, part: open.count - 1)
        }
        return Position(mediaSequence: last, part: max(0, (playlist.segments.last?.parts.count ?? 1) - 1))
    }

    static func partNames(of playlist: HLSMediaPlaylist) -> Set<String> {
        var names = Set(playlist.segments.flatMap { $0.parts.map(\.uri) })
        for part in playlist.lowLatency?.openParts ?? [] { names.insert(part.uri) }
        return names
    }

    private static func parent(_ path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "" }
        return String(path[..<slash])
    }

    /// `…/stream1_2/index.m3u8` → `stream1_2/index.m3u8`.
    private static func lastTwo(_ path: String) -> String {
        path.split(separator: "/").suffix(2).joined(separator: "/")
    }
}
