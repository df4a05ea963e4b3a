import Dispatch
import Glibc
import Logging
import MediaCore
import NIOCore
import RTSP
import RTSPServer
import Synchronization
import WebRTC
import WebRTCTransport

/// One WHEP viewer: its ICE credentials, its DTLS association and SRTP, and the `PacketPlayer`
/// that feeds it its rung once DTLS is up. DTLS and SRTP are used under the viewer's lock:
/// datagrams arrive on the port's event loop, media from the stream's writer.
public final class WebRTCViewer: Sendable {
    public struct Status: Sendable {
        public var id: String
        public var path: String
        public var state: String
        public var peer: String?
        public var packetsSent: Int
        public var bytesSent: Int
        public var nacks: Int
        public var retransmissions: Int
        /// Resends asked for and not made: over the viewer's `RetransmissionBudget`.
        public var retransmissionsDeclined: Int
        /// From the browser's receiver reports: round trip (s) and the fraction of video lost.
        public var roundTrip: Double?
        public var fractionLost: Double?
        public var pictureLossIndications: Int
        public var receiverEstimate: UInt64?
        /// The rung it is on now, its moves, and the adaptation's estimate (bit/s).
        public var level: Int?
        /// Moved between rungs by its link (false: pinned with `?abr=off`).
        public var adaptive: Bool
        public var switches: Int
        public var estimate: Double?
        /// The least playout delay asked of the browser (s; nil: it did not offer the extension).
        public var playoutDelay: Double?
        /// The job's Opus rendition it gets (nil: no audio), `BrowserAudioRendition`.
        public var audio: BrowserAudioRendition?
    }

    let id: String
    let path: String
    let pinned: Bool
    let credentials: ICELiteResponder.Credentials
    let remoteAddress: String
    private let service: WebRTCService
    private let clock: NodeClock
    private let channel: Channel
    private let answer: WHEPAnswer
    private let plan: WHEPAnswer.Plan
    private let logger: Logger
    private let state: Mutex<State>

    struct State {
        var dtls: DTLSSession
        var outbound: SRTPSession?
        var inbound: SRTPSession?
        var peer: SocketAddress?
        var nominated = false
        var player: PacketPlayer?
        var ended = false
        var created: UInt64
        var lastHeard: UInt64
        var transportSequence: UInt16 = 0
        /// Media's RTP sequence numbers, given as packets leave the pacer (none missing for what it drops).
        var sequenceNumbers = LeavingSequenceNumbers()
        var packetsSent = 0
        var bytesSent = 0
        var nacks = 0
        var pictureLossIndications = 0
        var receiverEstimate: UInt64?
        var phase = "ice"
        var retransmission: Scheduled<Void>?
        /// Transport-wide feedback turned into what the switching policy takes.
        var link = TransportFeedbackLink()
        var retransmissionSequence: UInt16 = UInt16.random(in: 0...UInt16.max)
        var paddingBytes = 0
        /// Padding a probe asked for that its slices have not sent yet (bytes).
        var paddingOwed = 0
        /// Video sent lately, for NACKs, and how many packets were resent.
        var history = RetransmissionHistory()
        var retransmissions = 0
        /// Media waiting to leave at the pace of the link (see `MediaPacer`).
        var pacer = MediaPacer()
        /// What the browser is asked to hold pictures for, so keyframes cross the link in time.
        var playoutDelay = KeyframePlayoutDelay()
        /// The minimum last sent, for the debug trace of its changes.
        var lastPlayoutDelayAsked = -1.0
        var retransmissionBudget = RetransmissionBudget()
        var retransmissionsDeclined = 0
        var pacing = false
        /// The sender reports sent lately (NTP's middle 32 bits, uptime s, and the queue ahead of
        /// them on the path, s), for the round trip the browser's reports then give (RFC 3550 §6.4.1).
        var reportsSent: [(ntp: UInt32, at: Double, queueAhead: Double)] = []
        var roundTrip: Double?
        /// The least round trip seen less the queue its report met on the path: the path's own
        /// (the congestion window's). A viewer's first reports come a second or so in, when a
        /// start's catch-up or a fall has filled the path's queue: taken whole, a start's first
        /// round trip read 0.24 s on a loopback path (a 30-packet queue of 1.15 Mbit/s), and the
        /// window it sized overfilled that queue for two seconds (run EQ).
        var leastRoundTrip: Double?
        var fractionLost: Double?
        /// What the viewer's link carries beside its rung's video, for the switching policy.
        var wireCost = WireCostMeter()
    }

    init(service: WebRTCService, channel: Channel, path: String, pinned: Bool, plan: WHEPAnswer.Plan, answer: WHEPAnswer,
         remoteAddress: String) throws {
        var generator = SystemRandomNumberGenerator()
        id = WebRTCService.token(16, using: &generator)
        self.service = service
        clock = service.configuration.clock
        self.channel = channel
        self.path = path
        self.pinned = pinned
        self.plan = plan
        self.answer = answer
        self.remoteAddress = remoteAddress
        credentials = .init(localUfrag: plan.iceUfrag, localPassword: plan.icePassword, remoteUfrag: answer.remoteUfrag)
        var logger = service.logger
        logger[metadataKey: "session"] = "\(id)"
        logger[metadataKey: "stream.guid"] = "\(path)"
        self.logger = logger
        let now = clock.nanoseconds
        state = Mutex(State(dtls: try DTLSSession(identity: service.identity), created: now, lastHeard: now))
    }

    var peerAddress: SocketAddress? { state.withLock { $0.peer } }

    /// A binding request that checked out, from `address`: the first such address (or a
    /// nominated one) becomes the viewer's. Returns the address it replaces (`.some(nil)` for
    /// none) when the viewer's address changed.
    func consent(from address: SocketAddress, nominated: Bool) -> SocketAddress?? {
        let changed: SocketAddress?? = state.withLock { state in
            state.lastHeard = clock.nanoseconds
            guard state.peer != address, state.peer == nil || (nominated && !state.nominated) else { return nil }
            let previous = state.peer
            state.peer = address
            state.nominated = state.nominated || nominated
            if state.phase == "ice" { state.phase = "dtls" }
            return .some(previous)
        }
        // Wall-clock traces of the setup's steps, to tell where a slow first picture's time went.
        if changed != nil, logger.logLevel <= .debug {
            logger.debug("WebRTC viewer's ICE consent", metadata: ["at": "\(Self.wallClock())", "nominated": "\(nominated)"])
        }
        return changed
    }

    func receiveDTLS(_ datagram: [UInt8]) {
        let (outputs, connected, peer) = state.withLock { state -> ([[UInt8]], Bool, SocketAddress?) in
            state.lastHeard = clock.nanoseconds
            let wasHandshaking = state.dtls.state == .handshaking
            let outputs = state.dtls.receive(datagram)
            return (outputs, wasHandshaking && state.dtls.state == .connected, state.peer)
        }
        if let peer { service.send(outputs, to: peer) }
        if logger.logLevel <= .debug, !outputs.isEmpty || connected {
            logger.debug("WebRTC viewer's DTLS flight", metadata: [
                "at": "\(Self.wallClock())", "answered": "\(outputs.count)", "peerKnown": "\(peer != nil)", "connected": "\(connected)"])
        }
        scheduleRetransmission()
        if connected { startMedia() }
        switch state.withLock({ $0.dtls.state }) {
        case let .failed(reason):
            end(reason: reason)
        case .closed:
            // A browser that closes its peer connection (a tab closed, `pc.close()`) says so with
            // a close_notify, often without the WHEP DELETE: its media stops now, not after the
            // 30 s of silence the session would otherwise wait for.
            end(reason: "the viewer closed its DTLS session")
        case .handshaking, .connected:
            break
        }
    }

    /// The handshake's flights are resent on OpenSSL's timer until the browser answers.
    private func scheduleRetransmission() {
        let delay = state.withLock { $0.dtls.retransmissionDelay }
        guard let delay else { return }
        let task = channel.eventLoop.scheduleTask(in: .milliseconds(Int64(delay * 1000) + 1)) { [self] in
            let (outputs, peer) = state.withLock { state -> ([[UInt8]], SocketAddress?) in
                guard state.dtls.state == .handshaking, !state.ended else { return ([], nil) }
                return (state.dtls.retransmit(), state.peer)
            }
            if let peer { service.send(outputs, to: peer) }
            if !outputs.isEmpty {
                logger.debug("WebRTC viewer's DTLS flight resent on the timer", metadata: ["at": "\(Self.wallClock())", "after": "\(delay)"])
                scheduleRetransmission()
            }
        }
        state.withLock {
            $0.retransmission?.cancel()
            $0.retransmission = task
        }
    }

    private func startMedia() {
        let keys: SRTPKeys
        do {
            keys = try state.withLock { try $0.dtls.srtpKeys(expectedPeerFingerprint: answer.remoteFingerprint.value) }
        } catch {
            end(reason: "\(error)")
            return
        }
        do {
            let outbound = try SRTPSession(profile: keys.profile, keyAndSalt: keys.keyAndSalt(ofClient: false), direction: .outbound)
            let inbound = try SRTPSession(profile: keys.profile, keyAndSalt: keys.keyAndSalt(ofClient: true), direction: .inbound)
            state.withLock {
                $0.outbound = outbound
                $0.inbound = inbound
                $0.phase = "playing"
            }
        } catch {
            end(reason: "\(error)")
            return
        }
        guard let stream = service.registry.existingStream(path), stream.isPlayable else {
            end(reason: "the stream ended before DTLS finished")
            return
        }
        // Transport-wide feedback where the browser sends it (Chromium, Firefox); else its
        // receiver reports, capped by its REMB (aiortc, older stacks).
        let feedback: PacketPlayer.Feedback = answer.transportSequenceExtension != nil ? .perPacket : .receiverReports
        let player = PacketPlayer(sink: ViewerSink(viewer: self), opusAudio: answer.audioPayloadType != nil, feedback: feedback,
                                  pacedCatchUp: Self.catchUpHeld, clock: clock) { [weak self] in
            self?.end(reason: "stream ended")
        }
        state.withLock { $0.player = player }
        // A rung of a ladder follows the viewer's link unless the viewer pinned it (`?abr=off`).
        // Only rungs its decoder takes (a passed-through High top is no rung for a Baseline-only
        // peer) and WebRTC can carry (no B-frames).
        let ladder = stream.ladder?.filter { _, path in
            guard let rung = service.registry.existingStream(path), rung.webRTCRefusal == nil,
                  let sps = rung.video?.sps, let profile = H264ProfileLevel(sps: sps), let decoder = answer.videoDecoder else { return false }
            return profile.isDecodable(by: decoder)
        }
        if !pinned, let ladder, ladder.count > 1 {
            player.adapt(registry: service.registry, ladder: ladder, logger: logger) { [service, id, path] from, to, reason in
                service.viewerSwitched(id: id, requested: path, from: from, to: to, reason: reason, ladder: ladder)
            }
        }
        player.play(stream)
        logger.info("WebRTC viewer playing", metadata: ["srtp.profile": "\(keys.profile)", "webrtc.peer": "\(peerAddress.map { "\($0)" } ?? "?")"])
    }

    func receiveSRTP(_ packet: [UInt8]) {
        guard packet.count >= 4 else { return }
        // RTCP's packet types are 192–223 in the second byte (RFC 5761 §4); media from a viewer is not expected.
        guard packet[1] >= 192, packet[1] <= 223 else { return }
        let feedback: [RTCPFeedback]? = state.withLock { state in
            guard let inbound = state.inbound, let clear = try? inbound.unprotect(rtcp: packet) else { return nil }
            state.lastHeard = clock.nanoseconds
            return RTCPFeedback.parseCompound(clear)
        }
        guard let feedback else {
            service.refusals.log(logger, "SRTCP refused (forged, replayed or before DTLS)", kind: "srtcp")
            return
        }
        let now = clock.nanoseconds
        var blocked = false
        let (observations, player, lost, reports) = state.withLock {
            state -> ([LinkObservation], PacketPlayer?, [UInt16], [(RTCPPacket.ReportBlock, Int)]) in
            var observations: [LinkObservation] = []
            var lost: [UInt16] = []
            var reports: [(RTCPPacket.ReportBlock, Int)] = []
            for item in feedback {
                switch item {
                case let .nack(ssrc, sequences):
                    state.nacks += sequences.count
                    if ssrc == plan.videoSSRC { lost += sequences }
                case .pictureLoss, .fullIntraRequest: state.pictureLossIndications += 1  // the rung's next grid IDR answers it
                case let .receiverEstimate(bitRate, _): state.receiverEstimate = bitRate
                case let .report(.receiverReport(_, blocks)):
                    for block in blocks {
                        if block.ssrc == plan.audioSSRC { reports.append((block, 1)) }
                        guard block.ssrc == plan.videoSSRC else { continue }
                        reports.append((block, 0))
                        state.fractionLost = Double(block.fractionLost) / 256
                        if block.lastSenderReport != 0, let sent = state.reportsSent.first(where: { $0.ntp == block.lastSenderReport }) {
                            let roundTrip = Double(now) / 1e9 - sent.at - Double(block.delaySinceLastSenderReport) / 65536
                            if roundTrip >= 0, roundTrip < 60 {
                                state.roundTrip = roundTrip
                                let own = max(0, roundTrip - sent.queueAhead)
                                state.leastRoundTrip = min(state.leastRoundTrip ?? own, own)
                            }
                        }
                    }
                case let .transportFeedback(report):
                    guard var observation = state.link.receive(report, at: Double(now) / 1e9) else { break }
                    // Video held behind a full congestion window is as late as video queued on
                    // the path: the lag the policy moves down or skips on is both, and what a
                    // catch-up still holds back beyond it (added below, outside this lock).
                    if state.pacer.windowBlocked {
                        observation.backlogSeconds += state.pacer.oldestVideoWait(at: Double(now) / 1e9)
                        blocked = true
                    }
                    observations.append(observation)
                default: break
                }
            }
            return (observations, state.player, lost, reports)
        }
        let lag = blocked ? player?.catchUpLag ?? 0 : 0
        for var observation in observations {
            observation.backlogSeconds += lag
            player?.observe(observation)
        }
        if !observations.isEmpty, let estimate = player?.estimate {
            state.withLock { $0.pacer.linkRate = $0.link.carriedRate(estimate: estimate) }
        }
        if answer.transportSequenceExtension == nil, let player {
            let estimate = state.withLock { $0.receiverEstimate }.map(Double.init)
            for (block, track) in reports { player.receiverReport(block, track: track, receiverEstimate: estimate) }
        }
        if !lost.isEmpty { retransmit(lost) }
        if logger.logLevel <= .debug, feedback.contains(where: { if case .pictureLoss = $0 { true } else if case .fullIntraRequest = $0 { true } else { false } }) {
            logger.debug("WebRTC viewer asked for a picture (PLI/FIR)", metadata: ["at": "\(Self.wallClock())"])
        }
    }

    /// Wall-clock seconds for debug traces, to line them up with the bench's link changes.
    static func wallClock() -> String {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let milliseconds = String(now.tv_nsec / 1_000_000)
        return "\(now.tv_sec).\(String(repeating: "0", count: 3 - milliseconds.count))\(milliseconds)"
    }

    /// Answers a NACK from the history: on the RTX stream where negotiated (RFC 4588), else the
    /// packet again as it was. Queued in the pacer after the audio and ahead of the video
    /// waiting (it is late already), under the congestion window, as libwebrtc's pacer sends
    /// resends: sent at once into a path whose queue had overflowed they were lost again, and a
    /// viewer moved down lost its new rung's first IDR that way (run AQ: 3 s frozen until the
    /// next grid IDR). Only as much as `RetransmissionBudget` lets through: resends must not
    /// add to a full link.
    private func retransmit(_ sequences: [UInt16]) {
        let extensionID = answer.transportSequenceExtension
        let paceIn = state.withLock { state -> Double? in
            guard state.peer != nil, state.outbound != nil, !state.ended else { return nil }
            let now = clock.seconds
            let held = state.history.resend(sequences, at: now)
            var declined = 0
            defer {
                if logger.logLevel <= .debug {
                    logger.debug("WebRTC viewer NACK", metadata: ["at": "\(Self.wallClock())", "asked": "\(sequences.count)", "held": "\(held.count)",
                                                                 "declined": "\(declined)", "inFlight": "\(state.link.inFlightBytes)",
                                                                 "window": "\(Self.congestionWindow(state, at: now))"])
                }
            }
            for original in held {
                guard state.retransmissionBudget.allow(bytes: original.payload.readableBytes + 40, mediaRate: state.pacer.mediaRate, at: now) else {
                    state.retransmissionsDeclined += 1
                    declined += 1
                    continue
                }
                var packet = original
                var payloadType = answer.videoPayloadType, ssrc = plan.videoSSRC
                if let rtxType = answer.retransmissionPayloadType {
                    state.retransmissionSequence &+= 1
                    packet = RetransmissionHistory.retransmission(of: original, payloadType: rtxType, ssrc: plan.retransmissionSSRC,
                                                                  sequence: state.retransmissionSequence)
                    (payloadType, ssrc) = (rtxType, plan.retransmissionSSRC)
                }
                let header = Self.header(packet, payloadType: payloadType, ssrc: ssrc, transportSequence: extensionID.map { ($0, 0) })
                state.pacer.enqueue(.init(header: header, payload: packet.payload, carriesTransportSequence: extensionID != nil,
                                          isRetransmission: true), at: now)
            }
            return Self.paceIn(&state, at: now)
        }
        if let paceIn { service.pace(self, in: paceIn) }
    }

    /// Media for the browser: the answered payload type and SSRC (video or Opus), the
    /// transport-wide sequence number where negotiated, then SRTP, then the pacer.
    func sendMedia(_ packets: [RTPPacket], track: Int) {
        let payloadType: UInt8, ssrc: UInt32, extensionID: Int?
        if track == 0 {
            (payloadType, ssrc, extensionID) = (answer.videoPayloadType, plan.videoSSRC, answer.transportSequenceExtension)
        } else {
            guard let audioType = answer.audioPayloadType, let audioSSRC = plan.audioSSRC else { return }
            (payloadType, ssrc, extensionID) = (audioType, audioSSRC, answer.audioTransportSequenceExtension)
        }
        let paceIn = state.withLock { state -> Double? in
            guard state.outbound != nil, state.peer != nil, !state.ended else { return nil }
            let now = clock.seconds
            var playoutDelay: (id: Int, minimum: Double, maximum: Double)?
            let keyframe = track == 0 && packets.first.map { H264Packetizer.startsKeyframe($0.payload) } == true
            if track == 0, let id = answer.playoutDelayExtension {
                let bytes = packets.reduce(0) { $0 + $1.payload.readableBytes }
                if keyframe { state.playoutDelay.keyframe(bytes: bytes) }
                if let first = packets.first { state.playoutDelay.picture(bytes: bytes, timestamp: first.timestamp) }
                let drainRate = Self.drainRate(state)
                let wasAtOnce = state.playoutDelay.rendersAtOnce
                let queueAhead = state.link.queueAhead(at: now, drainRate: drainRate)
                let queueDrainRate = state.link.queueDrainRate(drainRate: drainRate)
                state.playoutDelay.update(drainRate: drainRate, pathQueue: queueAhead, queueDrainRate: queueDrainRate, at: now)
                if state.playoutDelay.rendersAtOnce != wasAtOnce {
                    logger.debug("WebRTC viewer's pictures rendered at once", metadata: [
                        "at": "\(Self.wallClock())", "atOnce": "\(!wasAtOnce)", "queueAhead": "\(queueAhead)",
                        "queueDrainRate": "\(queueDrainRate)", "pictureRate": "\(state.playoutDelay.pictureRate ?? 0)"])
                }
                let ask = state.playoutDelay.ask
                if logger.logLevel <= .debug, ask.minimum != state.lastPlayoutDelayAsked {
                    logger.debug("WebRTC viewer's playout delay asked", metadata: [
                        "at": "\(Self.wallClock())", "minimum": "\(ask.minimum)", "maximum": "\(ask.maximum)", "drainRate": "\(Int(drainRate))",
                        "keyframe": "\(keyframe)"])
                }
                playoutDelay = (id, ask.minimum, ask.maximum)
                state.lastPlayoutDelayAsked = ask.minimum
            }
            for (index, packet) in packets.enumerated() {
                let header = Self.header(packet, payloadType: payloadType, ssrc: ssrc, transportSequence: extensionID.map { ($0, 0) },
                                         playoutDelay: playoutDelay)
                // SRTP adds its tag: 16 bytes for AES-GCM, 10 for HMAC-SHA1-80; the larger serves both.
                let wire = header.count + packet.payload.readableBytes + 16
                if track == 0 {
                    state.wireCost.sentVideo(payload: packet.payload.readableBytes, wire: wire)
                } else {
                    state.wireCost.sentAudio(wire: wire, seconds: OpusPacket.duration(packet.payload.readableBytesView))
                }
                var item = MediaPacer.Item(header: header, payload: packet.payload, carriesTransportSequence: extensionID != nil, isVideo: track == 0)
                item.numberedAsItLeaves = true
                item.startsKeyframe = keyframe && index == 0
                state.pacer.enqueue(item, at: now)
            }
            return Self.paceIn(&state, at: now)
        }
        if let paceIn { service.pace(self, in: paceIn) }
    }

    /// Seconds until the pacer may let something go (nil: it holds nothing), for the service's
    /// pacing timer, which keeps the viewer until `releasePaced()` finds the pacer empty. Asked
    /// after every enqueue, not only by whoever finds the pacer idle: a picture that comes while
    /// the pacer holds only audio due later must not wait for that audio.
    private static func paceIn(_ state: inout State, at now: Double) -> Double? {
        guard let next = state.pacer.nextRelease(at: now) else { return nil }
        state.pacing = true
        return next - now
    }

    /// What the path is taken to drain at: the pacer's link rate (the estimate, held to what a
    /// queue drains at while feedback shows one: `TransportFeedbackLink.carriedRate`), or what
    /// arrived lately where more; but while feedback shows a queue, what arrived lately counts
    /// only up to what that feedback's packets arrived at (`queuedDeliveryRate`): the link is
    /// full, and that is its rate now. Without a queue, never under the estimate: one feedback of
    /// a few sparse packets reads low, and a window sized on a rate under the link's holds the
    /// media back (runs AL, AQ).
    static func drainRate(_ state: State) -> Double {
        var recent = state.link.recentDeliveryRate ?? 0
        if let queued = state.link.queuedDeliveryRate { recent = min(recent, queued) }
        return max(state.pacer.linkRate ?? 0, recent)
    }

    /// The most that may be on the path and not yet reported by feedback (bytes): what the path
    /// drains in its round trip (`roundTrip`), the 50–100 ms Chromium's feedback waits, and a queue
    /// of 0.15–0.2 s beyond; never under two full packets. Before the link has an estimate,
    /// `initialWindow`. Where media was lost lately, a queue no deeper than the path's went when
    /// it overflowed, less a fifth (`TransportFeedbackLink.queueAtLoss`), and no more than the path
    /// held then, less a margin (`TransportFeedbackLink.inFlightLimit`); but never under what the
    /// round trip and the feedback's wait take at the drain rate: less would hold the media under
    /// the link's rate. A 0.25 s queue over a router's 30 packets of 1.15 Mbit/s (0.25 s) kept it
    /// full, and the keyframes lost 20 % of a start's media for two seconds (runs EL–EP).
    static func congestionWindow(_ state: State, at now: Double) -> Int {
        guard state.pacer.linkRate != nil else { return Self.initialWindow }
        let roundTrip = Self.roundTrip(state)
        let bytesPerSecond = drainRate(state) / 8
        // Where media was lost lately, no deeper a queue than the path overflowed at, less a margin.
        var queue = Self.windowQueue
        if let deepest = state.link.queueAtLoss(at: now) { queue = min(queue, max(Self.feedbackWait, deepest * 0.8)) }
        var window = Int(bytesPerSecond * (roundTrip + queue))
        if let limit = state.link.inFlightLimit(at: now) {
            window = min(window, max(limit, Int(bytesPerSecond * (roundTrip + Self.feedbackWait))))
        }
        return max(Self.leastWindow, window)
    }

    /// The path's own round trip for the congestion window (seconds, at most 0.5): the least that
    /// receiver reports gave, less the queue their sender reports met; before the first report,
    /// the least that feedback gave (`TransportFeedbackLink.reportRoundTrip`); 0.1 before either.
    /// Receiver reports come a second or so in: until then the window took 0.1 s on a path of
    /// 1 ms, and a start whose wide link fell to 1.8 Mbit/s as its first picture showed had a
    /// window of 76 KB, 65 KB of it in flight against a 30-packet queue (36 KB), and lost 10 packets
    /// (run FD); four such starts lost 4–11 packets with this, 7–24 without (runs FJ, FK).
    static func roundTrip(_ state: State) -> Double {
        min(0.5, state.leastRoundTrip ?? state.link.reportRoundTrip ?? 0.1)
    }

    /// How long Chromium's transport-wide feedback waits before it reports (seconds, the most of
    /// its usual 50–100 ms): packets sent that long ago are on the path as far as the window knows.
    static let feedbackWait = 0.1

    /// Seconds beyond the round trip the congestion window holds: Chromium's feedback interval
    /// (50–250 ms) and a short queue. 0.12 s (run AI) was no better: Chromium's audio delay on a
    /// shaped link comes from the keyframes in the bottleneck, which a shorter window does not stop.
    /// Nor was the feedback's own longest spacing and 0.1 s, with feedback's round trip throughout
    /// (runs FF, FH): on the harsher model's own windows its 2010-09-29 froze 1.8 and 1.4 s beyond
    /// starved, main's 0.2 s (FG).
    static let windowQueue = 0.25
    static let leastWindow = 3000
    /// A new viewer's window until its first estimate: a top rung's first keyframe leaves at once
    /// (feedback then opens the window within 50–100 ms on a wide link), but the catch-up GOP
    /// behind it does not overflow a narrow link's queue. Without it, a viewer started on a
    /// 2.4 Mbit/s top over a 1.2 Mbit/s link lost 182 packets of that GOP and the first pictures of
    /// the rung it was moved to, and froze 2.2 s.
    static let initialWindow = 64 * 1024

    /// What the pacer may hold before the next picture of a new viewer's catch-up is handed to
    /// it (bytes): enough that the pacer never idles while the catch-up waits, little enough that
    /// a picture leaves within about 0.1 s of being handed over at 2 Mbit/s, so the catch-up's
    /// timestamps (when each picture was handed over) are when it reaches the browser.
    static let catchUpHeld = 24 * 1024

    /// Whether media waits in the pacer (the service's pacing timer keeps the viewer until not).
    var isPacing: Bool { state.withLock { $0.pacing } }

    /// Writes what the pacer lets go now at the end of `buffer`, the tick's, and says where
    /// (nil: nothing); `next` is the seconds until the pacer may let more go, nil once nothing
    /// waits. Called by the service's pacing timer on the port's event loop, which sends every
    /// viewer's datagrams in one flush.
    func releasePaced(into buffer: inout ByteBuffer) -> (next: Double?, written: WebRTCService.PacedDatagrams?) {
        let (written, next, droppedStale) = state.withLock { state -> (WebRTCService.PacedDatagrams?, Double?, PacketPlayer?) in
            guard !state.ended, let peer = state.peer else {
                state.pacer.clear()
                state.pacing = false
                return (nil, nil, nil)
            }
            let now = clock.seconds
            let congestionWindow = Self.congestionWindow(state, at: now)
            let wasBlocked = state.pacer.windowBlocked
            let items = state.pacer.release(at: now, window: congestionWindow - state.link.inFlightBytes)
            if state.pacer.windowBlocked != wasBlocked, logger.logLevel <= .debug {
                logger.debug("WebRTC viewer's congestion window", metadata: [
                    "at": "\(Self.wallClock())", "blocked": "\(state.pacer.windowBlocked)", "window": "\(congestionWindow)",
                    "inFlight": "\(state.link.inFlightBytes)", "queued": "\(state.pacer.queuedBytes)",
                    "queueAtLoss": "\(state.link.queueAtLoss(at: now) ?? -1)", "inFlightLimit": "\(state.link.inFlightLimit(at: now) ?? -1)",
                    "roundTrip": "\(state.leastRoundTrip ?? -1)", "reportRoundTrip": "\(state.link.reportRoundTrip ?? -1)"])
            }
            // Video dropped for waiting too long: nothing of it is resent, and the player goes on
            // from its rung's next keyframe.
            var droppedStale: PacketPlayer?
            if state.pacer.takeDroppedStaleVideo() {
                state.history.forget()
                droppedStale = state.player
            }
            let next = state.pacer.nextRelease(at: now).map { $0 - now }
            if next == nil { state.pacing = false }
            guard !items.isEmpty else { return (nil, next, droppedStale) }
            var written = WebRTCService.PacedDatagrams(peer: peer, offset: buffer.writerIndex, sizes: [])
            written.sizes.reserveCapacity(items.count)
            for item in items {
                guard let length = Self.leave(item, state: &state, at: now, into: &buffer) else { continue }
                written.sizes.append(length)
                // Resends are counted as they leave: one that waited too long in the pacer was not made.
                if item.isRetransmission { state.retransmissions += 1 } else { state.packetsSent += 1 }
                state.bytesSent += length
            }
            return (written.sizes.isEmpty ? nil : written, next, droppedStale)
        }
        if let droppedStale {
            droppedStale.skipToNextKeyframe()
            logger.info("WebRTC viewer's video waited too long behind its congestion window: it goes on from the next keyframe")
        }
        return (next, written)
    }

    /// A packet leaving now, written protected at the end of `buffer`: its transport-wide
    /// sequence number (the next one) filled in and noted with its size and time, then SRTP in
    /// place. Returns its protected length (nil: not sent). Every datagram of media,
    /// retransmission or padding goes through here on the port's event loop, so the numbers go
    /// out in order.
    private static func leave(_ item: MediaPacer.Item, padding: Bool = false, state: inout State, at now: Double,
                              into buffer: inout ByteBuffer) -> Int? {
        guard let outbound = state.outbound else { return nil }
        let stamped = item.carriesTransportSequence && item.count >= 20
        if stamped { state.transportSequence &+= 1 }
        let sequence = state.transportSequence
        let mediaSequence = state.sequenceNumbers.next(for: item)
        let length = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: item.count + SRTPSession.trailerRoom) { raw in
            // The viewer's header, then the rung's shared payload: the packet's one copy.
            item.header.withUnsafeBytes { raw.copyMemory(from: $0) }
            item.payload.withUnsafeReadableBytes { UnsafeMutableRawBufferPointer(rebasing: raw[item.header.count...]).copyMemory(from: $0) }
            if let mediaSequence {
                raw[2] = UInt8(mediaSequence >> 8)
                raw[3] = UInt8(mediaSequence & 0xFF)
            }
            if stamped {
                raw[17] = UInt8(sequence >> 8)
                raw[18] = UInt8(sequence & 0xFF)
            }
            return (try? outbound.protect(rtpInPlace: raw, length: item.count)) ?? 0
        }
        guard length > 0 else { return nil }
        // Video is kept for NACKs under the number it left with (resends keep theirs).
        if item.isVideo, let mediaSequence {
            state.history.keep(RTPPacket(marker: item.header[1] & 0x80 != 0, payloadType: item.header[1] & 0x7F, sequenceNumber: mediaSequence,
                                         timestamp: item.header.timestamp, ssrc: 0, payload: item.payload))
        }
        if item.carriesTransportSequence { state.link.sent(sequence: sequence, bytes: length, at: now, padding: padding) }
        return length
    }

    /// Packets leaving now, laid end to end in one buffer for `WebRTCService.write(_:sizes:to:)`.
    private struct Outgoing {
        var buffer: ByteBuffer
        var sizes: [Int] = []
        var bytes: Int { sizes.reduce(0, +) }

        init(_ items: [MediaPacer.Item] = [], allocator: ByteBufferAllocator) {
            buffer = allocator.buffer(capacity: items.reduce(0) { $0 + $1.count + SRTPSession.trailerRoom })
        }

        mutating func leave(_ item: MediaPacer.Item, padding: Bool = false, state: inout State, at now: Double) -> Int? {
            guard let length = WebRTCViewer.leave(item, padding: padding, state: &state, at: now, into: &buffer) else { return nil }
            sizes.append(length)
            return length
        }
    }

    /// A probe's padding, on the retransmission SSRC, which browsers count in transport-wide
    /// feedback and discard: retransmissions of media already sent (full-size packets, as
    /// libwebrtc pads; see `RetransmissionHistory.recent`), else, before any media, RTP packets
    /// of padding only (RFC 3550 §5.1, at most 255 bytes each). Without RTX negotiated there is
    /// no stream to carry them, and no probe.
    func sendPadding(bytes: Int) {
        guard let rtxType = answer.retransmissionPayloadType, let extensionID = answer.transportSequenceExtension else { return }
        let packets: [MediaPacer.Item] = state.withLock { state in
            guard state.outbound != nil, state.peer != nil, !state.ended else { return [] }
            var packets: [MediaPacer.Item] = []
            // A slice (10 ms of the probe) is often less than one full-size packet: what it could
            // not send is owed to the next, so the padding comes at the rate the probe asked for.
            state.paddingOwed = min(state.paddingOwed + bytes, bytes + 3000)
            let recent = state.history.recent(bytes: state.paddingOwed)
            var chosen: [RTPPacket] = []
            for original in recent {
                let size = original.payload.readableBytes + 14
                guard size <= state.paddingOwed else { break }
                state.paddingOwed -= size
                chosen.append(original)
            }
            for original in chosen {
                state.retransmissionSequence &+= 1
                let packet = RetransmissionHistory.retransmission(of: original, payloadType: rtxType, ssrc: plan.retransmissionSSRC,
                                                                  sequence: state.retransmissionSequence)
                packets.append(.init(header: Self.header(packet, payloadType: rtxType, ssrc: plan.retransmissionSSRC,
                                                         transportSequence: (extensionID, 0)),
                                     payload: packet.payload, carriesTransportSequence: true))
            }
            var left = 0
            if recent.isEmpty {
                left = state.paddingOwed
                state.paddingOwed = 0
            }
            while left > 0, packets.count < 2000 {
                state.retransmissionSequence &+= 1
                let padding = min(255, max(1, left))
                var packet = Self.serialize(RTPPacket(marker: false, payloadType: rtxType, sequenceNumber: state.retransmissionSequence,
                                                      timestamp: 0, ssrc: plan.retransmissionSSRC, payload: ByteBuffer()),
                                            payloadType: rtxType, ssrc: plan.retransmissionSSRC, transportSequence: (extensionID, 0))
                packet[0] |= 0x20  // P: the packet ends in padding, its last byte the count
                packet += [UInt8](repeating: 0, count: padding - 1) + [UInt8(padding)]
                packets.append(.init(bytes: packet, carriesTransportSequence: true))
                left -= packet.count + 10  // SRTP's tag
            }
            return packets
        }
        guard !packets.isEmpty else { return }
        // The probe asks for a slice every 10 ms (`PlayerAdaptation`): it leaves at once.
        let (outgoing, peer) = state.withLock { state -> (Outgoing?, SocketAddress?) in
            guard !state.ended, let peer = state.peer else { return (nil, nil) }
            let now = clock.seconds
            var outgoing = Outgoing(packets, allocator: channel.allocator)
            for item in packets { _ = outgoing.leave(item, padding: true, state: &state, at: now) }
            state.paddingBytes += outgoing.bytes
            return (outgoing, peer)
        }
        if let outgoing, let peer { service.send(outgoing.buffer, sizes: outgoing.sizes, to: peer) }
    }

    /// Sender reports (both tracks on one NTP timeline, for lip sync) and goodbyes, under the answered SSRCs.
    func sendControl(_ rtcp: RTCPPacket, track: Int) {
        guard let ssrc = track == 0 ? plan.videoSSRC : plan.audioSSRC else { return }
        var rewritten = rtcp
        if case let .senderReport(_, ntp, rtp, count, octets) = rtcp {
            rewritten = .senderReport(ssrc: ssrc, ntpTimestamp: ntp, rtpTimestamp: rtp, packetCount: count, octetCount: octets)
            if track == 0 {
                let now = clock.seconds
                state.withLock { state in
                    let queueAhead = state.link.queueAhead(at: now, drainRate: Self.drainRate(state))
                    state.reportsSent.append((UInt32(truncatingIfNeeded: ntp >> 16), now, queueAhead))
                    if state.reportsSent.count > 8 { state.reportsSent.removeFirst() }
                }
            }
        } else if case .goodbye = rtcp {
            rewritten = .goodbye(ssrcs: [ssrc])
        }
        var buffer = ByteBuffer()
        rewritten.write(to: &buffer)
        let (datagram, peer) = state.withLock { state -> ([UInt8]?, SocketAddress?) in
            (try? state.outbound?.protect(rtcp: Array(buffer.readableBytesView)), state.peer)
        }
        if let datagram, let peer { service.send(datagram, to: peer) }
    }

    /// A viewer's RTP header with one-byte header extensions (RFC 8285): the transport-wide
    /// sequence number first (`leave` fills it in at bytes 17–18), then the playout delay asked
    /// of the browser. Written inline, field by field: this runs per packet per viewer.
    static func header(_ packet: RTPPacket, payloadType: UInt8, ssrc: UInt32, transportSequence: (id: Int, value: UInt16)?,
                       playoutDelay: (id: Int, minimum: Double, maximum: Double)? = nil) -> ViewerRTPHeader {
        var header = ViewerRTPHeader()
        header.append(UInt8(transportSequence == nil && playoutDelay == nil ? 0x80 : 0x90))
        header.append((packet.marker ? 0x80 : 0) | (payloadType & 0x7F))
        header.append(packet.sequenceNumber)
        header.append(packet.timestamp)
        header.append(ssrc)
        if transportSequence != nil || playoutDelay != nil {
            // 0xBEDE and the length in words, then each element: id and length-1, its bytes; padded to a word.
            let words = (transportSequence == nil ? 0 : 3) + (playoutDelay == nil ? 0 : 4) > 4 ? 2 : 1
            header.append(UInt16(0xBEDE))
            header.append(UInt16(words))
            if let (id, value) = transportSequence {
                header.append(UInt8(id << 4 | 1))
                header.append(value)
            }
            if let (id, minimum, maximum) = playoutDelay {
                let (a, b, c) = KeyframePlayoutDelay.payload(minimum: minimum, maximum: maximum)
                header.append(UInt8(id << 4 | 2))
                header.append(a)
                header.append(b)
                header.append(c)
            }
            while header.count < 16 + 4 * words { header.append(UInt8(0)) }
        }
        return header
    }

    /// The whole packet in the clear, `header(...)` and the payload (tests; padding).
    static func serialize(_ packet: RTPPacket, payloadType: UInt8, ssrc: UInt32, transportSequence: (id: Int, value: UInt16)?,
                          playoutDelay: (id: Int, minimum: Double, maximum: Double)? = nil) -> [UInt8] {
        header(packet, payloadType: payloadType, ssrc: ssrc, transportSequence: transportSequence, playoutDelay: playoutDelay).bytes
            + packet.payload.readableBytesView
    }

    func end(reason: String) {
        let (player, outputs, peer, retransmission) = state.withLock { state -> (PacketPlayer?, [[UInt8]], SocketAddress?, Scheduled<Void>?) in
            guard !state.ended else { return (nil, [], nil, nil) }
            state.ended = true
            state.phase = "ended"
            let outputs = state.dtls.state == .connected ? state.dtls.close() : []
            defer { state.player = nil }
            return (state.player, outputs, state.peer, state.retransmission)
        }
        retransmission?.cancel()
        player?.stop()
        if let peer { service.send(outputs, to: peer) }
        service.ended(self)
        logger.info("WebRTC viewer ended", metadata: ["reason": "\(reason)"])
    }

    func expiry(now: UInt64, setupTimeout: Double, silenceTimeout: Double) -> String? {
        state.withLock { state in
            if state.outbound == nil, Double(now &- state.created) / 1e9 > setupTimeout {
                return state.peer == nil ? "ICE did not finish within \(Int(setupTimeout)) s" : "DTLS did not finish within \(Int(setupTimeout)) s"
            }
            if Double(now &- state.lastHeard) / 1e9 > silenceTimeout { return "silent for \(Int(silenceTimeout)) s" }
            return nil
        }
    }

    public var status: Status {
        state.withLock { state in
            Status(id: id, path: path, state: state.phase, peer: state.peer.map { "\($0)" }, packetsSent: state.packetsSent,
                   bytesSent: state.bytesSent, nacks: state.nacks, retransmissions: state.retransmissions,
                   retransmissionsDeclined: state.retransmissionsDeclined, roundTrip: state.roundTrip, fractionLost: state.fractionLost, pictureLossIndications: state.pictureLossIndications,
                   receiverEstimate: state.receiverEstimate, level: state.player?.level, adaptive: state.player?.isAdaptive ?? false, switches: state.player?.switches ?? 0,
                   estimate: state.player?.estimate, playoutDelay: answer.playoutDelayExtension == nil ? nil : state.playoutDelay.minimum,
                   audio: answer.audioPayloadType == nil ? nil : state.player?.audioRendition)
        }
    }
}

/// The viewer as its `PacketPlayer` sees it.
struct ViewerSink: PacketSink {
    let viewer: WebRTCViewer
    func send(_ packets: [RTPPacket], track: Int) { viewer.sendMedia(packets, track: track) }
    func send(_ rtcp: RTCPPacket, track: Int) { viewer.sendControl(rtcp, track: track) }
    var pendingBytes: Int { viewer.pacedBytes }
    var linkCost: SwitchingPolicy.LinkCost { viewer.linkCost }
    var pathQueue: Double? { viewer.pathQueue }
    func close() {}
    func sendPadding(bytes: Int) { viewer.sendPadding(bytes: bytes) }
    func dropQueuedVideo() { viewer.dropQueuedVideo() }
    func dropQueuedVideo(keepingKeyframeYoungerThan age: Double) -> Bool { viewer.dropQueuedVideo(keepingKeyframeYoungerThan: age) }
    var eventLoop: EventLoop { viewer.eventLoop }
}

extension WebRTCViewer {
    var eventLoop: EventLoop { channel.eventLoop }
    /// Media waiting in the pacer: the viewer's backlog, as the player's adaptation sees it.
    var pacedBytes: Int { state.withLock { $0.pacer.queuedBytes } }
    var linkCost: SwitchingPolicy.LinkCost { state.withLock { $0.wireCost.cost } }
    /// The queue on the path a packet sent now would meet, from the latest feedback and what was
    /// sent since; drained at the estimate, or at what arrived lately where that is more.
    var pathQueue: Double? {
        state.withLock { state in
            state.link.predictedQueue(at: clock.seconds, bitRate: Self.drainRate(state))
        }
    }

    /// The player was moved down with a flush (or skipped): its rung's video still in the pacer
    /// is dropped, and nothing sent before is resent. Both would reach the full link ahead of the
    /// new rung's IDR: in Chromium a viewer that started on the top over a 1 Mbit/s link stayed
    /// frozen 3 s while the top's catch-up and its retransmissions drained before 240p's IDR.
    /// The browser sees a gap in the sequence numbers before that IDR, which decodes on its own.
    func dropQueuedVideo() {
        state.withLock { state in
            state.pacer.dropVideo()
            state.history.forget()
        }
    }

    /// The player skips to its live edge: the video in the pacer before its newest keyframe
    /// that has waited less than `age` is dropped, and nothing sent before is resent. True when
    /// such a keyframe was kept (the player goes on from it); else all the video queued is
    /// dropped, as `dropQueuedVideo()`.
    func dropQueuedVideo(keepingKeyframeYoungerThan age: Double) -> Bool {
        state.withLock { state in
            state.history.forget()
            return state.pacer.dropVideo(keepingKeyframeYoungerThan: age, at: clock.seconds)
        }
    }
}
