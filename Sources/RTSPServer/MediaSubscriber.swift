import Dispatch
import NIOCore
import RTSP
import Synchronization

/// One player of one stream: packetizes what the stream writes with its own SSRCs, sequence
/// numbers and timestamp bases, sends RTCP sender reports, and, when its backlog passes the
/// limit, skips everything up to the next IDR so a slow player only hurts itself.
final class MediaSubscriber: Sendable {
    private let transport: PlayerTransport
    private let state: Mutex<State>
    private let onEnd: @Sendable () -> Void
    let hasVideo: Bool
    let hasAudio: Bool

    /// Backlog past which this player skips to the next IDR.
    let maximumBacklog: Int
    static let senderReportInterval: UInt64 = 5_000_000_000

    struct State {
        var video: H264Packetizer
        var audio: AACPacketizer
        var videoBase: UInt32
        var audioBase: UInt32
        var skipping = false
        var started = false
        var dropped = 0
        var videoPackets: UInt32 = 0
        var videoOctets: UInt32 = 0
        var audioPackets: UInt32 = 0
        var audioOctets: UInt32 = 0
        var lastReport: UInt64 = 0
        /// NTP time (Unix seconds) of media time zero, fixed at the first picture sent. Sender reports
        /// map RTP time to NTP along the media timeline, not the wall clock: a publisher's
        /// interruption pauses the timeline, and a report that counted it would make players jump.
        var epoch: Double?
        var audioRate = 0
    }

    init(transport: PlayerTransport, hasVideo: Bool, hasAudio: Bool, audioRate: Int = 0, maximumBacklog: Int = 4 * 1024 * 1024,
         onEnd: @escaping @Sendable () -> Void) {
        self.transport = transport
        self.maximumBacklog = maximumBacklog
        self.hasVideo = hasVideo
        self.hasAudio = hasAudio
        self.onEnd = onEnd
        var generator = SystemRandomNumberGenerator()
        state = Mutex(State(
            video: H264Packetizer(ssrc: generator.next(), initialSequence: UInt16.random(in: 0...UInt16.max, using: &generator)),
            audio: AACPacketizer(ssrc: generator.next(), initialSequence: UInt16.random(in: 0...UInt16.max, using: &generator)),
            videoBase: generator.next(), audioBase: generator.next(), audioRate: audioRate))
    }

    /// For RTP-Info in the PLAY reply: each track's first sequence number and RTP timestamp.
    func rtpInfo(videoTicks: Int64, audioTicks: Int64) -> (video: (UInt16, UInt32), audio: (UInt16, UInt32)) {
        state.withLock {
            (($0.video.sequenceNumber, $0.videoBase &+ UInt32(truncatingIfNeeded: videoTicks)),
             ($0.audio.sequenceNumber, $0.audioBase &+ UInt32(truncatingIfNeeded: audioTicks)))
        }
    }

    var ssrcs: (video: UInt32, audio: UInt32) { state.withLock { ($0.video.ssrc, $0.audio.ssrc) } }
    var droppedFrames: Int { state.withLock { $0.dropped } }

    func sendVideo(nalUnits: [[UInt8]], ticks: Int64, isKeyframe: Bool, parameterSets: [[UInt8]]?) {
        guard hasVideo else { return }
        let backlog = transport.pendingBytes
        let packets: [RTPPacket]? = state.withLock { state in
            if !state.started {
                // A player's first picture must be decodable.
                guard isKeyframe else { return nil }
                state.started = true
                state.epoch = wallClock() - Double(ticks) / 90000
            }
            if backlog > maximumBacklog { state.skipping = true }
            if state.skipping {
                guard isKeyframe, backlog < maximumBacklog / 2 else {
                    state.dropped += 1
                    return nil
                }
                state.skipping = false
            }
            // SPS/PPS in-band before every IDR, for players that ignore the SDP's.
            let hasSets = nalUnits.contains { [7, 8].contains(($0.first ?? 0) & 0x1F) }
            let units = (isKeyframe && !hasSets ? (parameterSets ?? []) : []) + nalUnits
            let packets = state.video.packetize(units.map { $0[...] }, timestamp: state.videoBase &+ UInt32(truncatingIfNeeded: ticks))
            state.videoPackets &+= UInt32(packets.count)
            state.videoOctets &+= UInt32(truncatingIfNeeded: packets.reduce(0) { $0 + $1.payload.readableBytes })
            return packets
        }
        guard let packets else { return }
        transport.send(packets, track: 0)
        reportIfDue(ticks: ticks)
    }

    func sendAudio(_ frame: [UInt8], ticks: Int64) {
        guard hasAudio else { return }
        let packet: RTPPacket? = state.withLock { state in
            guard state.started, !state.skipping else { return nil }
            guard let packet = state.audio.packetize(frame[...], timestamp: state.audioBase &+ UInt32(truncatingIfNeeded: ticks)) else { return nil }
            state.audioPackets &+= 1
            state.audioOctets &+= UInt32(truncatingIfNeeded: packet.payload.readableBytes)
            return packet
        }
        guard let packet else { return }
        transport.send([packet], track: 1)
    }

    /// RTCP sender reports every few seconds for each track, on one NTP timeline, so players can
    /// synchronise audio with video.
    private func reportIfDue(ticks: Int64) {
        let now = DispatchTime.now().uptimeNanoseconds
        let reports: [(RTCPPacket, Int)] = state.withLock { state in
            guard let epoch = state.epoch, now - state.lastReport >= Self.senderReportInterval else { return [] }
            state.lastReport = now
            let mediaTime = Double(ticks) / 90000
            let ntp = RTCPPacket.ntpTimestamp(unixSeconds: epoch + mediaTime)
            var reports: [(RTCPPacket, Int)] = [(.senderReport(
                ssrc: state.video.ssrc, ntpTimestamp: ntp, rtpTimestamp: state.videoBase &+ UInt32(truncatingIfNeeded: ticks),
                packetCount: state.videoPackets, octetCount: state.videoOctets), 0)]
            if hasAudio, state.audioRate > 0 {
                let audioTicks = Int64((mediaTime * Double(state.audioRate)).rounded())
                reports.append((.senderReport(
                    ssrc: state.audio.ssrc, ntpTimestamp: ntp, rtpTimestamp: state.audioBase &+ UInt32(truncatingIfNeeded: audioTicks),
                    packetCount: state.audioPackets, octetCount: state.audioOctets), 1))
            }
            return reports
        }
        for (report, track) in reports { transport.send(report, track: track) }
    }

    func streamEnded() {
        let ssrcs = self.ssrcs
        transport.send(.goodbye(ssrcs: [ssrcs.video]), track: 0)
        if hasAudio { transport.send(.goodbye(ssrcs: [ssrcs.audio]), track: 1) }
        transport.close()
        onEnd()
    }
}

func wallClock() -> Double {
    var spec = timespec()
    clock_gettime(CLOCK_REALTIME, &spec)
    return Double(spec.tv_sec) + Double(spec.tv_nsec) / 1e9
}

#if canImport(Glibc)
import Glibc
#endif
