import MediaCore
import Testing

@Suite struct KeyframeGridTests {
    private static let rtp = Rational(1, 90000)

    /// Frame times in ticks of `timeBase`; returns the ticks of the frames the grid made keyframes.
    private func keyframeTicks(_ grid: inout KeyframeGrid, ticks: [Int64], timeBase: Rational = rtp, sourceKeys: Set<Int> = []) -> [Int64] {
        ticks.enumerated().compactMap { index, value in
            grid.decide(time: MediaTime(ticks: value, timeBase: timeBase), isSourceKeyframe: sourceKeys.contains(index)).isKeyframe ? value : nil
        }
    }

    @Test func intervalGridAt30fps() {
        var grid = KeyframeGrid(mode: .interval(2))
        let ticks = (0..<300).map { Int64($0) }
        #expect(keyframeTicks(&grid, ticks: ticks, timeBase: Rational(1, 30)) == [0, 60, 120, 180, 240])
    }

    @Test func intervalGridAtNTSCRateAndNonZeroStart() {
        var grid = KeyframeGrid(mode: .interval(2))
        let ticks = (0..<300).map { 900_000 + Int64($0) * 3003 }
        let keys = keyframeTicks(&grid, ticks: ticks)
        // Every 2 s of source time after the first frame: frames 0, 60 (2.002 s), 120, ...
        #expect(keys.count == 5)
        #expect(keys[1] - keys[0] == 60 * 3003)
    }

    @Test func intervalGridToleratesMillisecondRounding() {
        // FLV stores 33, 67, 100 ms...: frame 60 lands on 1999 or 2000 ms depending on the muxer.
        var grid = KeyframeGrid(mode: .interval(2))
        let ticks = (0..<130).map { Int64($0) * 1000 / 30 }
        let keys = keyframeTicks(&grid, ticks: ticks, timeBase: Rational(1, 1000))
        #expect(keys.count == 3)
        #expect(keys[1] == ticks[60])
    }

    @Test func intervalGridReturnsToItsPointsAfterAGap() {
        // After a gap the late frame is an IDR, and the grid goes on at its own points (8, 10),
        // not 2 s after the late frame, so renditions started at other times still line up.
        var grid = KeyframeGrid(mode: .interval(2))
        let ms = Rational(1, 1000)
        #expect(keyframeTicks(&grid, ticks: [0, 1000, 7500, 8000, 9900, 10000], timeBase: ms) == [0, 7500, 8000, 10000])
    }

    @Test func intervalGridDoesNotDriftOverADayOfNTSCFrames() {
        // 29.97 fps for 24 h: every IDR is still the first frame at or after its 2 s point, to the tick.
        var grid = KeyframeGrid(mode: .interval(2))
        let frames = 24 * 3600 * 30_000 / 1001
        var keys: [Int] = []
        for index in 0..<frames where grid.decide(time: MediaTime(ticks: Int64(index) * 3003, timeBase: Self.rtp), isSourceKeyframe: false).isKeyframe {
            keys.append(index)
        }
        // The first frame no more than the 1.5 ms tolerance (135 ticks) before each point.
        let expected = (0..<keys.count).map { point in max(0, point * 180_000 - 135 + 3002) / 3003 }
        let mismatches = zip(keys, expected).filter { $0 != $1 }
        #expect(mismatches.isEmpty, "first mismatches: \(mismatches.prefix(3))")
        #expect(keys.count == 43_200)
    }

    @Test func gridAcceptsTimesInAnotherTimeBase() {
        // A source whose packets change time base (a re-publish) is still measured from the first frame's base.
        var grid = KeyframeGrid(mode: .interval(2))
        #expect(grid.decide(time: MediaTime(ticks: 0, timeBase: Self.rtp), isSourceKeyframe: false).isKeyframe)
        #expect(!grid.decide(time: MediaTime(ticks: 1990, timeBase: Rational(1, 1000)), isSourceKeyframe: false).isKeyframe)
        #expect(grid.decide(time: MediaTime(ticks: 2, timeBase: Rational(1, 1)), isSourceKeyframe: false).isKeyframe)
    }

    @Test func followSourceKeepsSourceKeyframesAndGroupsShortGOPsIntoSegments() {
        var grid = KeyframeGrid(mode: .followSource(minimumSegment: 2))
        // Source GOP of 1 s: IDRs every 30 frames, segments every other IDR.
        var segmentStarts: [Int64] = []
        var keys: [Int64] = []
        for index in 0..<120 {
            let decision = grid.decide(time: MediaTime(ticks: Int64(index), timeBase: Rational(1, 30)), isSourceKeyframe: index % 30 == 0)
            if decision.isKeyframe { keys.append(Int64(index)) }
            if decision.startsSegment { segmentStarts.append(Int64(index)) }
        }
        #expect(keys == [0, 30, 60, 90])
        #expect(segmentStarts == [0, 60])
    }

    @Test func firstFrameIsAlwaysAKeyframe() {
        var grid = KeyframeGrid(mode: .followSource(minimumSegment: 2))
        #expect(grid.decide(time: MediaTime(ticks: 450_000, timeBase: Self.rtp), isSourceKeyframe: false) == .init(isKeyframe: true, startsSegment: true))
        #expect(grid.decide(time: MediaTime(ticks: 459_000, timeBase: Self.rtp), isSourceKeyframe: false) == .none)
    }
}

@Suite struct MediaTimeTests {
    @Test func rescalesLikeFFmpegRoundingHalfAwayFromZero() {
        let ms = Rational(1, 1000), rtp = Rational(1, 90000)
        #expect(rtp.rescale(3003, to: ms) == 33)
        #expect(rtp.rescale(45, to: ms) == 1)      // 0.5 ms rounds up
        #expect(rtp.rescale(-45, to: ms) == -1)    // and down below zero
        #expect(ms.rescale(33, to: rtp) == 2970)
        #expect(Rational(1001, 30000).rescale(30, to: rtp) == 90090)
    }

    @Test func extremeValuesSaturateInsteadOfTrapping() {
        let nanoseconds = Rational(1, 1_000_000_000)
        #expect(Rational(1, 1).rescale(.max, to: nanoseconds) == .max)
        #expect(Rational(1, 1).rescale(.min, to: nanoseconds) == .min + 1)
        #expect(Rational(0, 1).rescale(5, to: nanoseconds) == 0)
        #expect(Rational(1, 90000).rescale(.max, to: Rational(1, 1)) == Int64.max / 90000 + 1)
        #expect(MediaTime(seconds: .infinity, timeBase: Rational(1, 90000)).ticks == 0)
        #expect(MediaTime(seconds: 1e300, timeBase: Rational(1, 90000)).ticks == 1 << 62)
    }

    @Test func comparesInstantsAcrossTimeBases() {
        let a = MediaTime(ticks: 3003, timeBase: Rational(1, 90000))
        let b = MediaTime(ticks: 1, timeBase: Rational(1001, 30000))
        #expect(a == b)
        #expect(Set([a, b]).count == 1)
        #expect(a < MediaTime(ticks: 34, timeBase: Rational(1, 1000)))
        #expect(MediaTime(ticks: -1, timeBase: Rational(1, 1)) < .zero(Rational(1, 90000)))
        // A damaged time base is the instant 0 everywhere, so ordering and hashing stay consistent.
        let damaged = MediaTime(ticks: -90000, timeBase: Rational(1, -90000))
        #expect(damaged == .zero(Rational(1, 90000)))
        #expect(damaged.hashValue == MediaTime.zero(Rational(1, 1000)).hashValue)
        #expect(damaged < MediaTime(ticks: 1, timeBase: Rational(1, 1)))
        #expect((a + b).ticks == 6006)
        #expect((a - b).ticks == 0)
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
        // Segments kept after they left the window are not listed, but go too; newer or foreign names stay.
        let folder = ["segment_00031.m4s", "part_00039_2.m4s", "init.mp4", "init_3.mp4", "segment_00044.m4s", "init_4.mp4", "index.m3u8", "notes.txt"]
        #expect(next.supersededFiles(among: folder) == ["init.mp4", "init_3.mp4", "part_00039_2.m4s", "segment_00031.m4s",
                                                        "segment_00040.m4s", "segment_00041.m4s", "segment_00043.m4s"])
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
