import FFmpegBridge
import Foundation
import MediaCore
import Testing
import TestSupport

/// The publisher's AAC as Opus for browsers, through libavcodec, libswresample and libopus.
@Suite struct OpusEncoderTests {
    @Test func aacBecomesTwentyMillisecondOpusPacketsOnTheSameTimeline() throws {
        let input = try MediaInput(url: fixture("720p30-h264-aac.mp4"))
        let audio = try #require(input.streams.first { $0.kind == .audio })
        let encoder = try OpusEncoder(parameters: audio.parameters, timeBase: audio.timeBase)
        var outputs: [OpusEncoder.Output] = []
        var lastInput: Int64 = 0
        while case let .packet(packet) = try input.read() {
            guard packet.streamIndex == audio.index else { continue }
            lastInput = audio.timeBase.rescale(packet.pts, to: Rational(1, 48000))
            outputs += encoder.encode(packet)
        }
        #expect(encoder.decodeErrors == 0)
        let seconds = Double(lastInput) / 48000
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
        let encoder = try OpusEncoder(parameters: audio.parameters, timeBase: audio.timeBase)
        var outputs: [OpusEncoder.Output] = []
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
}
