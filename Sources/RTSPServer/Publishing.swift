import Ingest
import MediaCore
import RTSP
import Synchronization

/// Lets anyone publish any path and relays it unchanged: for tests and fuzzing, never a node's policy.
public struct RelayEverything: PublishPolicy {
    let registry: StreamRegistry

    public init(registry: StreamRegistry) {
        self.registry = registry
    }

    public func decide(_ request: PublishRequest) -> PublishDecision {
        .accept(registry.relayStream(request.path))
    }
}

/// Turns one announced track's RTP into access units (the session's `PublisherTimeline` places their timestamps).
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

    /// `ticks` of this track's clock as a media time.
    func time(_ ticks: Int64) -> MediaTime {
        MediaTime(ticks: ticks, timeBase: Rational(1, Int32(clamping: max(1, media.clockRate))))
    }

    var isSupported: Bool {
        if case .unsupported = kind { return false }
        return true
    }
}

extension [IncomingTrack] {
    /// The session's formats as known now: the first video track's latest, the first audio track's.
    var formats: (video: VideoFormat?, audio: AudioFormat?) {
        var video: VideoFormat?
        var audio: AudioFormat?
        for track in self {
            if video == nil, let format = track.videoFormat { video = format }
            if audio == nil, case let .audio(_, format) = track.kind { audio = format }
        }
        return (video, audio)
    }
}
