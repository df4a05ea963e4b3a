import MediaCore
import Testing

/// RFC 8216 (6.2.2): a segment that left a live playlist stays on disk for its own duration plus
/// the playlist's, counted in the segments that left after it.
@Suite struct HLSSegmentRetentionTests {
    typealias Segment = HLSMediaPlaylist.Segment

    /// Slides a window of `window` two-second segments over `count` segments; returns, for each
    /// segment, how many segments left the playlist after it before it was deleted.
    func slide(count: Int, window: Int, duration: Double = 2, map: (Int) -> String? = { _ in nil }) -> [String: Int] {
        var retention = HLSSegmentRetention()
        var listed: [Segment] = []
        var leftAt: [String: Int] = [:], deletedAfter: [String: Int] = [:]
        var left = 0
        for index in 0..<count {
            listed.append(Segment(uri: "segment_\(index).m4s", duration: duration, mapURI: map(index)))
            var removed: [Segment] = []
            while listed.count > window {
                removed.append(listed.removeFirst())
                leftAt[removed.last!.uri] = left
                left += 1
            }
            for name in retention.retire(removed, listed: listed, currentMap: map(index) ?? "init_0.mp4") {
                deletedAfter[name] = leftAt[name].map { left - 1 - $0 } ?? -1
            }
        }
        return deletedAfter
    }

    @Test func aSegmentOutlivesItsPlaylistByThePlaylistAndItsOwnDuration() {
        // Six 2-s segments listed (12 s): a segment that left goes once 14 s of segments left after it.
        let deleted = slide(count: 40, window: 6)
        #expect(deleted["segment_0.m4s"] == 7)
        #expect(deleted["segment_20.m4s"] == 7)
        // Still on disk: the last 7 that left, and the 6 listed.
        #expect(deleted["segment_27.m4s"] == nil && deleted["segment_26.m4s"] == 7)
        #expect(deleted.count == 40 - 6 - 7)
    }

    @Test func anInitSegmentGoesWithTheLastKeptSegmentThatNeedsIt() {
        // The source changed size at segment 10: init_1 from then on.
        let deleted = slide(count: 40, window: 6, map: { $0 < 10 ? "init_0.mp4" : "init_1.mp4" })
        #expect(deleted["init_0.mp4"] != nil && deleted["segment_9.m4s"] != nil)
        #expect(deleted["init_1.mp4"] == nil)
        // Not before the last segment using it is gone.
        let stillNeeded = slide(count: 20, window: 6, map: { $0 < 10 ? "init_0.mp4" : "init_1.mp4" })
        #expect(stillNeeded["init_0.mp4"] == nil && stillNeeded["segment_9.m4s"] == nil)
    }

    @Test func shorterSegmentsAreKeptByTimeNotCount() {
        // Half-second segments in a window of 6 (3 s): kept until 3.5 s of segments left after: 7.
        #expect(slide(count: 30, window: 6, duration: 0.5)["segment_0.m4s"] == 7)
        // A window of 2 with 2-s segments (4 s listed): kept until 6 s left after: 3.
        #expect(slide(count: 30, window: 2)["segment_0.m4s"] == 3)
    }
}
