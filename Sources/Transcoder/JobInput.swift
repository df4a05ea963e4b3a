import Logging
import MediaCore
import Synchronization

/// What one publisher's session feeds a live job: the job's input as a `MediaSink`.
///
/// One session may feed the job several times: a publisher that goes silent for longer than the
/// media timeout (a covered camera, a backgrounded app) interrupts the job, and when it sends
/// again on the same session a new `LiveSource` resumes it; so does a publisher whose timestamps
/// jump (an encoder restarted with a new timestamp base), as a new timeline.
public final class JobInput: MediaSink {
    private let job: LiveLadderJob
    /// The stream the publisher pushes (`live/stream1_1`) and where from, for sources and logs.
    private let path: String
    private let publisher: String
    private let transport: String
    private let logger: Logger
    private let state = Mutex<State>(State())

    private struct State {
        var formats: (video: VideoFormat?, audio: AudioFormat?) = (nil, nil)
        var live: LiveSource?
        var attached = false
        var newTimeline = false
    }

    public init(job: LiveLadderJob, path: String, publisher: String, transport: String = "rtsp", logger: Logger) {
        self.job = job
        self.path = path
        self.publisher = publisher
        self.transport = transport
        self.logger = logger
    }

    public func setFormats(video: VideoFormat?, audio: AudioFormat?) {
        // A source is made with the formats of the moment; a later SPS goes in-band to the decoder.
        state.withLock { $0.formats = (video ?? $0.formats.video, audio ?? $0.formats.audio) }
    }

    public func writeVideo(_ nalUnits: [[UInt8]], time: MediaTime, isKeyframe: Bool) {
        let live: LiveSource? = state.withLock { state in
            if let existing = state.live, !existing.isEnded {
                // A successor waits (buffered, bounded) until the job has let the last one go.
                if !state.attached { state.attached = job.attach(existing, publisher: publisher) }
                return existing
            }
            guard let video = state.formats.video,
                  let made = try? LiveSource(url: "\(transport)://\(publisher)/\(path)", video: video, audio: state.formats.audio,
                                             transport: transport, startsNewTimeline: state.newTimeline,
                                             clock: job.options.clock) else { return nil }
            let resuming = state.live != nil
            state.live = made
            state.attached = job.attach(made, publisher: publisher)
            state.newTimeline = false
            if resuming { logger.info("publisher sends again on its session", metadata: ["stream.guid": "\(path)"]) }
            return made
        }
        live?.pushVideo(nalUnits: nalUnits, time: time, isKeyframe: isKeyframe)
    }

    public func writeAudio(_ frame: [UInt8], time: MediaTime) {
        state.withLock { $0.live }?.pushAudio(frame, time: time)
    }

    public func receiveNotification(name: String, value: String) {
        job.recordNotification(name, value: value)
    }

    public func end(reason: String) {
        state.withLock { $0.live }?.end()
    }

    public func timelineRestarted() {
        let ended: LiveSource? = state.withLock { state in
            state.newTimeline = true
            return state.live
        }
        logger.notice("publisher's timestamps jumped: a new timeline follows", metadata: ["stream.guid": "\(path)"])
        ended?.end()
    }

    /// The same limit the ANNOUNCE was held to, for an SPS that arrives in the stream.
    public func refusal(of format: VideoFormat) -> String? {
        job.refusal(ofPicture: format.width, format.height, from: path)
    }
}

extension LiveLadderJob {
    /// Why a publisher's picture of `width`×`height` is not decoded (more than 4 times its top's
    /// area), or nil when it may be.
    public func refusal(ofPicture width: Int, _ height: Int, from path: String) -> String? {
        guard width * height > maximumDecodedPixels else { return nil }
        return "\(path): picture \(width)x\(height) is more than 4 times the top variant's "
            + "\(ladder.top.width)x\(ladder.top.height); publish at most \(maximumDecodedPixels) pixels"
    }
}
