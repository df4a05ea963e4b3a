import DequeModule
import Foundation

/// Bytes handed from a network thread to a demuxer's thread: `push` never blocks (past the
/// capacity it drops whole pushes and counts them), `read` blocks until bytes come or the feed
/// is closed. What a live publisher's stream (an SRT connection's MPEG-TS) goes through.
public final class ByteFeed: @unchecked Sendable {
    // @unchecked: every field is touched only under `condition`.
    private let condition = NSCondition()
    private var chunks = Deque<[UInt8]>()
    /// Bytes of the first chunk already read.
    private var offset = 0
    private var bytes = 0
    private var closed = false
    private var dropped = 0
    public let capacity: Int

    public init(capacity: Int = 8 * 1024 * 1024) {
        self.capacity = capacity
    }

    /// Adds bytes; false (and they are dropped) when the reader is `capacity` behind or the feed is closed.
    @discardableResult
    public func push(_ data: [UInt8]) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard !closed, !data.isEmpty else { return false }
        guard bytes + data.count <= capacity else {
            dropped += data.count
            return false
        }
        chunks.append(data)
        bytes += data.count
        condition.signal()
        return true
    }

    /// No more bytes: a reader gets what is left, then the end.
    public func close() {
        condition.lock()
        closed = true
        condition.broadcast()
        condition.unlock()
    }

    /// Copies up to `count` bytes into `destination`, waiting for some; 0 at the end of the feed.
    public func read(into destination: UnsafeMutablePointer<UInt8>, count: Int) -> Int {
        condition.lock()
        defer { condition.unlock() }
        while bytes == 0, !closed { condition.wait() }
        var copied = 0
        while copied < count, let chunk = chunks.first {
            let take = min(count - copied, chunk.count - offset)
            chunk.withUnsafeBufferPointer { source in
                (destination + copied).update(from: source.baseAddress! + offset, count: take)
            }
            copied += take
            offset += take
            if offset == chunk.count {
                chunks.removeFirst()
                offset = 0
            }
        }
        bytes -= copied
        return copied
    }

    /// Bytes dropped because the reader fell `capacity` behind.
    public var droppedBytes: Int {
        condition.lock()
        defer { condition.unlock() }
        return dropped
    }
}
