import Ingest
import Synchronization

/// Every stream the node serves, by path (`live/stream1_2`), and (in `publishers`) who publishes each.
public final class StreamRegistry: Sendable {
    private let state = Mutex<[String: LiveStream]>([:])
    /// Who publishes each path, whatever the protocol.
    public let publishers = PublisherSlots()

    public init() {}

    /// The stream at `path`, created when missing.
    public func stream(_ path: String) -> LiveStream {
        state.withLock { state in
            if let stream = state[path] { return stream }
            let stream = LiveStream(path: path)
            state[path] = stream
            return stream
        }
    }

    /// The stream a relayed publish of `path` writes into: when its publisher leaves, the stream
    /// ends and is forgotten, so ended relays hold no memory.
    public func relayStream(_ path: String) -> LiveStream {
        state.withLock { state in
            if let stream = state[path] { return stream }
            let stream = LiveStream(path: path) { [weak self] ended in self?.remove(ended) }
            state[path] = stream
            return stream
        }
    }

    public func existingStream(_ path: String) -> LiveStream? {
        state.withLock { $0[path] }
    }

    /// Forgets the stream at `path` (its GOP cache goes with the last reference).
    public func remove(_ path: String) {
        _ = state.withLock { $0.removeValue(forKey: path) }
    }

    /// Forgets `stream` if it is still the one at its path (a newer one may have taken its place).
    public func remove(_ stream: LiveStream) {
        state.withLock { state in
            if state[stream.path] === stream { state.removeValue(forKey: stream.path) }
        }
    }

    public var paths: [String] { state.withLock { $0.keys.sorted() } }
    public var count: Int { state.withLock { $0.count } }
}
