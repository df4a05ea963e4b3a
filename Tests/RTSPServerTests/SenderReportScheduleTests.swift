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
    final class ReportSink: PacketSink, @unchecked Sendable {
        let eventLoop: EventLoop = EmbeddedEventLoop()
        private let lock = NSLock()
        private var reports: [(at: UInt64, track: Int, ntp: UInt64)] = []
        let time: ManualClock
        init(time: ManualClock) { self.time = time }
        func send(_ packets: [RTPPacket], track: Int) {}
        func send(_ rtcp: RTCPPacket, track: Int) {
            guard case let .senderReport(_, ntp, _, _, _) = rtcp else { return }
            let now = time.clock.nanoseconds
            lock.withLock { reports.append((now, track, ntp)) }
        }
        func close() {}
        func sendPadding(bytes: Int) {}
        var pendingBytes: Int { 0 }
        var sent: [(at: UInt64, track: Int, ntp: UInt64)] { lock.withLock { reports } }
    }

    @Test func theFirstReportsComeASecondApartThenEveryFiveSeconds() {
        let time = ManualClock()
        let sink = ReportSink(time: time)
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
        let video = sink.sent.filter { $0.track == 0 }.map { Double($0.at - start) / 1e9 }
        let audio = sink.sent.filter { $0.track == 1 }
        #expect(video.count == 6, "\(video)")
        let gaps = zip(video, video.dropFirst()).map { ($1 - $0).rounded() }
        #expect(gaps == [1, 1, 5, 5, 5], "reports at \(video)")
        #expect(audio.count == video.count)
        #expect(zip(sink.sent.filter { $0.track == 0 }, audio).allSatisfy { $0.ntp == $1.ntp }, "audio and video name one instant")
        player.stop()
    }
}
