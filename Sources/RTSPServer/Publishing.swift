import MediaCore
import RTSP
import Synchronization

/// What arrives from one publisher, in order, on one of the server's threads at a time.
public protocol PublishSink: AnyObject, Sendable {
    /// One video access unit; `ticks` are 90 kHz units from the session's start, never decreasing.
    /// `format` is the latest known SPS/PPS (from SDP or in-band).
    func receiveVideo(_ unit: H264AccessUnit, ticks: Int64, format: VideoFormat)
    /// One AAC access unit; `ticks` in the sample rate's units.
    func receiveAudio(_ frame: [UInt8], ticks: Int64, format: AudioFormat)
    /// A `SET_PARAMETER` notification, e.g. `publisherBackground`.
    func receiveNotification(name: String, value: String)
    /// The publisher is gone: TEARDOWN, connection closed, or session timeout.
    func publisherEnded(reason: String)
    /// The publisher's timestamps jumped (backwards, or far forwards): what follows is a new
    /// timeline. Ticks passed on stay continuous and increasing across it; a sink that keeps
    /// media for later (HLS) starts a new timeline segment.
    func timelineRestarted()
    /// Whether a format first seen in-band (a new SPS in the stream, not in the ANNOUNCE) may go
    /// on: nil, or why this publish must stop. Asked before any media of that format is received.
    func refusal(of format: VideoFormat) -> String?
}

extension PublishSink {
    public func refusal(of format: VideoFormat) -> String? { nil }
    public func timelineRestarted() {}
}

public struct PublishRequest: Sendable {
    public var path: String
    public var description: SessionDescription
    public var remoteAddress: String
}

public enum PublishDecision: Sendable {
    case accept(any PublishSink)
    case refuse(status: Int, reason: String)
}

/// Decides who may publish what: the live node maps provisioned streams to jobs.
public protocol PublishPolicy: Sendable {
    /// What a publisher of `path` must authenticate with before `decide` is asked; nil for nobody.
    func publisherCredentials(for path: String) -> StreamCredentials?
    func decide(_ request: PublishRequest) -> PublishDecision
}

extension PublishPolicy {
    public func publisherCredentials(for path: String) -> StreamCredentials? { nil }
}

/// Lets anyone publish any path and relays it unchanged: for tests and fuzzing, never a node's policy.
public struct RelayEverything: PublishPolicy {
    let registry: StreamRegistry

    public init(registry: StreamRegistry) {
        self.registry = registry
    }

    public func decide(_ request: PublishRequest) -> PublishDecision {
        .accept(RelaySink(stream: registry.stream(request.path), registry: registry))
    }
}

/// Publishes a stream straight to players of the same path, unchanged (no transcoding).
public final class RelaySink: PublishSink {
    let stream: LiveStream
    /// Where the relayed stream is forgotten when its publisher leaves, so ended relays hold no memory.
    let registry: StreamRegistry?
    private let formats = Mutex<(VideoFormat?, AudioFormat?)>((nil, nil))

    public init(stream: LiveStream, registry: StreamRegistry? = nil) {
        self.stream = stream
        self.registry = registry
    }

    public func receiveVideo(_ unit: H264AccessUnit, ticks: Int64, format: VideoFormat) {
        updateFormats(video: format, audio: nil)
        stream.writeVideo(nalUnits: unit.nalUnits, ticks: ticks, isKeyframe: unit.containsIDR)
    }

    public func receiveAudio(_ frame: [UInt8], ticks: Int64, format: AudioFormat) {
        updateFormats(video: nil, audio: format)
        stream.writeAudio(frame, ticks: ticks)
    }

    private func updateFormats(video: VideoFormat?, audio: AudioFormat?) {
        let changed: (VideoFormat?, AudioFormat?)? = formats.withLock { current in
            let next = (video ?? current.0, audio ?? current.1)
            guard next.0 != current.0 || next.1 != current.1 else { return nil }
            current = next
            return next
        }
        if let changed { stream.setFormats(video: changed.0, audio: changed.1) }
    }

    public func receiveNotification(name: String, value: String) {}

    public func publisherEnded(reason: String) {
        stream.end()
        registry?.remove(stream)
    }
}

/// Turns one announced track's RTP into access units with continuous timestamps.
struct IncomingTrack {
    enum Kind {
        case video(H264Depacketizer)
        case audio(AudioDepacketizer, AudioFormat)
        case unsupported
    }

    let media: SessionDescription.Media
    var kind: Kind
    var reorder = RTPReorderBuffer(capacity: 64)
    /// Only the publisher's own SSRC, in sequence, gets through.
    var sourceFilter = RTPSourceFilter()
    var lastTimestamp: UInt32?
    var ticks: Int64 = 0
    var videoFormat: VideoFormat?
    var packetsReceived = 0
    var bytesReceived = 0
    var reception = ReceptionStatistics()

    init(media: SessionDescription.Media) {
        self.media = media
        if media.isH264 {
            let sets = media.formatParameters["sprop-parameter-sets"].map(H264.parameterSets(fromSprop:)) ?? []
            let sps = sets.first { ($0.first ?? 0) & 0x1F == 7 }
            let pps = sets.first { ($0.first ?? 0) & 0x1F == 8 }
            kind = .video(H264Depacketizer(sps: sps, pps: pps))
            if let sps, let pps { videoFormat = VideoFormat(sps: sps, pps: pps, frameRate: media.frameRate) }
        } else if let (config, channels) = media.aacFormat {
            let depacketizer: AudioDepacketizer = media.latmConfig.map { .latm(LATMDepacketizer(framesPerElement: $0.framesPerElement)) } ?? .rfc3640(AACDepacketizer())
            kind = .audio(depacketizer, AudioFormat(sampleRate: media.clockRate, channels: channels, config: config))
        } else {
            kind = .unsupported
        }
    }

    /// AAC frames out of either RTP framing.
    enum AudioDepacketizer {
        case rfc3640(AACDepacketizer)
        case latm(LATMDepacketizer)

        mutating func push(_ packet: RTPPacket, lostBefore: Bool) -> [AACDepacketizer.Frame] {
            switch self {
            case var .rfc3640(depacketizer):
                defer { self = .rfc3640(depacketizer) }
                return depacketizer.push(packet, lostBefore: lostBefore)
            case var .latm(depacketizer):
                defer { self = .latm(depacketizer) }
                return depacketizer.push(packet, lostBefore: lostBefore)
            }
        }
    }

    /// Continuous ticks from 32-bit RTP timestamps (which wrap, and start at a random value).
    mutating func unwrap(_ timestamp: UInt32, startTicks: Int64) -> Int64 {
        if let last = lastTimestamp {
            ticks += Int64(Int32(bitPattern: timestamp &- last))
        } else {
            ticks = startTicks
        }
        lastTimestamp = timestamp
        return ticks
    }

    /// A timestamp this far behind the last one is not B-frame reordering but a new timeline
    /// (an encoder restarted with another timestamp base).
    static let maximumBackwardStep = 1.0
    /// A step forward this large is a new timeline too (a clock reset, or a long pause).
    static let maximumForwardStep = 5.0

    /// Whether `timestamp` starts a new timeline relative to the last unit's.
    func jumps(to timestamp: UInt32) -> Bool {
        guard let last = lastTimestamp, media.clockRate > 0 else { return false }
        let step = Double(Int32(bitPattern: timestamp &- last)) / Double(media.clockRate)
        return step < -Self.maximumBackwardStep || step > Self.maximumForwardStep
    }

    /// Seconds of media on this track's continuous timeline so far.
    var seconds: Double { media.clockRate > 0 ? Double(ticks) / Double(media.clockRate) : 0 }

    var isSupported: Bool {
        if case .unsupported = kind { return false }
        return true
    }
}
