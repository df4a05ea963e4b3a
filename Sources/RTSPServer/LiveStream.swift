import MediaCore
import NIOCore
import RTSP
import Synchronization

/// What a stream's video track is, as players need it in SDP and in-band.
public struct VideoFormat: Sendable, Equatable {
    public var sps: [UInt8]
    public var pps: [UInt8]
    public var width: Int
    public var height: Int
    public var frameRate: Double?

    public init?(sps: [UInt8], pps: [UInt8], frameRate: Double? = nil) {
        guard let parsed = H264SPS(sps), !pps.isEmpty else { return nil }
        self.sps = sps
        self.pps = pps
        self.width = parsed.width
        self.height = parsed.height
        self.frameRate = frameRate
    }

    /// `profile-level-id` for SDP: the SPS's profile, constraint and level bytes in hex.
    public var profileLevelID: String { H264.codecString(sps: sps).map { String($0.dropFirst(5)) } ?? "42e01f" }
}

public struct AudioFormat: Sendable, Equatable {
    public var sampleRate: Int
    public var channels: Int
    /// AudioSpecificConfig.
    public var config: [UInt8]

    public init(sampleRate: Int, channels: Int, config: [UInt8]) {
        self.sampleRate = sampleRate
        self.channels = channels
        self.config = config
    }
}

/// One playable stream (`live/stream1_2`): its formats, the current GOP for fast start, and its
/// players. Producers (a relayed publisher, a variant pipeline) write timestamped media; every
/// player gets it packetized for its own transport.
///
/// Thread-safe: producers write from their own threads; state is under `state`'s lock and no I/O
/// happens while holding it.
public final class LiveStream: Sendable {
    public let path: String
    private let state: Mutex<State>

    struct State {
        var video: VideoFormat?
        var audio: AudioFormat?
        var attributes: [String] = []
        var bandwidthKbps: Int?
        var bandwidthTIAS: Int?
        var gop: [CachedAccessUnit] = []
        var gopBytes = 0
        var subscribers: [ObjectIdentifier: MediaSubscriber] = [:]
        var ended = false
        var framesWritten = 0
        var lastVideoTicks: Int64 = 0
        var lastAudioTicks: Int64 = 0
        /// The ladder this stream is a rung of (level → path), and this rung's switch thresholds.
        var ladder: [Int: String]?
        var rung: SwitchingPolicy.Rung?
    }

    struct CachedAccessUnit {
        var nalUnits: [[UInt8]]
        var ticks: Int64
    }

    /// The current GOP is kept for new players up to this size; past it, they wait for the next IDR.
    public static let maximumGOPBytes = 16 * 1024 * 1024

    public init(path: String) {
        self.path = path
        self.state = Mutex(State())
    }

    public var video: VideoFormat? { state.withLock { $0.video } }
    public var audio: AudioFormat? { state.withLock { $0.audio } }
    public var isEnded: Bool { state.withLock { $0.ended } }
    public var playerCount: Int { state.withLock { $0.subscribers.count } }
    public var framesWritten: Int { state.withLock { $0.framesWritten } }

    /// True once a player could be given something to decode.
    public var isPlayable: Bool { state.withLock { $0.video != nil && !$0.ended } }

    public func setFormats(video: VideoFormat?, audio: AudioFormat?) {
        state.withLock {
            $0.video = video
            $0.audio = audio
            $0.ended = false
        }
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

    /// Writes one video access unit. `ticks` is the presentation time in 90 kHz units and must not decrease.
    public func writeVideo(nalUnits: [[UInt8]], ticks: Int64, isKeyframe: Bool) {
        let subscribers: [MediaSubscriber] = state.withLock { state in
            state.framesWritten += 1
            state.lastVideoTicks = ticks
            if isKeyframe {
                state.gop.removeAll(keepingCapacity: true)
                state.gopBytes = 0
            }
            let size = nalUnits.reduce(0) { $0 + $1.count }
            if !state.gop.isEmpty || isKeyframe, state.gopBytes + size <= Self.maximumGOPBytes {
                state.gop.append(CachedAccessUnit(nalUnits: nalUnits, ticks: ticks))
                state.gopBytes += size
            }
            return Array(state.subscribers.values)
        }
        for subscriber in subscribers {
            subscriber.sendVideo(nalUnits: nalUnits, ticks: ticks, isKeyframe: isKeyframe, parameterSets: isKeyframe ? parameterSets : nil, from: self)
        }
    }

    /// Writes one AAC access unit at `ticks` in the audio sample rate's units.
    public func writeAudio(_ frame: [UInt8], ticks: Int64) {
        let subscribers: [MediaSubscriber] = state.withLock {
            $0.lastAudioTicks = ticks
            return Array($0.subscribers.values)
        }
        for subscriber in subscribers { subscriber.sendAudio(frame, ticks: ticks, from: self) }
    }

    private var parameterSets: [[UInt8]]? {
        state.withLock { $0.video.map { [$0.sps, $0.pps] } }
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
        let (gop, sets, start) = state.withLock { state in
            state.subscribers[ObjectIdentifier(subscriber)] = subscriber
            return (state.gop, state.video.map { [$0.sps, $0.pps] },
                    (state.gop.first?.ticks ?? state.lastVideoTicks, state.lastAudioTicks))
        }
        subscriber.start(gop: gop.enumerated().map { index, unit in
            MediaSubscriber.PendingPicture(nalUnits: unit.nalUnits, ticks: unit.ticks, isKeyframe: index == 0, parameterSets: index == 0 ? sets : nil)
        })
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

    /// The stream is over (its job ended): players are told and dropped.
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
