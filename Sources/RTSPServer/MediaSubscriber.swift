import DequeModule
import Dispatch
import MediaCore
import NIOCore
import RTSP
import Synchronization

/// One player of one stream: sends the RTP payloads its stream made (shared by every player)
/// under its own SSRCs, sequence numbers and timestamp bases, sends RTCP sender reports, and, when its backlog passes the
/// limit, skips everything up to the next IDR so a slow player only hurts itself.
///
/// A new player starts on the cached GOP's IDR at once and catches up to the live edge at
/// `PlayerTimeline.speed` times real time, paced on its connection's event loop, with timestamps
/// that advance as fast as the pictures are sent (see `PlayerTimeline`).
final class MediaSubscriber: Sendable {
    private let transport: PlayerTransport
    private let state: Mutex<State>
    /// Held from numbering a picture's (or an audio frame's) packets to handing them to the
    /// transport. Pictures come from more than one thread: the current and the target stream's
    /// writers during a switch, the catch-up pacer. Numbered under `state` and sent after it, a
    /// target's IDR could overtake the current rung's last picture, and the player saw sequence
    /// numbers and timestamps go back (seen once in CI).
    private let delivery = Mutex<Void>(())
    private let onEnd: @Sendable () -> Void
    let hasVideo: Bool
    let hasAudio: Bool
    /// Which of its stream's audio the player takes: AAC (RTSP) or Opus (browsers).
    let audioFeed: AudioFeed
    enum AudioFeed { case aac, opus }
    /// Which of the job's Opus renditions a browser player gets (`BrowserAudioChoice`): read at
    /// each packet, so a change takes effect at the next 20 ms.
    private let lightAudio = Atomic<Bool>(false)
    var audioRendition: BrowserAudioRendition {
        get { lightAudio.load(ordering: .relaxed) ? .light : .full }
        set { lightAudio.store(newValue == .light, ordering: .relaxed) }
    }

    /// Backlog past which this player skips to the next IDR.
    let maximumBacklog: Int
    /// A catch-up its transport paces (a WebRTC viewer's pacer): the next picture is handed over
    /// only while the transport holds less than this many bytes, and its timestamp is when it
    /// was handed over (`PlayerTimeline.video(_:handedOverAfter:)`); a move to another rung may
    /// end it. Nil: the catch-up runs at the timeline's speed, as RTSP players take it.
    let pacedCatchUp: Int?
    static let senderReportInterval: UInt64 = 5_000_000_000
    /// The first reports go a second apart: a receiver maps RTP time to NTP only from its second
    /// report on (libwebrtc's `RtpToNtpEstimator` fits a line through two or more), so with 5 s
    /// between them Chromium had no lip sync, and no playout time in `getStats`, for 6 s.
    static let firstReportInterval: UInt64 = 1_000_000_000
    static let firstReports = 3

    struct State {
        var video: RTPSequencer
        var audio: RTPSequencer
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
        var reportsSent = 0
        /// NTP time (Unix seconds) of media time zero, fixed at the first picture sent. Sender reports
        /// map RTP time to NTP along the media timeline, not the wall clock: a publisher's
        /// interruption pauses the timeline, and a report that counted it would make players jump.
        var epoch: Double?
        var audioRate = 0
        var timeline = PlayerTimeline()
        /// Pictures waiting to be sent while catching up, oldest first, and their bytes.
        var pending = Deque<SharedPicture>()
        var pendingBytes = 0
        /// Uptime (ns) when the catch-up started, and the source ticks of its first picture.
        var catchUpStart: (uptime: UInt64, ticks: Int64)?
        /// Uptime (ns) when the last picture was handed to the transport.
        var lastHandedOver: UInt64?
        /// Added to its stream, not yet given the cached GOP: live pictures wait.
        var joining = true
        var lastSentTicks: Int64?
        /// The latest presentation time sent: with B-frames it is not the last picture's, and a
        /// switch must land after it or the player sees time go back.
        var highestSentTicks: Int64?
        /// The stream whose pictures this player gets, and the one it is switching to.
        var current: LiveStream?
        var switchTarget: LiveStream?
        /// The current stream's pictures stop at its keyframe while a switch waits for the
        /// target's IDR at the same time (the ladder's IDRs are aligned), so the timeline never
        /// goes back; how many of its keyframes passed so while waiting.
        var heldAtKeyframes = 0
        /// An urgent switch asked the target's encoder for an IDR after these ticks: the current
        /// stream's pictures past them are not sent, so that IDR is the next picture the player gets.
        var holdAfterTicks: Int64?
        var switches = 0
    }

    /// How often the catch-up pacer sends what is due.
    static let catchUpTick = TimeAmount.milliseconds(4)

    init(transport: PlayerTransport, hasVideo: Bool, hasAudio: Bool, audioRate: Int = 0, audioFeed: AudioFeed = .aac,
         maximumBacklog: Int = 4 * 1024 * 1024, pacedCatchUp: Int? = nil, onEnd: @escaping @Sendable () -> Void) {
        self.audioFeed = audioFeed
        self.pacedCatchUp = pacedCatchUp
        self.transport = transport
        self.maximumBacklog = maximumBacklog
        self.hasVideo = hasVideo
        self.hasAudio = hasAudio
        self.onEnd = onEnd
        var generator = SystemRandomNumberGenerator()
        state = Mutex(State(
            video: RTPSequencer(payloadType: 96, ssrc: generator.next(), initialSequence: UInt16.random(in: 0...UInt16.max, using: &generator)),
            audio: RTPSequencer(payloadType: 97, ssrc: generator.next(), initialSequence: UInt16.random(in: 0...UInt16.max, using: &generator)),
            videoBase: generator.next(), audioBase: generator.next(), audioRate: audioRate))
    }

    /// For RTP-Info in the PLAY reply: each track's first sequence number and the RTP timestamp
    /// of the instant the player starts at (the first picture), so both tracks name the same instant.
    func rtpInfo(videoTicks: Int64) -> (video: (UInt16, UInt32), audio: (UInt16, UInt32)) {
        state.withLock {
            let audioTicks = $0.audioRate > 0 ? videoTicks.multipliedReportingOverflow(by: Int64($0.audioRate)).partialValue / 90000 : 0
            return (($0.video.sequenceNumber, $0.videoBase &+ UInt32(truncatingIfNeeded: videoTicks)),
                    ($0.audio.sequenceNumber, $0.audioBase &+ UInt32(truncatingIfNeeded: audioTicks)))
        }
    }

    /// Starts the player on a cached GOP: its IDR now, the rest paced (see the type's comment).
    /// Pictures the stream wrote since the player was added wait behind the GOP.
    func start(gop: [SharedPicture]) {
        if hasVideo, let first = gop.first { deliver(first) }
        let (needsPacing, leftovers): (Bool, Deque<SharedPicture>) = state.withLock { state in
            state.joining = false
            let rest = gop.dropFirst()
            state.pending.insert(contentsOf: rest, at: 0)
            state.pendingBytes += rest.reduce(0) { $0 + $1.bytes }
            guard hasVideo, state.started, !state.pending.isEmpty, let first = gop.first else {
                // Nothing to catch up on: what waited goes out as it is (from its first IDR).
                defer {
                    state.pending = []
                    state.pendingBytes = 0
                }
                state.timeline.finishCatchUp(lastSource: state.lastSentTicks)
                return (false, state.pending)
            }
            state.catchUpStart = (transport.clock.nanoseconds, first.ticks)
            return (true, [])
        }
        for picture in leftovers { deliver(picture) }
        guard needsPacing else { return }
        transport.eventLoop.scheduleRepeatedTask(initialDelay: Self.catchUpTick, delay: Self.catchUpTick) { [self] task in
            if !sendDuePictures() { task.cancel() }
        }
    }

    /// The player left (PAUSE, TEARDOWN) while catching up: what it was still owed is dropped.
    func stopCatchUp() {
        state.withLock { state in
            state.pending = []
            state.pendingBytes = 0
            state.joining = false
        }
    }

    /// Sends the held-back pictures whose catch-up time has come; false once none are left.
    private func sendDuePictures() -> Bool {
        let now = transport.clock.nanoseconds
        // Read before the lock: the transport has a lock of its own.
        let held = pacedCatchUp == nil ? 0 : transport.pendingBytes
        let due: [SharedPicture] = state.withLock { state in
            guard let start = state.catchUpStart else { return [] }
            var count = 0
            if let pacedCatchUp {
                var room = pacedCatchUp - held
                while count < state.pending.count, room > 0 {
                    room -= state.pending[count].bytes
                    count += 1
                }
            } else {
                let elapsedTicks = Int64(Double(now &- start.uptime) * 90000 / 1e9)
                while count < state.pending.count, (state.pending[count].ticks &- start.ticks) / state.timeline.speed <= elapsedTicks { count += 1 }
            }
            let due = Array(state.pending.prefix(count))
            state.pending.removeFirst(count)
            state.pendingBytes -= due.reduce(0) { $0 + $1.bytes }
            return due
        }
        for picture in due { deliver(picture) }
        return state.withLock { state in
            // A move ended it (a paced catch-up).
            guard state.catchUpStart != nil else { return false }
            // A paced catch-up with a move under way is ended by the move's IDR (`endPacedCatchUp`).
            guard state.pending.isEmpty, pacedCatchUp == nil || state.switchTarget == nil else { return true }
            state.timeline.finishCatchUp(lastSource: state.lastSentTicks)
            state.catchUpStart = nil
            return false
        }
    }

    var ssrcs: (video: UInt32, audio: UInt32) { state.withLock { ($0.video.ssrc, $0.audio.ssrc) } }
    var switches: Int { state.withLock { $0.switches } }
    /// The stream the player gets now.
    var currentStream: LiveStream? { state.withLock { $0.current } }

    func bind(to stream: LiveStream) {
        state.withLock { $0.current = stream }
    }

    // MARK: Switching rungs

    /// Moves the player to `target`, another stream of its ladder, at `target`'s next IDR: the
    /// same RTP session goes on (SSRC, sequence numbers, the timeline; SPS/PPS in-band before the
    /// IDR). False while the player is still starting or catching up, or already there.
    /// Whether a switch can start now: the player has started, caught up, and is not switching.
    var isSwitchable: Bool {
        state.withLock { hasVideo && $0.started && !$0.joining && ($0.catchUpStart == nil || pacedCatchUp != nil) && $0.switchTarget == nil }
    }

    /// Drops what comes until the next IDR (a player too far behind live).
    func skipToNextKeyframe() {
        state.withLock { $0.skipping = true }
    }

    /// A player too far behind live skips ahead. Its transport drops what it holds before the
    /// newest keyframe there that has waited less than `age`, and the player goes on from that
    /// keyframe: true. Where there is none, or the player is still starting or catching up (what
    /// its catch-up still holds would follow), everything held is dropped and the player waits
    /// for the next IDR: false. Under `delivery`, so no picture reaches the transport between
    /// its drop and the skip.
    func skipToLiveEdge(keepingKeyframeYoungerThan age: Double) -> Bool {
        delivery.withLock { _ in
            let settled = state.withLock { $0.started && !$0.joining && $0.catchUpStart == nil && !$0.skipping }
            if settled, transport.dropQueued(keepingKeyframeYoungerThan: age) { return true }
            state.withLock { $0.skipping = true }
            if !settled { transport.dropQueued(paddingOnly: false) }
            return false
        }
    }

    /// With `flush`, the current rung's pictures stop at once rather than at its next keyframe:
    /// a player that is already behind gets nothing more of it.
    /// With `urgent`, the target's encoder is asked for an IDR after what the player has had,
    /// rather than the switch waiting up to a keyframe interval for the grid's (a player whose
    /// link no longer carries its rung).
    @discardableResult
    func switchTo(_ target: LiveStream, flush: Bool = false, urgent: Bool = false) -> Bool {
        let replaced: (LiveStream?, Int64?)? = state.withLock { state in
            guard hasVideo, state.started, !state.joining, state.catchUpStart == nil || pacedCatchUp != nil, let current = state.current,
                  current !== target else { return nil }
            defer {
                state.switchTarget = target
                state.heldAtKeyframes = flush ? 1 : 0
                // What a paced catch-up still holds of the current rung stops with it.
                if flush, pacedCatchUp != nil, state.catchUpStart != nil {
                    state.pending.removeAll()
                    state.pendingBytes = 0
                }
            }
            return (state.switchTarget, state.highestSentTicks)
        }
        guard let (replaced, sent) = replaced else { return false }
        if let replaced, replaced !== target { replaced.detach(self) }
        target.attachSwitching(self)
        if urgent, let sent, target.requestKeyframe(afterTicks: sent) {
            state.withLock { state in if state.switchTarget === target { state.holdAfterTicks = sent } }
        }
        return true
    }

    /// What a picture from `stream` means for this player now.
    private enum Route {
        case deliver
        case drop
        /// The target's IDR: the switch happens with it; the stream left is detached.
        case switchHere(left: LiveStream?)
        /// The switch was given up (the target's IDR did not come): the stream it was going to is detached.
        case cancel(target: LiveStream?)
    }

    /// - Parameter targetIDR: the switch target's latest IDR (its ticks), read before the lock.
    private func route(_ stream: LiveStream, ticks: Int64, isKeyframe: Bool, targetIDR: Int64?) -> Route {
        state.withLock { state in
            if stream === state.current {
                guard state.switchTarget != nil else { return .deliver }
                let pastHold = state.holdAfterTicks.map { ticks > $0 } ?? false
                guard isKeyframe || state.heldAtKeyframes > 0 || pastHold else { return .deliver }
                if !isKeyframe, pastHold, state.heldAtKeyframes == 0 { return .drop }
                // The target's IDR for this point of the grid already went by (it runs ahead: a
                // passed-through top has no encoder's latency, a small rung encodes faster) before
                // the switch was asked for. Holding this GOP would leave the player with nothing
                // until the target's next IDR, a keyframe interval later (seen in Chromium: 2 s
                // frozen moving up to the top). This GOP goes on; the switch takes the next IDR.
                if isKeyframe, !pastHold, state.heldAtKeyframes == 0, let targetIDR, targetIDR >= ticks { return .deliver }
                if isKeyframe { state.heldAtKeyframes += 1 }
                // Two keyframes of the current stream without the target's: stay where it is.
                guard state.heldAtKeyframes > 2 else { return .drop }
                let target = state.switchTarget
                state.switchTarget = nil
                state.heldAtKeyframes = 0
                state.holdAfterTicks = nil
                return .cancel(target: target)
            }
            guard stream === state.switchTarget, isKeyframe, ticks > (state.highestSentTicks ?? .min) else { return .drop }
            let left = state.current
            state.current = stream
            state.switchTarget = nil
            state.heldAtKeyframes = 0
            state.holdAfterTicks = nil
            state.switches += 1
            return .switchHere(left: left)
        }
    }
    var droppedFrames: Int { state.withLock { $0.dropped } }
    /// Seconds of media a catch-up still holds back: how far behind the live edge its next
    /// picture is (0 once caught up).
    var catchUpLag: Double {
        state.withLock { state in
            guard state.catchUpStart != nil, let first = state.pending.first, let last = state.pending.last else { return 0 }
            return Double(last.ticks &- first.ticks) / 90000
        }
    }
    /// Bytes held for this player: queued to its transport and waiting in its catch-up.
    var heldBytes: Int { transport.pendingBytes + state.withLock { $0.pendingBytes } }

    func sendVideo(_ picture: SharedPicture, from stream: LiveStream) {
        guard hasVideo else { return }
        // Only a keyframe of the current stream asks where the target is (the target's lock, not under ours).
        let targetIDR = picture.isKeyframe ? state.withLock({ $0.switchTarget }).map { $0.startTicks.video } : nil
        switch route(stream, ticks: picture.ticks, isKeyframe: picture.isKeyframe, targetIDR: targetIDR) {
        case .deliver:
            break
        case .drop:
            return
        case let .switchHere(left):
            left?.detach(self)
            endPacedCatchUp(at: picture.ticks)
        case let .cancel(target):
            target?.detach(self)
        }
        // While catching up, live pictures queue behind the cached ones, so order holds.
        let queued: Bool = state.withLock { state in
            guard state.joining || state.catchUpStart != nil else { return false }
            if state.pendingBytes + picture.bytes > maximumBacklog {
                // Catching up would hold too much: give it up and restart at the next IDR.
                state.pending.removeAll()
                state.pendingBytes = 0
                state.catchUpStart = nil
                state.timeline.finishCatchUp(lastSource: state.lastSentTicks)
                state.skipping = true
                state.dropped += 1
                return true
            }
            state.pending.append(picture)
            state.pendingBytes += picture.bytes
            return true
        }
        if !queued { deliver(picture) }
    }

    private func deliver(_ picture: SharedPicture) {
        delivery.withLock { _ in deliverInOrder(picture) }
    }

    /// A move lands during a paced catch-up: what the catch-up still held (the old rung's) is
    /// dropped, and time goes on from the last picture handed over as the wall clock did.
    private func endPacedCatchUp(at ticks: Int64) {
        let now = transport.clock.nanoseconds
        state.withLock { state in
            guard pacedCatchUp != nil, state.catchUpStart != nil else { return }
            state.pending.removeAll()
            state.pendingBytes = 0
            state.catchUpStart = nil
            let elapsed = state.lastHandedOver.map { Int64(Double(now &- $0) * 90000 / 1e9) } ?? 0
            state.timeline.finishCatchUp(continuingAt: ticks, after: elapsed)
        }
    }

    /// `deliver`'s work, under `delivery`.
    private func deliverInOrder(_ picture: SharedPicture) {
        let (sourceTicks, isKeyframe) = (picture.ticks, picture.isKeyframe)
        let backlog = transport.pendingBytes
        let now = transport.clock.nanoseconds
        var outputTicks: Int64 = 0
        let packets: [RTPPacket]? = state.withLock { state in
            if !state.started {
                // A player's first picture must be decodable.
                guard isKeyframe else { return nil }
                state.started = true
            }
            if backlog > maximumBacklog { state.skipping = true }
            if state.skipping {
                guard isKeyframe, backlog < maximumBacklog / 2 else {
                    state.dropped += 1
                    return nil
                }
                state.skipping = false
            }
            let ticks: Int64
            if pacedCatchUp != nil, let start = state.catchUpStart {
                ticks = state.timeline.video(sourceTicks, handedOverAfter: Int64(Double(now &- start.uptime) * 90000 / 1e9))
            } else {
                ticks = state.timeline.video(sourceTicks)
            }
            state.lastHandedOver = now
            outputTicks = ticks
            state.lastSentTicks = sourceTicks
            state.highestSentTicks = max(state.highestSentTicks ?? sourceTicks, sourceTicks)
            // The timeline's NTP is when the node had each picture, so sender reports give players
            // the pictures' real capture times. Fixed at the first picture sent live: the cached
            // GOP goes out faster than real time on a compressed timeline (`PlayerTimeline`), and
            // an epoch taken from it would date every later picture early by what catching up saved.
            if state.epoch == nil, !state.timeline.isCatchingUp { state.epoch = picture.writtenAt - Double(ticks) / 90000 }
            let packets = state.video.packets(picture.payloads, timestamp: state.videoBase &+ UInt32(truncatingIfNeeded: ticks))
            state.videoPackets &+= UInt32(packets.count)
            state.videoOctets &+= UInt32(truncatingIfNeeded: picture.bytes)
            return packets
        }
        guard let packets else { return }
        transport.send(packets, track: 0)
        reportIfDue(ticks: outputTicks)
    }

    func sendAudio(_ payload: ByteBuffer, ticks: Int64, from stream: LiveStream) {
        guard hasAudio else { return }
        delivery.withLock { _ in sendAudioInOrder(payload, ticks: ticks, from: stream) }
    }

    /// `sendAudio`'s work, under `delivery`: the stream left and the one switched to both write audio.
    private func sendAudioInOrder(_ payload: ByteBuffer, ticks: Int64, from stream: LiveStream) {
        let packet: RTPPacket? = state.withLock { state in
            // Every rung carries the same audio: it comes from the stream the player gets now.
            guard state.current == nil || stream === state.current else { return nil }
            // Audio joins once the pictures have caught up with it.
            guard state.started, !state.skipping, !state.timeline.isCatchingUp else { return nil }
            let output = state.timeline.audio(ticks, rate: state.audioRate)
            guard let packet = state.audio.packets([payload], timestamp: state.audioBase &+ UInt32(truncatingIfNeeded: output)).first else { return nil }
            state.audioPackets &+= 1
            state.audioOctets &+= UInt32(truncatingIfNeeded: packet.payload.readableBytes)
            return packet
        }
        guard let packet else { return }
        transport.send([packet], track: 1)
    }

    /// RTCP sender reports every few seconds for each track, on one NTP timeline, so players can
    /// synchronise audio with video. `ticks` are this player's output ticks.
    private func reportIfDue(ticks: Int64) {
        let now = transport.clock.nanoseconds
        let reports: [(RTCPPacket, Int)] = state.withLock { state in
            let interval = state.reportsSent < Self.firstReports ? Self.firstReportInterval : Self.senderReportInterval
            guard let epoch = state.epoch, now - state.lastReport >= interval else { return [] }
            state.lastReport = now
            state.reportsSent += 1
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

    /// Leaves every stream it is on (PAUSE, TEARDOWN, session end).
    func leave() {
        let (current, target) = state.withLock { state -> (LiveStream?, LiveStream?) in
            defer { state.switchTarget = nil }
            return (state.current, state.switchTarget)
        }
        target?.detach(self)
        current?.unsubscribe(self)
    }

    func streamEnded(from stream: LiveStream) {
        // The stream it was switching to ended: it stays where it is.
        let isCurrent: Bool = state.withLock { state in
            if stream === state.switchTarget, stream !== state.current {
                state.switchTarget = nil
                return false
            }
            return true
        }
        guard isCurrent else { return }
        streamEnded()
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
