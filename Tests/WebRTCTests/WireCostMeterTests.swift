import MediaCore
import Testing
import WebRTC

/// What a viewer's link carries beside its rung's video, as transport-wide feedback counts it.
@Suite struct WireCostMeterTests {
    /// 64 kbit/s of Opus in 20 ms packets (160 bytes each), 44 bytes of RTP header, extension and
    /// SRTP tag on each: 81.6 kbit/s on the wire; video with 4 % of headers.
    @Test func audioIsCountedPerSecondOfSoundAndVideoByItsHeaders() {
        var meter = WireCostMeter()
        #expect(meter.cost == .none, "nothing sent, no cost")
        // A catch-up's second of audio sent at once counts as one second, however fast it went.
        let opus: [UInt8] = [0xFC] + [UInt8](repeating: 0, count: 159)  // CELT, 20 ms, one frame
        for _ in 0..<50 { meter.sentAudio(wire: 160 + 44, seconds: OpusPacket.duration(opus)) }
        for _ in 0..<10 { meter.sentVideo(payload: 1000, wire: 1040) }
        #expect(abs(meter.cost.besides - 81_600) < 1)
        #expect(abs(meter.cost.videoFactor - 1.04) < 1e-9)
    }

    @Test func anOpusPacketsDurationComesFromItsTOC() {
        #expect(OpusPacket.duration([0xFC, 1, 2]) == 0.020)  // CELT FB 20 ms, one frame
        #expect(OpusPacket.duration([0x09]) == 0.040)  // SILK 20 ms (config 1), code 1: two frames
        #expect(abs(OpusPacket.duration([0x18 | 0x03, 0x03]) - 0.180) < 1e-9)  // SILK 60 ms (config 3), three frames
        #expect(OpusPacket.duration([UInt8]()) == 0)
        #expect(OpusPacket.duration([0x03]) == 0, "code 3 without its count byte")
    }
}
