import MediaCore
import RTSP

/// A publisher's announced tracks as one value: RTP packets in; out, what its sink must hear
/// (a format before any media in it, timeline restarts, access units) or why the publish must
/// stop. It keeps no socket, lock or clock: `ServerSession` holds it under its own lock and
/// passes the time in, so the whole path from packet to sink event is testable without a network.
struct PublisherReception {
    private(set) var tracks: [IncomingTrack]
    /// The formats the sink was last told of: it hears again only when one changes.
    private var announcedFormats: (video: VideoFormat?, audio: AudioFormat?) = (nil, nil)
    /// Every track's RTP timestamps on one timeline, in seconds since RECORD at the start.
    private var timeline: PublisherTimeline
    /// Refusals of the publisher's in-band parameter sets (UDP: one forged packet must not end the publish).
    private var refusals = RefusalStreak()

    /// Seconds a forgeable (UDP) publisher must keep sending refused parameter sets before its publish stops.
    static let refusalPersistence = 2.0

    init(media: [SessionDescription.Media]) {
        tracks = media.map(IncomingTrack.init)
        timeline = PublisherTimeline(wrapBits: 32, clock: .perTrack(media.map { Int64($0.clockRate) }))
    }

    /// What one packet gave the sink, in order, or why the publish must stop.
    struct Outcome {
        var events: [MediaSinkEvent] = []
        var stop: String?
    }

    /// Runs one RTP packet (`bytes` long on the wire) through track `index`.
    ///
    /// nil when the packet is not the publisher's: another SSRC, far out of sequence
    /// (`RTPSourceFilter`; over UDP anyone can send a datagram with the publisher's source
    /// address), or a track it did not announce. Such packets do not count as the publisher's
    /// activity. A timestamp jump starts a new timeline: every track re-anchors after the
    /// furthest one so ticks stay increasing, and the sink hears of it before the first unit of
    /// the new timeline.
    ///
    /// `refusal` says why a picture format is not taken (larger than the node allows, or refused
    /// by the sink). Nothing of a refused format reaches the sink: the unit, and what follows it
    /// until an IDR with sets the node takes. The outcome's `stop` is set at once, or when
    /// `forgeable` (UDP) only once the source has kept sending refused sets for
    /// `refusalPersistence` seconds, as a publisher that really switched does at every keyframe.
    mutating func receive(_ packet: RTPPacket, bytes: Int, track index: Int, now: UInt64, sinceRecord: Double,
                          forgeable: Bool, refusal: (VideoFormat) -> String?) -> Outcome? {
        guard tracks.indices.contains(index) else { return nil }
        var track = tracks[index]
        guard track.sourceFilter.admit(ssrc: packet.ssrc, sequence: packet.sequenceNumber, now: Double(now) / 1e9) == .accept else {
            tracks[index] = track
            return nil
        }
        track.packetsReceived += 1
        track.bytesReceived += bytes
        var outcome = Outcome()
        defer { tracks[index] = track }
        guard packet.payloadType == track.media.payloadType || track.media.payloadType >= 96 else { return outcome }
        track.reception.record(packet, arrival: Double(now) / 1e9, clockRate: track.media.clockRate)
        for (ready, lost) in track.reorder.push(packet) {
            switch track.kind {
            case var .video(depacketizer):
                // Held once while it takes the packet: left in `track` and in the table too, its
                // buffers were shared, so each FU-A fragment copied the whole NAL unit gathered so
                // far (a keyframe's fragments cost the square of its size). Put back below.
                track.kind = .unsupported
                tracks[index].kind = .unsupported
                for unit in depacketizer.push(ready, lostBefore: lost) {
                    // Parameter sets in the unit itself, else the latest seen in-band (sent apart).
                    let sps = unit.nalUnits.last { ($0.first ?? 0) & 0x1F == 7 } ?? depacketizer.sps
                    let pps = unit.nalUnits.last { ($0.first ?? 0) & 0x1F == 8 } ?? depacketizer.pps
                    if let sps, let pps, track.videoFormat?.sps != sps || track.videoFormat?.pps != pps,
                       let format = VideoFormat(sps: sps, pps: pps, frameRate: track.media.frameRate) {
                        if let reason = refusal(format) {
                            depacketizer.restoreParameterSets(sps: track.videoFormat?.sps, pps: track.videoFormat?.pps)
                            if !forgeable || refusals.persisted(now: now, for: Self.refusalPersistence) { outcome.stop = reason }
                            continue
                        }
                        track.videoFormat = format
                    }
                    let time = place(unit.timestamp, of: track, at: index, sinceRecord: sinceRecord, into: &outcome.events)
                    guard track.videoFormat != nil else { continue }
                    announceFormats(with: track, at: index, into: &outcome.events)
                    outcome.events.append(.video(unit.nalUnits, time: time, isKeyframe: unit.containsIDR))
                }
                track.kind = .video(depacketizer)
            case .audio(var depacketizer, let format):
                for frame in depacketizer.push(ready, lostBefore: lost) {
                    let time = place(frame.timestamp, of: track, at: index, sinceRecord: sinceRecord, into: &outcome.events)
                    announceFormats(with: track, at: index, into: &outcome.events)
                    outcome.events.append(.audio(frame.data, time: time))
                }
                track.kind = .audio(depacketizer, format)
            case .unsupported:
                break
            }
        }
        return outcome
    }

    /// `timestamp` on the session's timeline, in the track's ticks; a jump starts a new timeline.
    private mutating func place(_ timestamp: UInt32, of track: IncomingTrack, at index: Int, sinceRecord: Double,
                                into events: inout [MediaSinkEvent]) -> MediaTime {
        let (ticks, restarted) = timeline.place(Int64(timestamp), track: index, arrival: sinceRecord)
        if restarted { events.append(.timelineRestarted) }
        return track.time(ticks)
    }

    /// The sink hears of a format before any media in it.
    private mutating func announceFormats(with track: IncomingTrack, at index: Int, into events: inout [MediaSinkEvent]) {
        tracks[index] = track
        let formats = tracks.formats
        guard formats.video != announcedFormats.video || formats.audio != announcedFormats.audio else { return }
        announcedFormats = formats
        events.append(.formats(video: formats.video, audio: formats.audio))
    }

    /// The RTCP report block for track `index`'s reception, if it has received anything.
    mutating func reportBlock(track index: Int) -> RTCPPacket.ReportBlock? {
        tracks[index].reception.reportBlock()
    }

    /// Refusals close together in time: a publisher that really switched to a refused format sends
    /// it at every keyframe, a forged packet once.
    struct RefusalStreak {
        private var first: UInt64?
        private var last: UInt64 = 0
        private var count = 0

        /// Counts a refusal at `now` (uptime nanoseconds); true once refusals have kept coming for
        /// `seconds`, no two of them further apart than that.
        mutating func persisted(now: UInt64, for seconds: Double) -> Bool {
            let window = UInt64(seconds * 1e9)
            if first == nil || now &- last > window {
                first = now
                count = 0
            }
            last = now
            count += 1
            return count >= 3 && now &- first! >= window
        }
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
