import MediaCore
import Testing

/// Low-Latency HLS playlists, delivery directives and the board blocked reloads wait on, without
/// a network or a clock.
@Suite struct LowLatencyPlaylistTests {
    static let partTarget = 10.0 / 30

    /// `count` complete segments of six parts each, then `open` parts of the next.
    static func playlist(segments count: Int, firstSequence: Int = 0, open: Int) -> HLSMediaPlaylist {
        func parts(_ segment: Int, _ number: Int) -> [HLSMediaPlaylist.Part] {
            (0..<number).map { .init(uri: HLSLayout.partialSegment(segment, part: $0), duration: partTarget, independent: $0 == 0) }
        }
        let segments = (0..<count).map { index in
            HLSMediaPlaylist.Segment(uri: HLSLayout.mediaSegment(firstSequence + index), duration: 6 * partTarget,
                                     parts: parts(firstSequence + index, 6))
        }
        let next = firstSequence + count
        return HLSMediaPlaylist(kind: .live(mediaSequence: firstSequence, discontinuitySequence: 0), mapURI: "init.mp4", segments: segments,
                                ended: false, minimumTargetDuration: 2,
                                lowLatency: .init(partTarget: partTarget, openParts: parts(next, open),
                                                  preloadHint: HLSLayout.partialSegment(next, part: open)))
    }

    @Test func thePlaylistCarriesItsPartsHintAndServerControl() {
        let text = Self.playlist(segments: 10, firstSequence: 40, open: 2).render()
        let lines = text.split(separator: "\n").map(String.init)
        #expect(lines.contains("#EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,CAN-SKIP-UNTIL=12,PART-HOLD-BACK=1"))
        #expect(lines.contains("#EXT-X-PART-INF:PART-TARGET=0.33333"))
        #expect(lines.contains("#EXT-X-PART:DURATION=0.33333,URI=\"part_00050_0.m4s\",INDEPENDENT=YES"))
        #expect(lines.contains("#EXT-X-PART:DURATION=0.33333,URI=\"part_00050_1.m4s\""))
        #expect(lines.last == "#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"part_00050_2.m4s\"")
        // Parts only for the segments ending within three target durations of the end; older ones whole.
        #expect(lines.contains("#EXT-X-PART:DURATION=0.33333,URI=\"part_00047_0.m4s\",INDEPENDENT=YES"))
        #expect(!text.contains("part_00046_"))
        #expect(text.components(separatedBy: "#EXTINF").count == 11)
    }

    /// A delta update is the full playlist without the segments ending more than six target
    /// durations before its end, and says how many it left out.
    @Test func aDeltaUpdateIsTheFullPlaylistMinusWhatItSkips() {
        let playlist = Self.playlist(segments: 10, firstSequence: 40, open: 2)
        let full = playlist.render().split(separator: "\n")
        let delta = playlist.render(skipping: true).split(separator: "\n")
        #expect(delta.contains("#EXT-X-SKIP:SKIPPED-SEGMENTS=4") && delta.contains("#EXT-X-VERSION:9"))
        let segments = { (lines: [Substring]) in lines.filter { $0.hasPrefix("segment_") } }
        #expect(segments(delta) == Array(segments(full).dropFirst(4)))
        #expect(delta.contains("#EXT-X-MEDIA-SEQUENCE:40"))
        // Too short to skip anything: no SKIP tag at all.
        #expect(!Self.playlist(segments: 5, open: 0).render(skipping: true).contains("EXT-X-SKIP"))
        // A plain playlist has nothing of Low-Latency HLS, whatever is asked.
        var plain = playlist
        plain.lowLatency = nil
        #expect(!plain.render(skipping: true).contains("EXT-X-SKIP") && !plain.render().contains("EXT-X-PART"))
    }

    @Test func directivesAreReadStrictlyAndJudgedAgainstTheLatestPart() throws {
        let latest = LivePlaylists.Position(mediaSequence: 50, part: 2)
        let next = try HLSDeliveryDirectives(msn: "50", part: "3", skip: nil)
        #expect(next.blocks && next.tooFarAhead(of: latest) == nil)
        #expect(try HLSDeliveryDirectives(msn: "53", part: nil, skip: nil).tooFarAhead(of: latest)?.contains("more than 2 segments") == true)
        #expect(try HLSDeliveryDirectives(msn: "50", part: "6", skip: nil).tooFarAhead(of: latest)?.contains("more than 3 parts") == true)
        #expect(try HLSDeliveryDirectives(msn: nil, part: nil, skip: "v2").skip)
        for (msn, part, skip, problem) in [("-1", nil, nil, "_HLS_msn"), ("1e3", nil, nil, "_HLS_msn"), (nil, "2", nil, "_HLS_part needs"),
                                           ("1", "x", nil, "_HLS_part"), (nil, nil, "yes", "_HLS_skip"), ("99999999999999", nil, nil, "_HLS_msn")] {
            #expect(throws: HLSDirectiveProblem.self) { try HLSDeliveryDirectives(msn: msn, part: part, skip: skip) }
            do {
                _ = try HLSDeliveryDirectives(msn: msn, part: part, skip: skip)
            } catch {
                #expect(error.description.contains(problem), "\(error)")
            }
        }
    }

    /// A blocked reload waits for its part and no longer; a part index past a segment's last is
    /// the next segment's first; a request whose part never comes is let go when its time is up.
    @Test func blockedReloadsWakeWhenTheirPartIsPublished() async throws {
        let board = LivePlaylists()
        let path = "/data/hls/live/stream1/stream1_2/index.m3u8"
        board.publish(Self.playlist(segments: 3, open: 1), path: path)
        let waiting = try HLSDeliveryDirectives(msn: "3", part: "2", skip: nil)
        async let answer = board.wait(path: path, timeout: .seconds(10)) { waiting.isSatisfied(by: $0) }
        // Not yet: part 1 of segment 3.
        board.publish(Self.playlist(segments: 3, open: 2), path: path)
        while board.waiting == 0 { try await Task.sleep(for: .milliseconds(5)) }
        board.publish(Self.playlist(segments: 3, open: 3), path: path)
        let woken = await answer
        #expect(woken?.position == LivePlaylists.Position(mediaSequence: 3, part: 2))
        #expect(board.waiting == 0)

        // Part 6 of a six-part segment is the next segment's part 0.
        let beyond = try HLSDeliveryDirectives(msn: "3", part: "6", skip: nil)
        board.publish(Self.playlist(segments: 4, open: 0), path: path)
        #expect(!beyond.isSatisfied(by: board.snapshot(path)!))
        board.publish(Self.playlist(segments: 4, open: 1), path: path)
        #expect(beyond.isSatisfied(by: board.snapshot(path)!))

        // Out of time: nil, and nothing left waiting.
        let never = await board.wait(path: path, timeout: .milliseconds(50)) { _ in false }
        #expect(never == nil && board.waiting == 0)
        // A rung that ends lets its waiters go.
        async let ended = board.wait(path: path, timeout: .seconds(10)) { _ in false }
        while board.waiting == 0 { try await Task.sleep(for: .milliseconds(5)) }
        board.remove(path: path)
        #expect(await ended == nil)
    }

    /// A writer that goes away removes its rung's playlist, and only its own: a newer writer of
    /// the same rung (the job started again on the same folder) keeps publishing.
    @Test func aWriterRemovesOnlyThePlaylistItPublished() {
        final class Writer {}
        let board = LivePlaylists()
        let path = "/data/hls/live/stream1/stream1_2/index.m3u8"
        let (old, new) = (Writer(), Writer())
        board.publish(Self.playlist(segments: 3, open: 1), path: path, owner: ObjectIdentifier(old))
        board.publish(Self.playlist(segments: 1, open: 0), path: path, owner: ObjectIdentifier(new))
        board.remove(path: path, owner: ObjectIdentifier(old))
        #expect(board.snapshot(path)?.position == LivePlaylists.Position(mediaSequence: 0, part: 5))
        board.remove(path: path, owner: ObjectIdentifier(new))
        #expect(board.snapshot(path) == nil)
    }

    /// Each rung's playlist reports the other rungs of its ladder (and no other ladder's).
    @Test func renditionReportsNameTheOtherRungsLatestParts() {
        let board = LivePlaylists()
        board.publish(Self.playlist(segments: 3, open: 4), path: "/d/hls/live/s1/s1_1/index.m3u8")
        board.publish(Self.playlist(segments: 3, open: 0), path: "/d/hls/live/s1/s1_3/index.m3u8")
        board.publish(Self.playlist(segments: 9, open: 1), path: "/d/hls/live/s2/s2_1/index.m3u8")
        board.publish(Self.playlist(segments: 3, open: 2), path: "/d/hls/live/s1/s1_2/index.m3u8")
        let text = board.snapshot("/d/hls/live/s1/s1_2/index.m3u8")!.full
        #expect(text.contains("#EXT-X-RENDITION-REPORT:URI=\"../s1_1/index.m3u8\",LAST-MSN=3,LAST-PART=3"))
        #expect(text.contains("#EXT-X-RENDITION-REPORT:URI=\"../s1_3/index.m3u8\",LAST-MSN=2,LAST-PART=5"))
        #expect(!text.contains("s2_1") && !text.contains("URI=\"../s1_2/"))
    }

    /// A restart after a Low-Latency playlist removes its parts with its segments, and numbers
    /// on past the open segment whose parts were listed: no part name comes back.
    @Test func aRestartRemovesThePartsAndNeverReusesTheirNames() {
        let previous = HLSPlaylistContinuation(playlistText: Self.playlist(segments: 10, firstSequence: 40, open: 2).render())
        #expect(previous.segmentIndex == 51 && previous.mediaSequence == 50)
        #expect(previous.staleFiles.contains("part_00050_1.m4s") && previous.staleFiles.contains("part_00049_5.m4s"))
        #expect(previous.staleFiles.contains("segment_00049.m4s") && !previous.staleFiles.contains("part_00050_2.m4s"))
        // The file on disk is written at segment ends, with no open part: its preload hint still
        // names the segment whose parts went out after it, and numbering passes that one too.
        let atSegmentEnd = HLSPlaylistContinuation(playlistText: Self.playlist(segments: 10, firstSequence: 40, open: 0).render())
        #expect(atSegmentEnd.segmentIndex == 51 && atSegmentEnd.mediaSequence == 50)
        let superseded = atSegmentEnd.supersededFiles(among: ["part_00050_4.m4s", "part_00051_0.m4s"])
        #expect(superseded.contains("part_00050_4.m4s") && !superseded.contains("part_00051_0.m4s"))
    }

    /// Parts left out of the playlist stay out when its target duration grows: a segment that ran
    /// long (a picture dropped at a keyframe under load) made the target 3, and the next playlist
    /// listed segment 0's parts again, after the hint had named part 5 of segment 4 (CI, stop 66).
    @Test func partsLeftOutStayOutWhenTheTargetDurationGrows() {
        var playlist = Self.playlist(segments: 10, firstSequence: 40, open: 2)
        let before = playlist.render()
        let open = 2 * Self.partTarget
        HLSMediaPlaylist.forgetUnlistedParts(in: &playlist.segments, openSeconds: open, targetDuration: playlist.targetDuration)
        // Forgetting what the playlist does not list changes nothing in it.
        #expect(playlist.render() == before)
        #expect(playlist.segments[6].parts.isEmpty && !playlist.segments[7].parts.isEmpty)
        // One segment of 2.5 s makes the target 3, three target durations 9 s: without forgetting,
        // segment 46's parts (ending 6.7 s before the end) would be listed again.
        var grown = Self.playlist(segments: 10, firstSequence: 40, open: 2)
        grown.segments[9].duration = 2.5
        #expect(grown.targetDuration == 3 && grown.render().contains("part_00046_0.m4s"))
        playlist.segments[9].duration = 2.5
        let text = playlist.render()
        #expect(playlist.targetDuration == 3 && !text.contains("part_00046_") && text.contains("part_00047_0.m4s"))
        // And new segments get parts for three of the grown target durations.
        HLSMediaPlaylist.forgetUnlistedParts(in: &playlist.segments, openSeconds: open, targetDuration: 3)
        #expect(playlist.render() == text)
    }

    @Test func partNamesAreRecognised() {
        #expect(HLSLayout.partialSegment(42, part: 3) == "part_00042_3.m4s")
        #expect(HLSLayout.isPartialSegment("part_00042_3.m4s") && HLSLayout.partialSegmentIndex("part_00042_3.m4s") == 42)
        for name in ["part_00042.m4s", "part__3.m4s", "part_00042_3.mp4", "part_0004x_3.m4s", "segment_00042.m4s", "part_1_2_3.m4s"] {
            #expect(!HLSLayout.isPartialSegment(name), "\(name)")
        }
    }
}
