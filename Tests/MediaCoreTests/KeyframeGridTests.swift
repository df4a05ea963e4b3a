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

@Suite struct HLSPlaylistContinuationTests {
    @Test func carriesOnAfterWhatAPlaylistListed() {
        let playlist = HLSMediaPlaylist(kind: .live(mediaSequence: 40, discontinuitySequence: 2), mapURI: "init_2.mp4", segments: [
            .init(uri: "segment_00040.m4s", duration: 2),
            .init(uri: "segment_00041.m4s", duration: 2, discontinuity: true, mapURI: "init_3.mp4"),
            .init(uri: "segment_00043.m4s", duration: 2, discontinuity: true, mapURI: "init_3.mp4"),
        ], ended: true)
        let next = HLSPlaylistContinuation(playlistText: playlist.render())
        #expect(next.mediaSequence == 43)
        #expect(next.discontinuitySequence == 4)
        #expect(next.segmentIndex == 44)
        #expect(next.initIndex == 4)
        #expect(next.staleFiles == ["segment_00040.m4s", "segment_00041.m4s", "segment_00043.m4s"])
    }

    @Test(arguments: ["", "garbage\n\u{0}\u{1}", "#EXT-X-MEDIA-SEQUENCE:-5\nsegment_-1.m4s\n", "#EXT-X-MEDIA-SEQUENCE:99999999999999999999999\n",
                      "#EXT-X-MAP:URI=\"init_99999999999999999999.mp4\"\n../../etc/passwd\nsegment_1x.m4s\n"])
    func damagedPlaylistsGiveSaneNumbersAndNameNoOtherFiles(_ text: String) {
        let next = HLSPlaylistContinuation(playlistText: text)
        #expect(next.mediaSequence >= 0 && next.mediaSequence < 1 << 41)
        #expect(next.segmentIndex >= 0 && next.initIndex >= 1)
        #expect(next.staleFiles.allSatisfy { $0.hasPrefix("segment_") && !$0.contains("/") })
    }
}
