import MediaCore
import NIOCore
import RTSP
import Synchronization

/// One playable stream (`live/stream1_2`): its formats, the current GOP for fast start, and its
/// players. Producers (a relayed publisher, a variant pipeline) write timestamped media as a
/// `MediaSink`; each picture and audio frame is split into RTP payloads once, here, and every
/// player sends those same buffers under its own header (SSRC, sequence number, timestamp), so
/// a player's switch between rungs is only a change of which stream's payloads it forwards.
///
/// Thread-safe: producers write from their own threads; state is under `state`'s lock and no I/O
/// happens while holding it.
public final class LiveStream: MediaSink {
    public let path: String
    private let state: Mutex<State>
    /// Called once the stream has ended (a relay's publisher left): the registry forgets it.
    private let onEnd: (@Sendable (LiveStream) -> Void)?

    struct State {
        var video: VideoFormat?
        var audio: AudioFormat?
        var attributes: [String] = []
        var bandwidthKbps: Int?
        var bandwidthTIAS: Int?
        var gop: [SharedPicture] = []
        var gopBytes = 0
        var subscribers: [ObjectIdentifier: MediaSubscriber] = [:]
        var ended = false
        var framesWritten = 0
        var lastVideoTicks: Int64 = 0
        var lastAudioTicks: Int64 = 0
        /// Opus packets have been written beside the AAC: browsers can be given audio.
        var carriesOpus = false
        /// A picture came with an earlier time than the one before it: B-frames, in decode order.
        var reordersPictures = false
        /// The ladder this stream is a rung of (level → path), and this rung's switch thresholds.
        var ladder: [Int: String]?
        var rung: SwitchingPolicy.Rung?
        /// Its encoder, asked for an IDR by a player switching to it (nil: passed through or published).
        var keyframeSource: (@Sendable (MediaTime) -> Void)?
    }

    /// The current GOP is kept for new players up to this size; past it, they wait for the next IDR.
    public static let maximumGOPBytes = 16 * 1024 * 1024

    public init(path: String, onEnd: (@Sendable (LiveStream) -> Void)? = nil) {
        self.path = path
        self.onEnd = onEnd
        self.state = Mutex(State())
    }

    public var video: VideoFormat? { state.withLock { $0.video } }
    public var audio: AudioFormat? { state.withLock { $0.audio } }
    /// True once the stream's job writes Opus for browsers (`writeOpus`).
    public var carriesOpus: Bool { state.withLock { $0.carriesOpus } }
    public var isEnded: Bool { state.withLock { $0.ended } }
    public var playerCount: Int { state.withLock { $0.subscribers.count } }
    public var framesWritten: Int { state.withLock { $0.framesWritten } }

    /// Why a browser cannot be sent this rung over WebRTC, or nil when it can. RTP carries no
    /// decode times: a browser's WebRTC stack decodes pictures in the order they arrive and shows
    /// B-frames out of order (a passed-through top from OBS or a camera, High profile with
    /// B-frames, is the usual case). The SPS's own reorder figure says so before any picture
    /// does; pictures that arrive out of presentation order say so for an SPS that is silent.
    public var webRTCRefusal: String? {
        state.withLock { state in
            guard let video = state.video else { return nil }
            if let reorder = H264SPS(video.sps)?.maxNumReorderFrames, reorder > 0 {
                return "it has B-frames (its SPS allows \(reorder) reordered pictures), which WebRTC cannot carry in order"
            }
            return state.reordersPictures ? "it has B-frames (its pictures arrive out of order), which WebRTC cannot carry in order" : nil
        }
    }

    /// True once a player could be given something to decode.
    public var isPlayable: Bool { state.withLock { $0.video != nil && !$0.ended } }

    public func setFormats(video: VideoFormat?, audio: AudioFormat?) {
        state.withLock {
            // Another encoder (a publisher back with other settings) may not reorder.
            if $0.video?.sps != video?.sps { $0.reordersPictures = false }
            $0.video = video
            $0.audio = audio
            $0.ended = false
        }
    }

    public func setKeyframeSource(_ request: @escaping @Sendable (_ after: MediaTime) -> Void) {
        state.withLock { $0.keyframeSource = request }
    }

    /// Asks this stream's encoder for an IDR after `ticks` (the video clock); false when no
    /// encoder makes it (the switch then takes the grid's next IDR).
    @discardableResult
    func requestKeyframe(afterTicks ticks: Int64) -> Bool {
        guard let source = state.withLock({ $0.keyframeSource }) else { return false }
        source(MediaTime(ticks: ticks, timeBase: Self.videoClock))
        return true
    }

    /// Makes this stream a rung of a ladder (level → stream path): its players may be moved
    /// between the ladder's streams as their links change.
    public func setLadder(_ paths: [Int: String]) {
        state.withLock { $0.ladder = paths }
    }

    /// This rung's switch thresholds (from the ladder's bandwidth hints).
    public func setRung(_ rung: SwitchingPolicy.Rung) {
        state.withLock { $0.rung = rung }
    }

    public var ladder: [Int: String]? { state.withLock { $0.ladder } }
    public var rung: SwitchingPolicy.Rung? { state.withLock { $0.rung } }

    /// Bandwidth hints carried in this stream's SDP: `b=AS` (kbit/s), `b=TIAS` (bit/s) and extra `a=` lines.
    public func setHints(bandwidthKbps: Int?, bandwidthTIAS: Int?, attributes: [String]) {
        state.withLock {
            $0.bandwidthKbps = bandwidthKbps
            $0.bandwidthTIAS = bandwidthTIAS
            $0.attributes = attributes
        }
    }

    /// The SDP a player gets from DESCRIBE; track 0 is video, track 1 audio (when present).
    public func sessionDescription() -> SessionDescription? {
        state.withLock { state in
            guard let video = state.video else { return nil }
            var videoAttributes: [String] = []
            if let rate = video.frameRate, rate > 0 { videoAttributes.append("framerate:\(Self.format(rate))") }
            videoAttributes.append("x-dimensions:\(video.width),\(video.height)")
            videoAttributes += state.attributes
            var media = [SessionDescription.Media(
                kind: "video", payloadType: 96, encoding: "H264", clockRate: 90000,
                formatParameters: ["packetization-mode": "1", "profile-level-id": video.profileLevelID,
                                   "sprop-parameter-sets": H264.sprop([video.sps, video.pps])],
                control: "trackID=0", bandwidthKbps: state.bandwidthKbps, attributes: videoAttributes)]
            media[0].bandwidthTIAS = state.bandwidthTIAS
            if let audio = state.audio {
                media.append(SessionDescription.Media(
                    kind: "audio", payloadType: 97, encoding: "MPEG4-GENERIC", clockRate: audio.sampleRate, channels: audio.channels,
                    formatParameters: ["profile-level-id": "1", "mode": "AAC-hbr", "sizelength": "13", "indexlength": "3",
                                       "indexdeltalength": "3", "config": audio.config.map { String($0, radix: 16).leftPadded(2) }.joined()],
                    control: "trackID=1"))
            }
            return SessionDescription(sessionName: path, media: media)
        }
    }

    static func format(_ value: Double) -> String {
        value == value.rounded() ? String(Int(value)) : String((value * 1000).rounded() / 1000)
    }

    /// RTP's H.264 clock: the unit of every video tick a player's packets carry.
    public static let videoClock = Rational(1, 90000)

    /// Writes one picture. Its time, in 90 kHz ticks, must not decrease.
    public func writeVideo(_ nalUnits: [[UInt8]], time: MediaTime, isKeyframe: Bool) {
        let ticks = time.ticks(in: Self.videoClock)
        // SPS/PPS in-band before every IDR, for players that ignore the SDP's, and so a player that
        // switches rungs at this IDR gets the new rung's sets with it.
        let sets: [[UInt8]] = isKeyframe && !nalUnits.contains(where: { [7, 8].contains(($0.first ?? 0) & 0x1F) })
            ? state.withLock { $0.video.map { [$0.sps, $0.pps] } ?? [] } : []
        let payloads = H264Packetizer.payloads(sets + nalUnits)
        let picture = SharedPicture(payloads: payloads, ticks: ticks, isKeyframe: isKeyframe)
        let subscribers: [MediaSubscriber] = state.withLock { state in
            state.framesWritten += 1
            if !isKeyframe, state.framesWritten > 1, ticks < state.lastVideoTicks { state.reordersPictures = true }
            state.lastVideoTicks = ticks
            if isKeyframe {
                state.gop.removeAll(keepingCapacity: true)
                state.gopBytes = 0
            }
            if !state.gop.isEmpty || isKeyframe, state.gopBytes + picture.bytes <= Self.maximumGOPBytes {
                state.gop.append(picture)
                state.gopBytes += picture.bytes
            }
            return Array(state.subscribers.values)
        }
        for subscriber in subscribers { subscriber.sendVideo(picture, from: self) }
    }

    /// Writes one AAC access unit; its time is carried in the audio sample rate's ticks.
    public func writeAudio(_ frame: [UInt8], time: MediaTime) {
        guard let payload = AACPacketizer.payload(frame) else { return }
        let written: (Int64, [MediaSubscriber])? = state.withLock { state in
            guard let audio = state.audio else { return nil }
            let ticks = time.ticks(in: audio.timeBase)
            state.lastAudioTicks = ticks
            return (ticks, Array(state.subscribers.values))
        }
        guard let (ticks, subscribers) = written else { return }
        for subscriber in subscribers where subscriber.audioFeed == .aac { subscriber.sendAudio(payload, ticks: ticks, from: self) }
    }

    /// Writes one Opus packet (RFC 7587: the packet is the RTP payload, on a 48 kHz clock), and
    /// its light rendition. The job encodes once and writes the same packets to each rung, so a
    /// browser keeps its audio across a switch; each player takes the rendition it is given.
    public func writeOpus(_ packet: [UInt8], light: [UInt8]?, time: MediaTime) {
        let payload = ByteBuffer(bytes: packet)
        let lightPayload = light.map { ByteBuffer(bytes: $0) }
        let ticks = time.ticks(in: Rational(1, 48000))
        let subscribers: [MediaSubscriber] = state.withLock { state in
            state.carriesOpus = true
            return state.subscribers.values.filter { $0.audioFeed == .opus }
        }
        for subscriber in subscribers {
            subscriber.sendAudio(subscriber.audioRendition == .light ? lightPayload ?? payload : payload, ticks: ticks, from: self)
        }
    }

    /// SDP carries: `b=AS` (kbit/s) and `b=TIAS` (bit/s) of the measured peak, declared until
    /// measured, and `a=x-abr-*` lines with the level, declared, average and peak rates, the
    /// switch thresholds and the keyframe interval. The same thresholds move this rung's players
    /// (`SwitchingPolicy`): the hints are defined once.
    public func setBandwidthHints(_ hint: BandwidthHints.VariantHint, keyframeInterval: Double) {
        setRung(SwitchingPolicy.Rung(hint: hint))
        setHints(bandwidthKbps: (hint.peakBitRate + 999) / 1000, bandwidthTIAS: hint.peakBitRate, attributes: [
            "x-abr-level:\(hint.abrLevel)",
            "x-abr-declared-bitrate:\(hint.declaredBitRate)",
            "x-abr-average-bitrate:\(hint.averageBitRate)",
            "x-abr-peak-bitrate:\(hint.peakBitRate)",
            "x-abr-upswitch-above:\(hint.upswitchAboveBitRate)",
            "x-abr-downswitch-below:\(hint.downswitchBelowBitRate)",
            "x-abr-keyframe-interval:\(keyframeInterval)",
        ])
    }

    /// Before anything is measured: the declared rate of a ladder's rung, for SDP.
    public func setDeclaredBitRate(_ bitRate: Int, level: Int) {
        setHints(bandwidthKbps: (bitRate + 999) / 1000, bandwidthTIAS: bitRate,
                 attributes: ["x-abr-level:\(level)", "x-abr-declared-bitrate:\(bitRate)"])
    }

    /// Where a player subscribing now starts: the cached GOP's first picture, and the latest audio.
    var startTicks: (video: Int64, audio: Int64) {
        state.withLock { ($0.gop.first?.ticks ?? $0.lastVideoTicks, $0.lastAudioTicks) }
    }

    /// Adds a player and, so it can start at once, sends it the current GOP from its IDR.
    /// Returns the timestamps its first video and audio packets will carry.
    @discardableResult
    func subscribe(_ subscriber: MediaSubscriber) -> (videoTicks: Int64, audioTicks: Int64) {
        subscriber.bind(to: self)
        let (gop, start) = state.withLock { state in
            state.subscribers[ObjectIdentifier(subscriber)] = subscriber
            return (state.gop, (state.gop.first?.ticks ?? state.lastVideoTicks, state.lastAudioTicks))
        }
        subscriber.start(gop: gop)
        return start
    }

    /// Adds a player that is switching to this stream: it gets what is written from now on and
    /// starts on the next IDR (no cached GOP, no catch-up).
    func attachSwitching(_ subscriber: MediaSubscriber) {
        state.withLock { $0.subscribers[ObjectIdentifier(subscriber)] = subscriber }
    }

    /// Removes a player that moved to another stream of its ladder (its session goes on).
    func detach(_ subscriber: MediaSubscriber) {
        _ = state.withLock { $0.subscribers.removeValue(forKey: ObjectIdentifier(subscriber)) }
    }

    func unsubscribe(_ subscriber: MediaSubscriber) {
        _ = state.withLock { $0.subscribers.removeValue(forKey: ObjectIdentifier(subscriber)) }
        subscriber.stopCatchUp()
    }

    /// The stream is over (its job ended, or a relay's publisher left): players are told and dropped.
    public func end(reason: String) {
        end()
        onEnd?(self)
    }

    /// Ends the stream for its players; it stays where it is registered (a ladder's rung awaits its next job).
    public func end() {
        let subscribers: [MediaSubscriber] = state.withLock { state in
            state.ended = true
            // Nobody can join an ended stream: its GOP cache is only memory.
            state.gop.removeAll()
            state.gopBytes = 0
            defer { state.subscribers.removeAll() }
            return Array(state.subscribers.values)
        }
        for subscriber in subscribers { subscriber.streamEnded(from: self) }
    }

    /// Per-player counters for stats.
    public var playerDrops: Int { state.withLock { $0.subscribers.values.reduce(0) { $0 + $1.droppedFrames } } }
}

extension String {
    func leftPadded(_ width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}

/// One picture as RTP payloads, made once per stream and shared by its players (slices of one
/// buffer): each player stamps them with its own header.
struct SharedPicture: Sendable {
    var payloads: [ByteBuffer]
    /// Presentation time in 90 kHz ticks on the stream's timeline.
    var ticks: Int64
    var isKeyframe: Bool
    var bytes: Int
    /// Wall clock (Unix seconds) when the node had the picture: its capture time as players'
    /// sender reports give it, so a browser's playout figures measure from here.
    var writtenAt: Double

    init(payloads: [ByteBuffer], ticks: Int64, isKeyframe: Bool, writtenAt: Double = wallClock()) {
        self.payloads = payloads
        self.ticks = ticks
        self.isKeyframe = isKeyframe
        self.writtenAt = writtenAt
        bytes = payloads.reduce(0) { $0 + $1.readableBytes }
    }
}
