import MediaCore
import Testing

@Suite struct H264Tests {
    /// The SPS of the bundled 720p fixture, as libx264 wrote it (High, level 3.1).
    static let sps720p: [UInt8] = [0x67, 0x64, 0x00, 0x1f, 0xac, 0xb4, 0x02, 0x80, 0x2d, 0xd8, 0x08, 0x80, 0x00, 0x00,
                                   0x03, 0x00, 0x80, 0x00, 0x00, 0x1e, 0x07, 0x8c, 0x19, 0x50]
    /// The SPS of a 640x360 rung this worker encoded (High, level 3.0).
    static let sps360p: [UInt8] = [0x67, 0x64, 0x00, 0x1e, 0xac, 0xb4, 0x05, 0x01, 0x7f, 0xcb, 0x80, 0x88, 0x00, 0x00,
                                   0x03, 0x00, 0x08, 0x00, 0x00, 0x03, 0x01, 0xe4, 0x78, 0xb1, 0x75]
    static let pps: [UInt8] = [0x68, 0xef, 0x3c, 0xb0]
    /// Constrained Baseline 3.0 at 640x480, from x264 (constraint_set0 and set1 flags on).
    static let spsBaseline: [UInt8] = [0x67, 0x42, 0xc0, 0x1e, 0xd9, 0x00, 0xa0, 0x3d, 0xb0, 0x11, 0x00, 0x00, 0x03, 0x00,
                                       0x01, 0x00, 0x00, 0x03, 0x00, 0x32, 0x0f, 0x16, 0x2e, 0x48]

    @Test func codecStringFromRealSPS() {
        #expect(H264.codecString(sps: Self.sps720p) == "avc1.64001f")
        #expect(H264.codecString(sps: Self.sps360p) == "avc1.64001e")
        #expect(H264.codecString(sps: Self.spsBaseline) == "avc1.42c01e")
        #expect(H264.codecString(sps: Self.pps) == nil)
        #expect(H264.codecString(sps: [0x67, 0x64]) == nil)
    }

    @Test func parameterSetsFromAnnexBAndAvcC() {
        let annexB = H264.annexB([Self.sps720p, Self.pps])
        let fromAnnexB = H264.parameterSets(fromExtradata: annexB)
        #expect(fromAnnexB.sps == [Self.sps720p])
        #expect(fromAnnexB.pps == [Self.pps])

        let avcC: [UInt8] = [1, 0x64, 0x00, 0x1f, 0xff, 0xe1, 0x00, UInt8(Self.sps720p.count)] + Self.sps720p
            + [1, 0x00, UInt8(Self.pps.count)] + Self.pps
        let record = AVCDecoderConfigurationRecord(avcC)
        #expect(record?.lengthSize == 4)
        #expect(record?.sequenceParameterSets == [Self.sps720p])
        #expect(record?.pictureParameterSets == [Self.pps])
        #expect(H264.parameterSets(fromExtradata: avcC).sps == [Self.sps720p])
        // A record cut short is not mistaken for one.
        #expect(AVCDecoderConfigurationRecord(Array(avcC.prefix(12))) == nil)
    }

    @Test func splitsAnnexBWithThreeAndFourByteStartCodes() {
        let stream: [UInt8] = [0, 0, 0, 1, 0x09, 0xf0, 0, 0, 1, 0x65, 0x88, 0x00, 0, 0, 0, 1, 0x41, 0x9a]
        #expect(H264.annexBUnits(stream).map(Array.init) == [[0x09, 0xf0], [0x65, 0x88], [0x41, 0x9a]])
        #expect(H264.annexBUnits([1, 2, 3]).isEmpty)
    }

    /// The scan skips three bytes where no start code can begin; it must find exactly what a
    /// byte-by-byte scan finds, on streams dense in the 0 and 1 bytes start codes are made of.
    @Test func theSkippingScanFindsWhatAByteByByteScanFinds() {
        func byteByByte(_ bytes: [UInt8]) -> [[UInt8]] {
            var units: [[UInt8]] = []
            var unitStart: Int?
            var index = 0
            while index + 2 < bytes.count {
                if bytes[index] == 0, bytes[index + 1] == 0, bytes[index + 2] == 1 {
                    if let start = unitStart {
                        var end = index
                        while end > start, bytes[end - 1] == 0 { end -= 1 }
                        if end > start { units.append(Array(bytes[start..<end])) }
                    }
                    index += 3
                    unitStart = index
                } else {
                    index += 1
                }
            }
            if let start = unitStart, start < bytes.count { units.append(Array(bytes[start...])) }
            return units
        }
        var generator = SystemRandomNumberGenerator()
        let alphabet: [UInt8] = [0, 0, 0, 1, 1, 2, 3, 0x65, 0xff]
        for _ in 0..<20_000 {
            let stream = (0..<Int.random(in: 0...40, using: &generator)).map { _ in alphabet.randomElement(using: &generator)! }
            #expect(H264.annexBUnits(stream).map(Array.init) == byteByByte(stream), "\(stream)")
            // And from a slice that does not start at 0.
            let shifted = [0x41] + stream
            #expect(H264.annexBUnits(shifted[1...]).map(Array.init) == byteByByte(stream), "\(stream)")
        }
    }

    @Test func accessUnitsSplitInPlaceInEitherFormFromAnyStartIndex() {
        // A slice that does not start at index 0, as a packet's payload seen in place would be.
        let buffer: [UInt8] = [0xff, 0xff, 0, 0, 0, 1, 0x65, 0x88, 0, 0, 1, 0x41]
        #expect(H264.accessUnitNALUnits(buffer[2...])?.map(Array.init) == [[0x65, 0x88], [0x41]])
        let prefixed: [UInt8] = [0xff, 0, 0, 0, 2, 0x65, 0x88, 0, 0, 0, 1, 0x41]
        #expect(H264.accessUnitNALUnits(prefixed[1...])?.map(Array.init) == [[0x65, 0x88], [0x41]])
        #expect(H264.accessUnitNALUnits(prefixed[1..<7])?.map(Array.init) == [[0x65, 0x88]])
        #expect(H264.accessUnitNALUnits(prefixed[1..<6]) == nil)
        #expect(H264.accessUnitNALUnits(prefixed[1..<4]) == nil)
        #expect(H264.accessUnitNALUnits([UInt8]())?.isEmpty == true)
        let bytes: [UInt8] = [0, 0, 1, 0x65, 0x88]
        #expect(bytes.withUnsafeBufferPointer { H264.accessUnitNALUnits($0)?.map(Array.init) } == [[0x65, 0x88]])
    }

    @Test func lengthPrefixedUnitsRejectOverruns() {
        #expect(H264.lengthPrefixedUnits([0, 0, 0, 2, 0x65, 0x88])?.map(Array.init) == [[0x65, 0x88]])
        #expect(H264.lengthPrefixedUnits([0, 0, 0, 9, 0x65]) == nil)
    }

    @Test func removesEmulationPrevention() {
        #expect(H264.removingEmulationPrevention([0x00, 0x00, 0x03, 0x01, 0x00, 0x00, 0x03, 0x00]) == [0, 0, 1, 0, 0, 0])
    }
}

@Suite struct ADTSTests {
    @Test func readsHeaderAndBuildsAudioSpecificConfig() throws {
        // AAC-LC, 48 kHz (index 3), stereo, 371-byte frame, no CRC.
        let header: [UInt8] = [0xFF, 0xF1, 0x4C, 0x80, 0x2E, 0x7F, 0xFC]
        let adts = try #require(ADTSHeader(header))
        #expect(adts.profile == 1)
        #expect(adts.samplingFrequencyIndex == 3)
        #expect(adts.channelConfiguration == 2)
        #expect(adts.headerLength == 7)
        #expect(adts.frameLength == 371)
        #expect(adts.audioSpecificConfig == [0x11, 0x90])
        #expect(AAC.audioSpecificConfig(objectType: 2, sampleRate: 44100, channels: 2) == [0x12, 0x10])
        #expect(ADTSHeader([0x00, 0x01, 2, 3, 4, 5, 6]) == nil)
    }
}

@Suite struct H264SPSTests {
    @Test func readsSizeProfileAndLevelFromRealSPS() throws {
        let hd = try #require(H264SPS(H264Tests.sps720p))
        #expect(hd.width == 1280 && hd.height == 720)
        #expect(hd.profile == 100 && hd.level == 31)
        let small = try #require(H264SPS(H264Tests.sps360p))
        #expect(small.width == 640 && small.height == 360)
        let baseline = try #require(H264SPS(H264Tests.spsBaseline))
        #expect(baseline.width == 640 && baseline.height == 480)
        #expect(baseline.profile == 66)
    }

    @Test func rejectsWhatIsNotAnSPS() {
        #expect(H264SPS(H264Tests.pps) == nil)
        #expect(H264SPS([0x67, 0x64, 0x00]) == nil)
        #expect(H264SPS(Array(H264Tests.sps720p.prefix(6))) == nil)
        #expect(H264SPS([0x67, 0x64, 0x00, 0x1f] + [UInt8](repeating: 0, count: 20)) == nil)
    }
}

@Suite struct DecodeTimestampsTests {
    @Test func bFramePyramidGetsMonotonicDTSNeverAfterPTS() {
        // x264's pyramid in decode order: I0 P4 B2 b1 b3 P8 B6 b5 b7 (times in frames).
        let pts: [Int64] = [0, 4, 2, 1, 3, 8, 6, 5, 7].map { $0 * 3000 }
        var generator = DecodeTimestamps(depth: 2, firstPTS: 0, step: 3000)
        let dts = pts.map { generator.next(pts: $0) }
        #expect(zip(dts, dts.dropFirst()).allSatisfy { $0 < $1 }, "\(dts)")
        #expect(zip(dts, pts).allSatisfy { $0 <= $1 }, "\(dts)")
    }

    @Test func noBFramesMeansDTSEqualsPTS() {
        var generator = DecodeTimestamps(depth: 0, firstPTS: 9000, step: 3000)
        #expect((0..<5).map { generator.next(pts: 9000 + Int64($0) * 3000) } == [9000, 12000, 15000, 18000, 21000])
    }

    @Test func reorderDepthFromTheSPS() throws {
        // x264 with B-frames writes max_num_reorder_frames in the VUI.
        let sps = try #require(H264SPS(H264Tests.sps720p))
        #expect(sps.maxNumReorderFrames == 0, "the fixture has no B-frames")
        #expect(try #require(H264SPS(H264Tests.spsBaseline)).reorderDepth == 0)
    }
}
