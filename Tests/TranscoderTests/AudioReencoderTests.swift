import FFmpegBridge
import Foundation
import MediaCore
import Testing
import TestSupport

/// The publisher's audio encoded again through libavcodec and libswresample: as Opus for
/// browsers, and as AAC in another rate and layout for a job whose first publisher had those.
@Suite struct AudioReencoderTests {
    /// The fixture's whole audio through a re-encoder to `target`: what came out, and how many
    /// seconds of input went in (to its last packet's start).
    static func reencodeFixture(to target: AudioReencoder.Target) throws -> (outputs: [AudioReencoder.Output], seconds: Double, encoder: AudioReencoder) {
        let input = try MediaInput(url: fixture("720p30-h264-aac.mp4"))
        let audio = try #require(input.streams.first { $0.kind == .audio })
        let encoder = try AudioReencoder(parameters: audio.parameters, timeBase: audio.timeBase, target: target)
        var outputs: [AudioReencoder.Output] = []
        var lastInput: Int64 = 0
        while case let .packet(packet) = try input.read() {
            guard packet.streamIndex == audio.index else { continue }
            lastInput = audio.timeBase.rescale(packet.pts, to: Rational(1, Int32(target.sampleRate)))
            outputs += encoder.encode(packet)
        }
        #expect(encoder.decodeErrors == 0)
        return (outputs, Double(lastInput) / Double(target.sampleRate), encoder)
    }

    @Test func aacBecomesTwentyMillisecondOpusPacketsOnTheSameTimeline() throws {
        let (outputs, seconds, _) = try Self.reencodeFixture(to: .opus())
        // 50 packets a second, all but the encoder's lookahead.
        #expect(Double(outputs.count) > (seconds - 0.2) * 50 && Double(outputs.count) <= seconds * 50 + 1, "\(outputs.count) packets for \(seconds) s")
        // 20 ms apart, always, and starting where the AAC starts (within libopus's lookahead).
        for (previous, next) in zip(outputs, outputs.dropFirst()) { #expect(next.ticks - previous.ticks == 960) }
        #expect(abs(outputs.first!.ticks) <= 960)
        // A real Opus stream: its TOC byte says 20 ms frames (config 3, 7, 11, 15, 19, 23, 27 or 31: the last of each group of four).
        for output in outputs.prefix(50) { #expect((output.bytes[0] >> 3) % 4 == 3 || (output.bytes[0] >> 3) >= 16, "TOC \(output.bytes[0])") }
        let average = Double(outputs.reduce(0) { $0 + $1.bytes.count }) * 8 / seconds
        // Constrained VBR keeps to the rate asked for (unconstrained spent a third more on a tone).
        #expect(average > 30_000 && average < 70_400, "64 kbit/s within 10 %, got \(average)")
    }

    @Test func aGapInTheAudioRestartsItsTimelineInsteadOfSlidingIt() throws {
        let input = try MediaInput(url: fixture("720p30-h264-aac.mp4"))
        let audio = try #require(input.streams.first { $0.kind == .audio })
        let encoder = try AudioReencoder(parameters: audio.parameters, timeBase: audio.timeBase, target: .opus())
        var outputs: [AudioReencoder.Output] = []
        var count = 0
        let fiveSeconds = MediaTime(seconds: 5, timeBase: audio.timeBase).ticks
        while case let .packet(packet) = try input.read() {
            guard packet.streamIndex == audio.index else { continue }
            count += 1
            // From the 100th packet on, the publisher's clock is 5 s later (a reconnect).
            if count >= 100 { packet.pts += fiveSeconds; packet.dts += fiveSeconds }
            outputs += encoder.encode(packet)
            if count > 200 { break }
        }
        let steps = zip(outputs, outputs.dropFirst()).map { $1.ticks - $0.ticks }
        #expect(steps.filter { $0 != 960 }.count == 1, "one jump, then 20 ms steps again")
        #expect(steps.contains { $0 > 48000 * 4 }, "the jump is the publisher's 5 s")
    }

    /// AAC at 48 kHz stereo into AAC-LC at 44.1 kHz mono (a job whose first publisher had that):
    /// 1024-sample frames on the same timeline, which libavcodec decodes back.
    @Test func aacInAnotherRateAndLayoutBecomesTheJobsAAC() throws {
        let (outputs, seconds, encoder) = try Self.reencodeFixture(to: .aac(sampleRate: 44100, channels: 1, bitRate: 64_000))
        #expect(encoder.frameSamples == 1024)
        #expect(Double(outputs.count) > (seconds - 0.1) * 44100 / 1024 && Double(outputs.count) <= seconds * 44100 / 1024 + 1,
                "\(outputs.count) frames for \(seconds) s")
        for (previous, next) in zip(outputs, outputs.dropFirst()) { #expect(next.ticks - previous.ticks == 1024) }
        // Its first frame is the input's first, less the encoder's priming (1024 samples).
        #expect(abs(outputs.first!.ticks + 1024) <= 1024, "\(outputs.first!.ticks)")
        // Raw AAC frames decode with the job's AudioSpecificConfig (LC, 44.1 kHz, mono).
        let config = try CodecParameters.aac(sampleRate: 44100, channels: 1, audioSpecificConfig: AAC.audioSpecificConfig(objectType: 2, sampleRate: 44100, channels: 1))
        let decoder = try AudioReencoder(parameters: config, timeBase: Rational(1, 44100), target: .opus())
        var back: [AudioReencoder.Output] = []
        for output in outputs {
            let packet = try Packet(bytes: output.bytes, timeBase: Rational(1, 44100))
            packet.pts = output.ticks
            packet.dts = output.ticks
            back += decoder.encode(packet)
        }
        #expect(decoder.decodeErrors == 0)
        #expect(Double(back.count) > (seconds - 0.3) * 50, "\(back.count) Opus packets from \(seconds) s of AAC")
    }
}
