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

    public init() {}

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
        return events
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
