/// A publisher's elementary streams as a container demuxer hands them over (MPEG-TS from SRT:
/// H.264 access units in Annex B, AAC in ADTS frames, 90 kHz times), turned into what a
/// `MediaSink` takes: formats from the in-band SPS/PPS and ADTS headers, NAL units, raw AAC
/// frames, one timeline. A value, fed in order; it keeps no socket and no clock.
public struct ElementaryStreams: Sendable {
    /// MPEG-TS's clock.
    public static let clock = Rational(1, 90000)
    private var video: VideoFormat?
    private var audio: AudioFormat?
    private var timeline = PublisherTimeline(wrapBits: 33, ticksPerSecond: 90000)
    /// Parameter sets seen, kept until both have come (they may arrive in separate access units).
    private var sps: [UInt8]?
    private var pps: [UInt8]?
    public private(set) var droppedAudioFrames = 0
    /// Video access units dropped for holding too many NAL units.
    public private(set) var droppedAccessUnits = 0
    /// Whether the container announced an AAC track: its format comes with its first ADTS frame,
    /// which a muxer may interleave up to about a second after the first pictures.
    private let awaitsAudio: Bool
    /// Video events held until the audio format is known, so that the sink's first formats carry
    /// both tracks: a live source is made with the tracks of its first picture and cannot add one.
    private var heldForAudio: [MediaSinkEvent] = []
    private var heldSince: Int64?
    private var stoppedAwaitingAudio = false
    /// How much video (90 kHz) is held for a late audio format before the video goes on without it.
    public static let audioFormatWait: Int64 = 2 * 90000
    /// The most events held while waiting (a stream of tiny access units cannot grow the hold).
    public static let maximumHeldEvents = 512

    /// - Parameter awaitsAudio: the container announced an AAC track; video is held (at most
    ///   `audioFormatWait` of it) until that track's format is known.
    public init(awaitsAudio: Bool = false) {
        self.awaitsAudio = awaitsAudio
    }

    public var videoFormat: VideoFormat? { video }

    /// One H.264 access unit (Annex B) at presentation time `pts` (90 kHz). Nothing before the
    /// first SPS/PPS comes out: no decoder could use it. An access unit of more than
    /// `H264.maximumNALUnitsPerAccessUnit` NAL units is dropped whole, and counted.
    public mutating func video(annexB bytes: [UInt8], pts: Int64, isKeyframe: Bool, frameRate: Double? = nil) -> [MediaSinkEvent] {
        guard let split = H264.annexBUnits(bytes, maximumUnits: H264.maximumNALUnitsPerAccessUnit) else {
            droppedAccessUnits += 1
            return []
        }
        let units = split.map(Array.init).filter { !$0.isEmpty && ($0[0] & 0x1F) != H264.NALType.accessUnitDelimiter.rawValue }
        guard !units.isEmpty else { return [] }
        var events: [MediaSinkEvent] = []
        for unit in units {
            switch unit[0] & 0x1F {
            case H264.NALType.sps.rawValue: sps = unit
            case H264.NALType.pps.rawValue: pps = unit
            default: break
            }
        }
        if let sps, let pps, sps != video?.sps || pps != video?.pps, let format = VideoFormat(sps: sps, pps: pps, frameRate: frameRate ?? video?.frameRate) {
            video = format
            events.append(.formats(video: video, audio: audio))
        }
        guard video != nil else { return [] }
        let (time, restarted) = timeline.place(pts, track: 0)
        if restarted { events.append(.timelineRestarted) }
        let keyframe = isKeyframe || units.contains { $0[0] & 0x1F == H264.NALType.idrSlice.rawValue }
        events.append(.video(units, time: MediaTime(ticks: time, timeBase: Self.clock), isKeyframe: keyframe))
        return holdingForAudio(events, at: time)
    }

    /// Video events while the announced audio format has not come: held, until the wait is over
    /// (then they go out, and video no longer waits).
    private mutating func holdingForAudio(_ events: [MediaSinkEvent], at time: Int64) -> [MediaSinkEvent] {
        guard awaitsAudio, audio == nil, !stoppedAwaitingAudio else { return events }
        heldForAudio += events
        let since = heldSince ?? time
        heldSince = since
        guard time - since >= Self.audioFormatWait || heldForAudio.count >= Self.maximumHeldEvents else { return [] }
        return releaseHeld()
    }

    private mutating func releaseHeld() -> [MediaSinkEvent] {
        stoppedAwaitingAudio = true
        defer { heldForAudio = [] }
        return heldForAudio
    }

    /// What is still held at the end of the stream (video that waited for audio that never came).
    public mutating func finish() -> [MediaSinkEvent] {
        releaseHeld()
    }

    /// A PES payload of AAC in ADTS frames (one or several) starting at `pts` (90 kHz).
    public mutating func audio(adts bytes: [UInt8], pts: Int64) -> [MediaSinkEvent] {
        var events: [MediaSinkEvent] = []
        var offset = 0
        var frameIndex: Int64 = 0
        while offset < bytes.count, let header = ADTSHeader(bytes[offset...]), offset + header.frameLength <= bytes.count {
            defer {
                offset += header.frameLength
                frameIndex += 1
            }
            let rate = AAC.sampleRates[header.samplingFrequencyIndex]
            let format = AudioFormat(sampleRate: rate, channels: max(1, header.channelConfiguration), config: header.audioSpecificConfig)
            if format != audio {
                audio = format
                events.append(.formats(video: video, audio: audio))
                // The held pictures' formats now name the audio too: a sink that takes formats
                // as given (not merged) must not lose the track again.
                events += releaseHeld().map { event in
                    if case let .formats(video, nil) = event { return .formats(video: video, audio: format) }
                    return event
                }
            }
            let frame = Array(bytes[(offset + header.headerLength)..<(offset + header.frameLength)])
            guard !frame.isEmpty else {
                droppedAudioFrames += 1
                continue
            }
            let (time, restarted) = timeline.place(pts + frameIndex * 1024 * 90000 / Int64(rate), track: 1)
            if restarted { events.append(.timelineRestarted) }
            events.append(.audio(frame, time: MediaTime(ticks: time, timeBase: Self.clock)))
        }
        return events
    }
}
