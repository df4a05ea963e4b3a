import MediaCore
import Testing

@Suite struct KeyframeGridTests {
    private func keyframeTimes(_ grid: inout KeyframeGrid, times: [Double], sourceKeys: Set<Int> = []) -> [Double] {
        times.enumerated().compactMap { index, time in
            grid.decide(time: time, isSourceKeyframe: sourceKeys.contains(index)).isKeyframe ? time : nil
        }
    }

    @Test func intervalGridAt30fps() {
        var grid = KeyframeGrid(mode: .interval(2))
        let times = (0..<300).map { Double($0) / 30 }
        #expect(keyframeTimes(&grid, times: times).map { ($0 * 1000).rounded() } == [0, 2000, 4000, 6000, 8000])
    }

    @Test func intervalGridAtNTSCRateAndNonZeroStart() {
        var grid = KeyframeGrid(mode: .interval(2))
        let times = (0..<300).map { 10 + Double($0) * 1001 / 30000 }
        let keys = keyframeTimes(&grid, times: times)
        // Every 2 s of source time after the first frame: frames 0, 60 (2.002 s), 120, ...
        #expect(keys.count == 5)
        #expect(abs(keys[1] - keys[0] - 2.002) < 1e-9)
    }

    @Test func intervalGridToleratesMillisecondRounding() {
        // FLV stores 33, 67, 100 ms...: frame 60 lands on 1999 or 2000 ms depending on the muxer.
        var grid = KeyframeGrid(mode: .interval(2))
        let times = (0..<130).map { (Double($0) * 1000 / 30).rounded(.down) / 1000 }
        let keys = keyframeTimes(&grid, times: times)
        #expect(keys.count == 3)
        #expect(keys[1] == times[60])
    }

    @Test func intervalGridReturnsToItsPointsAfterAGap() {
        // After a gap the late frame is an IDR, and the grid goes on at its own points (8, 10),
        // not 2 s after the late frame, so renditions started at other times still line up.
        var grid = KeyframeGrid(mode: .interval(2))
        #expect(keyframeTimes(&grid, times: [0, 1, 7.5, 8, 9.9, 10]) == [0, 7.5, 8, 10])
    }

    @Test func followSourceKeepsSourceKeyframesAndGroupsShortGOPsIntoSegments() {
        var grid = KeyframeGrid(mode: .followSource(minimumSegment: 2))
        let times = (0..<120).map { Double($0) / 30 }
        // Source GOP of 1 s: IDRs every 30 frames, segments every other IDR.
        var segmentStarts: [Double] = []
        var keys: [Double] = []
        for (index, time) in times.enumerated() {
            let decision = grid.decide(time: time, isSourceKeyframe: index % 30 == 0)
            if decision.isKeyframe { keys.append(time) }
            if decision.startsSegment { segmentStarts.append(time) }
        }
        #expect(keys == [0, 1, 2, 3])
        #expect(segmentStarts == [0, 2])
    }

    @Test func firstFrameIsAlwaysAKeyframe() {
        var grid = KeyframeGrid(mode: .followSource(minimumSegment: 2))
        #expect(grid.decide(time: 5, isSourceKeyframe: false) == .init(isKeyframe: true, startsSegment: true))
        #expect(grid.decide(time: 5.1, isSourceKeyframe: false) == .none)
    }
}
