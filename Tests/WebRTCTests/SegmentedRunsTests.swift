import Testing
import WebRTC

struct SegmentedRunsTests {
    @Test func aRunIsOneSizeAndMayEndShorter() {
        // A keyframe's five packets (the last shorter), audio, then a picture of two.
        let sizes = [1436, 1436, 1436, 1436, 700, 180, 1436, 1436]
        #expect(SegmentedRuns.runs(sizes) == [0..<5, 5..<6, 6..<8])
        // A larger datagram after a run starts the next; so does one after a shorter end.
        #expect(SegmentedRuns.runs([500, 500, 1400, 300, 300]) == [0..<2, 2..<4, 4..<5])
        #expect(SegmentedRuns.runs([]) == [])
        #expect(SegmentedRuns.runs([42]) == [0..<1])
    }

    @Test func aRunStaysWithinTheKernelsLimits() {
        let many = [Int](repeating: 1000, count: 150)
        let runs = SegmentedRuns.runs(many)
        #expect(runs.allSatisfy { $0.count <= SegmentedRuns.maximumSegments && $0.count * 1000 <= SegmentedRuns.maximumBytes })
        #expect(runs.map(\.count).reduce(0, +) == 150 && runs.first == 0..<64)
        let large = [Int](repeating: 1436, count: 64)
        #expect(SegmentedRuns.runs(large).allSatisfy { $0.count * 1436 <= SegmentedRuns.maximumBytes })
    }
}
