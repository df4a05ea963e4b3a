import Foundation
import Store
import Synchronization

/// Fans job events out to Server-Sent-Event listeners and into the job history.
///
/// Each listener has a bounded buffer: a client that stops reading loses old events, never
/// holds memory or slows the job that produced them.
public final class EventHub: Sendable {
    public struct Event: Sendable, Codable, Equatable {
        /// Increasing across the node: the SSE `id`.
        public var id: Int
        public var streamGuid: String
        public var time: Double
        public var kind: String
        public var detail: String
    }

    public static let bufferPerListener = 256
    /// Open SSE streams at once, in all and per stream; more get 503 (each holds a task and a buffer).
    public static let maximumListeners = 256
    public static let maximumListenersPerStream = 32
    /// The kind of the heartbeat a listener gets when nothing happened for a while.
    public static let keepaliveKind = "keepalive"

    private struct State {
        var nextID = 1
        var nextListener = 0
        var listeners: [Int: (streamGuid: String, continuation: AsyncStream<Event>.Continuation)] = [:]
    }

    private let state = Mutex(State())
    private let store: (any NodeStore)?

    public init(store: (any NodeStore)?) {
        self.store = store
    }

    /// Called by jobs (any thread).
    public func publish(streamGuid: String, time: Double, kind: String, detail: String) {
        let (event, continuations) = state.withLock { state in
            let event = Event(id: state.nextID, streamGuid: streamGuid, time: time, kind: kind, detail: detail)
            state.nextID += 1
            return (event, state.listeners.values.filter { $0.streamGuid == streamGuid }.map(\.continuation))
        }
        // Hint updates come with every segment; the history keeps what changes a job's life.
        if kind != "hintsUpdated" {
            store?.record(JobEvent(streamGuid: streamGuid, time: time, kind: kind, detail: detail))
        }
        continuations.forEach { $0.yield(event) }
    }

    /// A stream's events from now on, until the listener stops iterating; with `keepalive`, a
    /// heartbeat event (`keepaliveKind`) after each quiet interval.
    /// nil when the node or this stream already has as many listeners as it allows.
    public func listen(streamGuid: String, keepalive: Duration? = nil) -> AsyncStream<Event>? {
        let (stream, continuation) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .bufferingNewest(Self.bufferPerListener))
        let key: Int? = state.withLock { state in
            guard state.listeners.count < Self.maximumListeners,
                  state.listeners.values.lazy.filter({ $0.streamGuid == streamGuid }).count < Self.maximumListenersPerStream else { return nil }
            let key = state.nextListener
            state.nextListener += 1
            state.listeners[key] = (streamGuid, continuation)
            return key
        }
        guard let key else { return nil }
        let heartbeat = keepalive.map { interval in
            Task {
                while !Task.isCancelled {
                    try? await Task.sleep(for: interval)
                    continuation.yield(Event(id: 0, streamGuid: streamGuid, time: Date().timeIntervalSince1970, kind: Self.keepaliveKind, detail: ""))
                }
            }
        }
        continuation.onTermination = { [weak self] _ in
            heartbeat?.cancel()
            _ = self?.state.withLock { $0.listeners.removeValue(forKey: key) }
        }
        return stream
    }

    public var listenerCount: Int { state.withLock { $0.listeners.count } }

    /// Ends every listener's stream (shutdown).
    public func finishAll() {
        let continuations = state.withLock { state in
            defer { state.listeners.removeAll() }
            return state.listeners.values.map(\.continuation)
        }
        continuations.forEach { $0.finish() }
    }
}
