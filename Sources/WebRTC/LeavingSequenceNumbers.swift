/// The RTP sequence numbers a viewer's media goes out with, given as each packet leaves the
/// pacer rather than as it is queued, per track (as libwebrtc's pacer numbers packets at send).
///
/// Why: media the pacer drops never left, and must not leave a gap. Video dropped when a viewer
/// moved down (276 KB of the top's catch-up GOP, run BF) left 216 numbers missing; Chromium
/// counted them lost, asked for them in a NACK the node could not answer, and held the new
/// rung's complete pictures undecoded for 3 s. A receiver's loss report (the REMB-only viewer's
/// adaptation reads it) would count them too.
public struct LeavingSequenceNumbers: Sendable {
    private var video: UInt16?
    private var audio: UInt16?

    public init() {}

    /// The number `item` leaves with: one after the last of its track; the first packet of a
    /// track keeps the number its player gave it. Nil for what keeps its own (resends, padding).
    public mutating func next(for item: MediaPacer.Item) -> UInt16? {
        guard item.numberedAsItLeaves, item.header.count >= 4 else { return nil }
        let last = item.isVideo ? video : audio
        let next = last.map { $0 &+ 1 } ?? (UInt16(item.header[2]) << 8 | UInt16(item.header[3]))
        if item.isVideo { video = next } else { audio = next }
        return next
    }
}
