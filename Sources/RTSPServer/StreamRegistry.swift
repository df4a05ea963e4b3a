import Synchronization

/// Every stream the node serves, by path (`live/stream1_2`), and who publishes each.
public final class StreamRegistry: Sendable {
    private let state = Mutex<(streams: [String: LiveStream], publishers: Set<String>)>(([:], []))

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

    public func existingStream(_ path: String) -> LiveStream? {
        state.withLock { $0.streams[path] }
    }

    public func remove(_ path: String) {
        _ = state.withLock { $0.streams.removeValue(forKey: path) }
    }

    public var paths: [String] { state.withLock { $0.streams.keys.sorted() } }

    /// Claims `path` for one publisher; false when another holds it.
    public func claimPublisher(_ path: String) -> Bool {
        state.withLock { $0.publishers.insert(path).inserted }
    }

    public func releasePublisher(_ path: String) {
        _ = state.withLock { $0.publishers.remove(path) }
    }
}
