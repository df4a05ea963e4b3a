import MediaCore
import Testing

@Suite struct PublishTargetTests {
    @Test func srtStreamIDsInTheFormsEncodersSend() throws {
        #expect(try PublishTarget(srtStreamID: "#!::r=live/stream1_1,m=publish,u=user,p=pass")
            == PublishTarget(path: "live/stream1_1", isPublish: true, username: "user", password: "pass"))
        #expect(try PublishTarget(srtStreamID: "#!::r=live/stream1_1,m=request") == PublishTarget(path: "live/stream1_1", isPublish: false))
        #expect(try PublishTarget(srtStreamID: "%23%21%3A%3Ar%3Dlive%2Fstream1_1%2Cm%3Dpublish%2Cu%3Duser%2Cp%3Dpass")
            == PublishTarget(path: "live/stream1_1", isPublish: true, username: "user", password: "pass"))
        #expect(try PublishTarget(srtStreamID: "#!::u=user,r=live/stream1_1,m=publish,s=abc,t=stream,h=node")
            == PublishTarget(path: "live/stream1_1", username: "user"))
        #expect(try PublishTarget(srtStreamID: "publish:live/stream1_1") == PublishTarget(path: "live/stream1_1"))
        #expect(try PublishTarget(srtStreamID: "publish:live/stream1_1:user:p%40ss").password == "p%40ss")
        #expect(try PublishTarget(srtStreamID: "read:live/stream1_1").isPublish == false)
        #expect(try PublishTarget(srtStreamID: "live/stream1_1") == PublishTarget(path: "live/stream1_1"))
        #expect(try PublishTarget(srtStreamID: "live/stream1_1?user=u&password=p%40ss") == PublishTarget(path: "live/stream1_1", username: "u", password: "p@ss"))
    }

    @Test func nonsenseStreamIDsSayWhatIsWrong() {
        let cases: [(String, PublishTarget.Problem)] = [
            ("", .empty),
            (String(repeating: "a", count: 600), .tooLong(600)),
            ("#!::m=publish", .malformed("no resource (r=)")),
            ("#!::r=live/x,z=1", .unknownKey("z")),
            ("#!::r=live/x,m=dance", .malformed("mode m=dance")),
            ("#!::r", .malformed("'r' is not key=value")),
            ("live/../etc", .badPath("live/../etc")),
            ("live/str eam", .badPath("live/str eam")),
            ("publish:a:b", .malformed("expected publish:path or publish:path:user:password")),
        ]
        for (text, problem) in cases {
            #expect(throws: problem, "\(text.prefix(20))") { try PublishTarget(srtStreamID: text) }
        }
    }
}

@Suite struct PublisherTimelineTests {
    @Test func mpegTSTimesWrapAt33BitsAndJumpsStartANewTimeline() {
        var timeline = PublisherTimeline(wrapBits: 33, ticksPerSecond: 90000)
        let wrap = Int64(1) << 33
        #expect(timeline.place(wrap - 3000, track: 0) == (wrap - 3000, false))
        #expect(timeline.place(wrap - 1000, track: 1) == (wrap - 1000, false))
        // Across the wrap, 3000 ticks later on the video track.
        #expect(timeline.place(0, track: 0) == (wrap, false))
        // An encoder restarted at 12 345: a new timeline just after the furthest time.
        let (restart, restarted) = timeline.place(12_345 + 900_000, track: 0)
        #expect(restarted && restart == wrap + 9000)
        // Audio follows the new anchor without a second restart.
        #expect(timeline.place(12_345 + 900_000 + 900, track: 1) == (wrap + 9900, false))
    }

    /// RTP: each track has its own rate and a random start. A track's first time is where it
    /// arrived; a jump on one track re-anchors both just after the furthest second reached.
    @Test func rtpTracksKeepTheirOwnClocksAndRestartTogether() {
        var timeline = PublisherTimeline(wrapBits: 32, clock: .perTrack([90000, 48000]))
        let wrap = Int64(1) << 32
        // Video starts near the wrap, audio half a second later at an unrelated number.
        #expect(timeline.place(wrap - 3000, track: 0, arrival: 0) == (0, false))
        #expect(timeline.place(77, track: 1, arrival: 0.5) == (24000, false))
        // Across the wrap: 6000 ticks on; then a B-frame 3000 back is not a new timeline.
        #expect(timeline.place(3000, track: 0, arrival: 0.07) == (6000, false))
        #expect(timeline.place(0, track: 0, arrival: 0.08) == (3000, false))
        #expect(timeline.place(77 + 48000, track: 1, arrival: 1.5) == (72000, false))
        // The video encoder restarts its clock: 10 s back. Both tracks start again at 1.5 + 0.1 s,
        // audio on its next frame, without a second restart.
        let (video, restarted) = timeline.place(wrap - 3000 - 900_000, track: 0, arrival: 1.2)
        #expect(restarted && video == 144_000)
        #expect(timeline.place(5, track: 1, arrival: 1.6) == (76800, false))
        // A late arrival wins over the furthest point: the new timeline starts at the wall clock.
        let (later, again) = timeline.place(wrap - 3000 + 9_000_000, track: 0, arrival: 30)
        #expect(again && later == 30 * 90000)
    }
}

@Suite struct ElementaryStreamsTests {
    static let sps: [UInt8] = [0x67, 0x64, 0x00, 0x1f, 0xac, 0xd9, 0x40, 0x50, 0x05, 0xbb, 0x01, 0x10, 0x00, 0x00, 0x03, 0x00, 0x10,
                               0x00, 0x00, 0x03, 0x03, 0xc0, 0xf1, 0x83, 0x19, 0x60]
    static let pps: [UInt8] = [0x68, 0xeb, 0xe3, 0xcb, 0x22, 0xc0]

    static func annexB(_ units: [[UInt8]]) -> [UInt8] { units.flatMap { [0, 0, 0, 1] + $0 } }

    static func adts(_ payload: [UInt8], frequencyIndex: Int = 3, channels: Int = 2) -> [UInt8] {
        let length = payload.count + 7
        return [0xFF, 0xF1, UInt8(1 << 6 | frequencyIndex << 2 | channels >> 2), UInt8((channels & 3) << 6 | length >> 11),
                UInt8(length >> 3 & 0xFF), UInt8((length & 7) << 5 | 0x1F), 0xFC] + payload
    }

    @Test func annexBAndADTSBecomeFormatsNALUnitsAndRawFrames() {
        var streams = ElementaryStreams()
        // Nothing before the parameter sets.
        #expect(streams.video(annexB: Self.annexB([[0x41, 0x9a]]), pts: 0, isKeyframe: false).isEmpty)
        let events = streams.video(annexB: Self.annexB([[0x09, 0xF0], Self.sps, Self.pps, [0x65, 0x88]]), pts: 90_000, isKeyframe: true)
        guard case let .formats(video?, nil) = events.first, case let .video(units, time, keyframe) = events.last else {
            Issue.record("\(events)")
            return
        }
        #expect(video.width == 1280 && video.height == 720)
        #expect(units == [Self.sps, Self.pps, [0x65, 0x88]], "the access unit delimiter is dropped")
        #expect(keyframe && time == MediaTime(ticks: 90_000, timeBase: Rational(1, 90000)))
        // Two ADTS frames in one PES: one format, two frames 1024 samples apart.
        let audio = streams.audio(adts: Self.adts([1, 2, 3]) + Self.adts([4, 5]), pts: 90_000)
        #expect(audio.count == 3)
        guard case let .formats(_, format?) = audio.first, case let .audio(first, at) = audio[1], case let .audio(second, later) = audio[2] else {
            Issue.record("\(audio)")
            return
        }
        #expect(format.sampleRate == 48000 && format.channels == 2 && format.config == [0x11, 0x90])
        #expect(first == [1, 2, 3] && second == [4, 5])
        #expect(later.ticks - at.ticks == 1920)
        // A truncated frame is not read past.
        #expect(streams.audio(adts: Array(Self.adts([1, 2, 3, 4]).prefix(8)), pts: 93_000).isEmpty)
    }

    /// An MPEG-TS muxer may put the first AAC frame a second after the first pictures; a live
    /// source is made with the tracks its first picture knows, so an SRT publisher's video waits
    /// (bounded) for the announced audio's format. Without the wait an SRT publish had no audio.
    @Test func picturesWaitForTheAnnouncedAudioFormat() {
        var streams = ElementaryStreams(awaitsAudio: true)
        #expect(streams.video(annexB: Self.annexB([Self.sps, Self.pps, [0x65, 0x88]]), pts: 0, isKeyframe: true).isEmpty)
        #expect(streams.video(annexB: Self.annexB([[0x41, 0x9a]]), pts: 3000, isKeyframe: false).isEmpty)
        #expect(streams.videoFormat?.width == 1280, "the SPS is read while its pictures wait")
        let released = streams.audio(adts: Self.adts([1, 2]), pts: 1500)
        guard case .formats(_?, _?) = released.first else {
            Issue.record("the first event does not name both formats: \(released)")
            return
        }
        let videoTimes = released.compactMap { if case let .video(_, time, _) = $0 { time.ticks } else { nil } }
        #expect(videoTimes == [0, 3000], "\(released)")
        #expect(released.allSatisfy { if case .formats(_, nil) = $0 { false } else { true } }, "a held format lost the audio")
        #expect(streams.video(annexB: Self.annexB([[0x41, 0x9a]]), pts: 6000, isKeyframe: false).count == 1, "pictures no longer wait")

        // No audio within the wait: the pictures go on without it, and the end gives back the rest.
        var silent = ElementaryStreams(awaitsAudio: true)
        var out = silent.video(annexB: Self.annexB([Self.sps, Self.pps, [0x65, 0x88]]), pts: 0, isKeyframe: true)
        var pts: Int64 = 0
        while out.isEmpty && pts < 10 * 90000 {
            pts += 3000
            out = silent.video(annexB: Self.annexB([[0x41, 0x9a]]), pts: pts, isKeyframe: false)
        }
        #expect(pts == ElementaryStreams.audioFormatWait, "released at \(pts)")
        #expect(out.filter { if case .video = $0 { true } else { false } }.count == Int(pts / 3000) + 1)
        var ending = ElementaryStreams(awaitsAudio: true)
        _ = ending.video(annexB: Self.annexB([Self.sps, Self.pps, [0x65, 0x88]]), pts: 0, isKeyframe: true)
        #expect(ending.finish().count == 2, "formats and the one picture")
    }
}
