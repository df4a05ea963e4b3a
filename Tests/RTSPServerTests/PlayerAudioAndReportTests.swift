import Foundation
import MediaCore
import NIOCore
import NIOEmbedded
import RTSP
@testable import RTSPServer
import Testing

/// When a player gets RTCP sender reports: the first three a second apart (a receiver maps RTP
/// time to its clock only from its second report, and lip sync and playout times wait for it),
/// then every five seconds; each names the same instant for video and audio.
@Suite struct SenderReportScheduleTests {
    @Test func theFirstReportsComeASecondApartThenEveryFiveSeconds() {
        let time = ManualClock()
        let sink = RecordingPacketSink(clock: time.clock)
        let stream = LiveStream(path: "live/sr_1")
        let player = PacketPlayer(sink: sink, opusAudio: true, clock: time.clock, onEnd: {})
        player.play(stream)
        let start = time.clock.nanoseconds
        // Twenty seconds of live pictures, 30 a second.
        for index in 0..<600 {
            let unit: [UInt8] = [index % 60 == 0 ? 0x65 : 0x41] + [UInt8](repeating: 0x5A, count: 200)
            stream.writeVideo([unit], time: MediaTime(ticks: Int64(index) * 3000, timeBase: Rational(1, 90000)), isKeyframe: index % 60 == 0)
            time.advance(seconds: 1.0 / 30)
        }
        let reports = sink.reports.compactMap { report -> (at: UInt64, track: Int, ntp: UInt64)? in
            guard case let .senderReport(_, ntp, _, _, _) = report.packet else { return nil }
            return (report.at, report.track, ntp)
        }
        let video = reports.filter { $0.track == 0 }.map { Double($0.at - start) / 1e9 }
        let audio = reports.filter { $0.track == 1 }
        #expect(video.count == 6, "\(video)")
        let gaps = zip(video, video.dropFirst()).map { ($1 - $0).rounded() }
        #expect(gaps == [1, 1, 5, 5, 5], "reports at \(video)")
        #expect(audio.count == video.count)
        #expect(zip(reports.filter { $0.track == 0 }, audio).allSatisfy { $0.ntp == $1.ntp }, "audio and video name one instant")
        player.stop()
    }
}

/// A browser player takes the Opus rendition it is given, from the next packet on, on its one
/// audio SSRC with its timestamps going on.
@Suite struct BrowserAudioRenditionTests {
    @Test func aPlayerTakesTheRenditionItIsGivenAtTheNextPacket() {
        let sink = RecordingPacketSink()
        let stream = LiveStream(path: "live/au_1")
        let player = PacketPlayer(sink: sink, opusAudio: true, onEnd: {})
        player.play(stream)
        stream.writeVideo([[0x65, 1, 2, 3]], time: MediaTime(ticks: 0, timeBase: Rational(1, 90000)), isKeyframe: true)
        for index in 0..<10 {
            if index == 5 { player.subscriber.audioRendition = .light }
            stream.writeOpus([0xFC, UInt8(index)], light: [0x0C, UInt8(index)], time: MediaTime(ticks: Int64(index) * 960, timeBase: Rational(1, 48000)))
        }
        let audio = sink.audio
        #expect(audio.map { Array($0.payload.readableBytesView)[0] } == [UInt8](repeating: 0xFC, count: 5) + [UInt8](repeating: 0x0C, count: 5))
        #expect(Set(audio.map(\.ssrc)).count == 1)
        #expect(zip(audio, audio.dropFirst()).allSatisfy { $1.timestamp &- $0.timestamp == 960 && $1.sequenceNumber &- $0.sequenceNumber == 1 })
        #expect(player.audioRendition == .light)
        player.stop()
    }
}
