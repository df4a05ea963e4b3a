/// How a batch of datagrams for one peer goes to the kernel with UDP segmentation offload
/// (`UDP_SEGMENT`): one send carries a run of datagrams of one size, the last of which may be
/// shorter, and the kernel cuts it there. Each send takes the kernel's UDP and IP path, its route
/// lookup and its queueing once for the run instead of once per datagram, which was most of what
/// a WebRTC viewer cost the node.
///
/// A picture's RTP packets are all the packetizer's maximum size but its last, so a paced
/// release of video mostly forms long runs; audio and padding go on their own.
public enum SegmentedRuns {
    /// The kernel's limit on segments in one send (`UDP_MAX_SEGMENTS`).
    public static let maximumSegments = 64
    /// One send's payload must fit a UDP datagram of 64 KB less the IP and UDP headers.
    public static let maximumBytes = 65_507 - 40

    /// The runs of `sizes` (in order, covering them all). A run of one is a plain datagram.
    public static func runs(_ sizes: [Int]) -> [Range<Int>] {
        var runs: [Range<Int>] = []
        var start = 0
        while start < sizes.count {
            let segment = sizes[start]
            var end = start + 1
            var bytes = segment
            while end < sizes.count, end - start < maximumSegments, bytes + sizes[end] <= maximumBytes, sizes[end] <= segment {
                bytes += sizes[end]
                end += 1
                // A shorter datagram can only end a run: the kernel cuts every segment but the last at the first's size.
                if sizes[end - 1] < segment { break }
            }
            runs.append(start..<end)
            start = end
        }
        return runs
    }
}
