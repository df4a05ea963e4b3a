import MediaCore
import NIOCore
import RTSP
import Testing

@Suite struct LATMTests {
    static func packet(_ payload: [UInt8], timestamp: UInt32, marker: Bool = true, sequence: UInt16 = 1) -> RTPPacket {
        RTPPacket(marker: marker, payloadType: 99, sequenceNumber: sequence, timestamp: timestamp, ssrc: 1, payload: ByteBuffer(bytes: payload))
    }

    static func hex(_ text: String) -> [UInt8] {
        stride(from: 0, to: text.count, by: 2).map { UInt8(text.dropFirst($0).prefix(2), radix: 16)! }
    }

    // MARK: - Configs

    @Test func readsGStreamersConfigWhichEndsWithTheAudioSpecificConfig() throws {
        // rtspclientsink 1.22 for ffmpeg's mono 44.1 kHz AAC (codec_data 120856e500, with its
        // "no SBR" extension); no frameLengthType or buffer fullness follow.
        let config = try #require(LATMStreamMuxConfig(Self.hex("40002410adca00")))
        #expect(config.framesPerElement == 1)
        #expect(config.audio.objectType == 2 && config.audio.sampleRate == 44100 && config.audio.channels == 1)
        #expect(config.audio.bytes == Self.hex("120856e500"))
    }

    @Test func readsRFC6416sExampleConfig() throws {
        // RFC 6416 §7.3: AAC-LC, 24 kHz, mono, frameLengthType 0, buffer fullness 0xFF.
        let config = try #require(LATMStreamMuxConfig(Self.hex("400026103fc0")))
        #expect(config.audio.bytes == Self.hex("1308"))
        #expect(config.audio.sampleRate == 24000 && config.audio.channels == 1)
    }

    @Test func readsSeveralFramesPerElementAndExplicitHEAAC() throws {
        // numSubFrames 1; HE-AAC (SBR, object type 5) over LC at 22.05 -> 44.1 kHz, stereo.
        var bits = "0" + "1" + "000001" + "0000" + "000"
        bits += "00101" + "0111" + "0010" + "0011" + "00010" + "000"      // ASC: SBR, 22050, stereo, ext 44100, LC, GA
        bits += "000" + "11111111" + "0" + "0"
        while bits.count % 8 != 0 { bits += "0" }
        let bytes = stride(from: 0, to: bits.count, by: 8).map { UInt8(bits.dropFirst($0).prefix(8), radix: 2)! }
        let config = try #require(LATMStreamMuxConfig(bytes))
        #expect(config.framesPerElement == 2)
        #expect(config.audio.objectType == 2 && config.audio.channels == 2 && config.audio.sampleRate == 22050)
    }

    /// Version 1; two programs; two layers; channel configuration 0 (a program config element);
    /// frameLengthType 2 and 1; an object type outside General Audio (ER AAC LD); truncations.
    @Test(arguments: ["", "80", "c0002410", "40102410", "40022410", "4000200000", "40002410ad", "400024107fe0", "400176103fc0", "400024"])
    func refusesWhatItCannotTake(_ hex: String) {
        #expect(LATMStreamMuxConfig(Self.hex(hex)) == nil, "\(hex)")
    }

    @Test func audioSpecificConfigsAsMP4AndRFC3640CarryThem() throws {
        let stereo = try #require(AudioSpecificConfig(Self.hex("1190")))
        #expect(stereo.objectType == 2 && stereo.sampleRate == 48000 && stereo.channels == 2 && stereo.bytes == Self.hex("1190"))
        let withExtension = try #require(AudioSpecificConfig(Self.hex("119056e500")))
        #expect(withExtension.channels == 2 && withExtension.bytes == Self.hex("119056e500"))
        #expect(AudioSpecificConfig(Self.hex("1180")) == nil, "channel configuration 0 needs a program config element")
        #expect(AudioSpecificConfig([0x11]) == nil)
    }

    // MARK: - Payloads

    @Test func oneFramePerPacketWithItsLength() {
        var depacketizer = LATMDepacketizer(framesPerElement: 1)
        let frame = [UInt8](repeating: 7, count: 300)
        let out = depacketizer.push(Self.packet([255, 45] + frame, timestamp: 1000))
        #expect(out == [.init(timestamp: 1000, data: frame)])
        #expect(depacketizer.push(Self.packet([3, 1, 2, 3], timestamp: 2024)) == [.init(timestamp: 2024, data: [1, 2, 3])])
    }

    @Test func severalFramesInOneElementGetConsecutiveTimes() {
        var depacketizer = LATMDepacketizer(framesPerElement: 2)
        #expect(depacketizer.push(Self.packet([2, 1, 2, 1, 9], timestamp: 0)) == [.init(timestamp: 0, data: [1, 2]), .init(timestamp: 1024, data: [9])])
    }

    @Test func anElementInFragmentsEndsAtTheMarkerOrANewTimestamp() {
        var depacketizer = LATMDepacketizer(framesPerElement: 1)
        #expect(depacketizer.push(Self.packet([4, 1, 2], timestamp: 50, marker: false)).isEmpty)
        #expect(depacketizer.push(Self.packet([3, 4], timestamp: 50)) == [.init(timestamp: 50, data: [1, 2, 3, 4])])
        // A sender that never sets the marker: the next timestamp ends the element.
        #expect(depacketizer.push(Self.packet([1, 5], timestamp: 1074, marker: false)).isEmpty)
        #expect(depacketizer.push(Self.packet([1, 6], timestamp: 2098, marker: false)) == [.init(timestamp: 1074, data: [5])])
    }

    @Test func lossDropsThePartialElementAndAnOversizedOneIsNotKept() {
        var depacketizer = LATMDepacketizer(framesPerElement: 1)
        _ = depacketizer.push(Self.packet([4, 1, 2], timestamp: 50, marker: false))
        #expect(depacketizer.push(Self.packet([3, 4], timestamp: 50), lostBefore: true).isEmpty, "the tail alone is no frame")
        let big = [UInt8](repeating: 255, count: 1400)
        for index in 0..<20 { _ = depacketizer.push(Self.packet(big, timestamp: 9, marker: false, sequence: UInt16(index))) }
        #expect(depacketizer.push(Self.packet([1, 1], timestamp: 9)).isEmpty)
        #expect(depacketizer.push(Self.packet([1, 8], timestamp: 10)) == [.init(timestamp: 10, data: [8])])
    }

    @Test(arguments: [[UInt8](), [0], [255], [255, 255], [5, 1], [0, 0, 0]])
    func hostilePayloadsNeverTrap(_ bytes: [UInt8]) {
        var depacketizer = LATMDepacketizer(framesPerElement: 3)
        #expect(depacketizer.push(Self.packet(bytes, timestamp: 1)).isEmpty)
    }
}
