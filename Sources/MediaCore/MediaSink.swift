/// Where timed media goes, on both sides of the engine: a publisher's session writes into its
/// job (or, for a relay, straight into a stream), and each variant of a job writes into the
/// stream its players and origin read. One vocabulary for both: formats, pictures as NAL units,
/// AAC frames, all at `MediaTime` on one timeline.
///
/// Calls come in order from one thread at a time (a publisher's event loop, a variant's queue).
public protocol MediaSink: AnyObject, Sendable {
    /// The formats media will be in: before the first picture, and whenever one changes.
    func setFormats(video: VideoFormat?, audio: AudioFormat?)
    /// One picture's NAL units (no start codes), in decode order, at its presentation time.
    /// Times of one track never go back except as `timelineRestarted` says.
    func writeVideo(_ nalUnits: [[UInt8]], time: MediaTime, isKeyframe: Bool)
    /// One raw AAC access unit at its presentation time.
    func writeAudio(_ frame: [UInt8], time: MediaTime)
    /// One Opus packet (20 ms at 48 kHz, for browsers) made from the same audio, at its
    /// presentation time, and the same 20 ms in the light rendition (`BrowserAudioRendition`).
    func writeOpus(_ packet: [UInt8], light: [UInt8]?, time: MediaTime)
    /// The ladder's current bandwidth hints for this variant (declared, measured, switch thresholds).
    func setBandwidthHints(_ hint: BandwidthHints.VariantHint, keyframeInterval: Double)
    /// A notification from the publisher (`SET_PARAMETER publisherBackground`, say).
    func receiveNotification(name: String, value: String)
    /// What follows is a new timeline (the publisher's timestamps jumped): times stay increasing
    /// across it, and a sink that keeps media for later (HLS) starts a new timeline segment.
    func timelineRestarted()
    /// Whether a format first seen in-band may go on: nil, or why this media must stop. Asked
    /// before any media of that format is written.
    func refusal(of format: VideoFormat) -> String?
    /// No more media: the publisher left (`reason` says how) or the job ended.
    func end(reason: String)
    /// How to ask this media's producer for a keyframe with a presentation time after the one
    /// given: a player moving down to this rung need not wait for the grid's next IDR. Only an
    /// encoder can make one; a stream passed through or published never sets this.
    func setKeyframeSource(_ request: @escaping @Sendable (_ after: MediaTime) -> Void)
}

extension MediaSink {
    public func setBandwidthHints(_ hint: BandwidthHints.VariantHint, keyframeInterval: Double) {}
    public func receiveNotification(name: String, value: String) {}
    public func timelineRestarted() {}
    public func writeOpus(_ packet: [UInt8], light: [UInt8]?, time: MediaTime) {}
    public func refusal(of format: VideoFormat) -> String? { nil }
    public func setKeyframeSource(_ request: @escaping @Sendable (_ after: MediaTime) -> Void) {}
}

/// One call a protocol's session makes on its sink, held as a value: a session works out what a
/// packet completes under its lock, then delivers these in order outside it.
public enum MediaSinkEvent: Sendable {
    case formats(video: VideoFormat?, audio: AudioFormat?)
    case video([[UInt8]], time: MediaTime, isKeyframe: Bool)
    case audio([UInt8], time: MediaTime)
    case timelineRestarted

    public func deliver(to sink: any MediaSink) {
        switch self {
        case let .formats(video, audio): sink.setFormats(video: video, audio: audio)
        case let .video(units, time, isKeyframe): sink.writeVideo(units, time: time, isKeyframe: isKeyframe)
        case let .audio(frame, time): sink.writeAudio(frame, time: time)
        case .timelineRestarted: sink.timelineRestarted()
        }
    }
}
