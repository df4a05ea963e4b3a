import MediaCore
import Testing

@Suite struct BitrateMeterTests {
    @Test func averageIsTotalBitsOverTotalDuration() {
        var meter = BitrateMeter()
        meter.add(duration: 2, bytes: 250_000)   // 1 Mbit/s
        meter.add(duration: 2, bytes: 500_000)   // 2 Mbit/s
        meter.add(duration: 1, bytes: 62_500)    // 0.5 Mbit/s
        #expect(meter.averageBitRate == 1_300_000)
        #expect(meter.targetDuration == 2)
    }

    @Test func peakIsTheBusiestRunOfHalfToOneAndAHalfTargetDurations() {
        var meter = BitrateMeter()
        meter.add(duration: 2, bytes: 250_000)    // 1.0 Mbit/s
        meter.add(duration: 1, bytes: 400_000)    // 3.2 Mbit/s alone: 1 s is within 0.5–1.5 × 2 s
        meter.add(duration: 2, bytes: 250_000)
        #expect(meter.peakBitRate(targetDuration: 2) == 3_200_000)
        // With a 6 s target, single segments are too short; runs of 3–9 s count: the first two
        // (650 kB over 3 s, 1.73 Mbit/s) beat the whole 5 s (1.44 Mbit/s).
        #expect(meter.peakBitRate(targetDuration: 6) == 1_733_333)
    }

    @Test func peakFallsBackToAverageWhenNoRunQualifies() {
        var meter = BitrateMeter()
        meter.add(duration: 0.5, bytes: 100_000)
        #expect(meter.peakBitRate(targetDuration: 6) == meter.averageBitRate)
        #expect(BitrateMeter().averageBitRate == 0)
    }

    @Test func liveMeterKeepsRecentSegmentsForPeakButAverageOverAll() {
        var meter = BitrateMeter(retainedSegments: 2)
        meter.add(duration: 2, bytes: 2_000_000)
        meter.add(duration: 2, bytes: 250_000)
        meter.add(duration: 2, bytes: 250_000)
        #expect(meter.segments.count == 2)
        #expect(meter.peakBitRate(targetDuration: 2) == 1_000_000)
        #expect(meter.averageBitRate == 3_333_333)
    }
}

@Suite struct BandwidthHintsTests {
    private func hint(_ level: Int, declared: Int, average: Int) -> BandwidthHints.VariantHint {
        .init(streamGuid: "live/s_\(level)", abrLevel: level, width: 640, height: 360, frameRate: 30, codecs: "avc1.64001e",
              declaredBitRate: declared, averageBitRate: average, peakBitRate: average, passthrough: false)
    }

    @Test func thresholdsHaveHysteresisAndFallWithLevel() {
        let hints = BandwidthHints(streamGuid: "live/s", keyframeInterval: 2, variants: [
            hint(3, declared: 600_000, average: 640_000),
            hint(1, declared: 2_500_000, average: 1_700_000),
            hint(2, declared: 1_000_000, average: 990_000),
        ])
        #expect(hints.variants.map(\.abrLevel) == [1, 2, 3])
        let top = hints.variants[0]
        #expect(top.upswitchAboveBitRate == 2_777_778)    // 2.5 M / 0.9
        #expect(top.downswitchBelowBitRate == 2_631_579)  // 2.5 M / 0.95
        #expect(hints.variants[2].upswitchAboveBitRate == 711_112)  // measured 640 k beats declared 600 k
        for hint in hints.variants { #expect(hint.downswitchBelowBitRate < hint.upswitchAboveBitRate) }
        for (higher, lower) in zip(hints.variants, hints.variants.dropFirst()) {
            #expect(higher.upswitchAboveBitRate > lower.upswitchAboveBitRate)
            #expect(higher.downswitchBelowBitRate > lower.downswitchBelowBitRate)
        }
    }

    @Test func aLowerRungOvershootingAHigherOneStillLeavesStrictOrder() {
        let hints = BandwidthHints(streamGuid: "live/s", keyframeInterval: 2, variants: [
            hint(1, declared: 1_000_000, average: 900_000),
            hint(2, declared: 900_000, average: 1_200_000),
        ])
        #expect(hints.variants[0].upswitchAboveBitRate > hints.variants[1].upswitchAboveBitRate)
        #expect(hints.variants[0].downswitchBelowBitRate > hints.variants[1].downswitchBelowBitRate)
    }
}

@Suite struct HLSPlaylistTests {
    @Test func mediaPlaylistTargetDurationAndEnd() {
        let playlist = HLSMediaPlaylist(kind: .vod, mapURI: "init.mp4", segments: [
            .init(uri: "segment_00000.m4s", duration: 2.0), .init(uri: "segment_00001.m4s", duration: 2.002),
            .init(uri: "segment_00002.m4s", duration: 0.5, discontinuity: true),
        ], ended: true)
        let text = playlist.render()
        #expect(text.hasPrefix("#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-TARGETDURATION:3\n"))
        #expect(text.contains("#EXT-X-MAP:URI=\"init.mp4\"\n"))
        #expect(text.contains("#EXT-X-DISCONTINUITY\n#EXTINF:0.50000,\nsegment_00002.m4s\n"))
        #expect(text.hasSuffix("#EXT-X-ENDLIST\n"))
    }

    @Test func masterPlaylistKeepsGivenOrderAndAttributes() {
        let master = HLSMasterPlaylist(entries: [
            .init(uri: "a_1/index.m3u8", bandwidth: 900_000, averageBandwidth: 850_000, width: 1280, height: 720, frameRate: 30, codecs: "avc1.64001f,mp4a.40.2"),
            .init(uri: "a_2/index.m3u8", bandwidth: 950_000, averageBandwidth: 600_000, width: 640, height: 360, frameRate: 29.97, codecs: "avc1.64001e"),
        ]).render()
        let lines = master.split(separator: "\n")
        #expect(lines[3] == #"#EXT-X-STREAM-INF:BANDWIDTH=900000,AVERAGE-BANDWIDTH=850000,RESOLUTION=1280x720,FRAME-RATE=30.000,CODECS="avc1.64001f,mp4a.40.2""#)
        #expect(lines[4] == "a_1/index.m3u8")
        #expect(lines[5].contains("FRAME-RATE=29.970"))
    }
}
