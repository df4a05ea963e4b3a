/// Decoding timestamps for a stream that carries only presentation times (RTP), the way
/// libavformat derives them: keep the largest `depth + 1` presentation times seen, and take the
/// smallest of those. With a reorder depth of at least the stream's, the result never decreases
/// and never passes the picture's own presentation time.
public struct DecodeTimestamps: Sendable {
    public let depth: Int
    private var window: [Int64]

    /// - Parameters:
    ///   - depth: the reorder depth (0 without B-frames).
    ///   - firstPTS, step: seed the window as if earlier pictures had come every `step`, so the first
    ///     pictures get timestamps before their own instead of none.
    public init(depth: Int, firstPTS: Int64, step: Int64) {
        let depth = max(0, depth)
        self.depth = depth
        window = (0...depth).map { firstPTS - Int64(depth - $0 + 1) * step }
    }

    public mutating func next(pts: Int64) -> Int64 {
        // The smallest leaves; the new one takes its sorted place.
        window[0] = pts
        var index = 0
        while index < depth, window[index] > window[index + 1] {
            window.swapAt(index, index + 1)
            index += 1
        }
        return min(window[0], pts)
    }
}
