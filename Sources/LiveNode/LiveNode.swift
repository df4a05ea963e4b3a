import Foundation
import Logging
import NIOPosix
import MediaCore
import RTSP
import RTSPServer
import Synchronization
import Transcoder

/// The live node's brain: which streams are provisioned, which job serves each, and where every
/// variant is republished. Decides every RTSP publish (it is the server's `PublishPolicy`).
public final class LiveNode: PublishPolicy, Sendable {
    public struct Configuration: Sendable {
        /// HLS goes to `dataDirectory/hls/<top guid>/`.
        public var dataDirectory: URL
        public var grace: Double = 30
        /// A publisher silent this long is treated as gone.
        public var mediaTimeout: Double = 5
        public var allowUnprovisioned = false
        /// Streams in the registry (every provisioned variant and relayed path) past which a new
        /// relayed path is refused: each holds a GOP cache.
        public var maximumStreams = 1024
        public var transcode = TranscodeOptions()
        public var hlsWindow = 6
        /// `rtsp://host:port` of an origin every variant is also pushed to.
        public var origin: String?
        /// Asked before a publisher starts or resumes a ladder's job, with whether its top will be
        /// passed through (from the announced picture size); a reason refuses the publish with 503
        /// (the node would fall behind real time with it).
        public var admission: (@Sendable (Ladder, _ topPassesThrough: Bool) -> String?)?
        /// Sheds the lowest rungs of the node's jobs when it cannot encode all of them in real time
        /// (nil: every rung drops frames by itself when its encoder falls behind).
        public var loadShedder: LoadShedder?
        public init(dataDirectory: URL) {
            self.dataDirectory = dataDirectory
        }
    }

    public enum ProvisionFailure: Error, Sendable, Equatable {
        case alreadyProvisioned(String)
        case notProvisioned(String)
    }

    public let configuration: Configuration
    public let registry: StreamRegistry
    let logger: Logger
    private let state = Mutex<(ladders: [String: Ladder], jobs: [String: LiveLadderJob], pushers: [String: [OriginPusher]])>(([:], [:], [:]))
    private let eventListener: (@Sendable (String, LiveLadderJob.Event) -> Void)?

    public init(configuration: Configuration, registry: StreamRegistry, logger: Logger = Logger(label: "abr.node"),
                onEvent: (@Sendable (String, LiveLadderJob.Event) -> Void)? = nil) {
        self.configuration = configuration
        self.registry = registry
        self.logger = logger
        self.eventListener = onEvent
    }

    // MARK: Provisions

    /// Adds a ladder; its job waits for the top variant's publisher.
    public func provision(_ ladder: Ladder) throws(ProvisionFailure) {
        try state.withLock { state throws(ProvisionFailure) in
            guard state.ladders[ladder.streamGuid] == nil else { throw .alreadyProvisioned(ladder.streamGuid) }
            state.ladders[ladder.streamGuid] = ladder
        }
        _ = job(for: ladder)
        if let origin = configuration.origin {
            let pushers = ladder.variants.compactMap {
                OriginPusher(stream: registry.stream($0.streamGuid), origin: origin, group: MultiThreadedEventLoopGroup.singleton, logger: logger)
            }
            state.withLock { $0.pushers[ladder.streamGuid] = pushers }
            pushers.forEach { $0.start() }
        }
        logger.info("provisioned", metadata: ["stream.guid": "\(ladder.streamGuid)", "variants": "\(ladder.variants.count)"])
    }

    /// Removes a ladder and ends its job cleanly.
    ///
    /// Its publisher is disconnected at once (it authenticated with this provision's credentials,
    /// which a new provision for the same guid may replace), its players are closed as the job
    /// ends, and its variants' streams leave the registry with their caches.
    public func removeProvision(_ streamGuid: String) throws(ProvisionFailure) {
        let (ladder, job, pushers) = try state.withLock { state throws(ProvisionFailure) in
            guard let ladder = state.ladders.removeValue(forKey: streamGuid) else { throw .notProvisioned(streamGuid) }
            return (ladder, state.jobs.removeValue(forKey: streamGuid), state.pushers.removeValue(forKey: streamGuid) ?? [])
        }
        registry.revokePublisher(ladder.top.streamGuid, reason: "\(streamGuid) is no longer provisioned")
        pushers.forEach { $0.stop() }
        job?.stop()
        job?.waitUntilEnded(timeout: 30)
        // A provision posted again meanwhile keeps the streams: its job writes to them.
        guard self.ladder(streamGuid) == nil else { return }
        for variant in ladder.variants {
            guard let stream = registry.existingStream(variant.streamGuid) else { continue }
            stream.end()
            registry.remove(stream)
        }
    }

    /// Origin push state per variant guid.
    public var originStatistics: [String: OriginPusher.Statistics] {
        state.withLock { state in
            Dictionary(uniqueKeysWithValues: state.pushers.values.flatMap { $0 }.map { ($0.stream.path, $0.statistics) })
        }
    }

    public var ladders: [Ladder] { state.withLock { $0.ladders.values.sorted { $0.streamGuid < $1.streamGuid } } }
    public func ladder(_ streamGuid: String) -> Ladder? { state.withLock { $0.ladders[streamGuid] } }
    public func job(_ streamGuid: String) -> LiveLadderJob? { state.withLock { $0.jobs[streamGuid] } }
    public var jobs: [LiveLadderJob] { state.withLock { $0.jobs.values.sorted { $0.ladder.streamGuid < $1.ladder.streamGuid } } }

    /// The ladder's job, a new one if the last ended (a provision outlives its jobs).
    private func job(for ladder: Ladder) -> LiveLadderJob {
        if let job = state.withLock({ $0.jobs[ladder.streamGuid] }), job.state != .ended, job.state != .failed { return job }
        let made = makeJob(ladder)
        let winner: LiveLadderJob = state.withLock { state in
            if let existing = state.jobs[ladder.streamGuid], existing.state != .ended, existing.state != .failed { return existing }
            state.jobs[ladder.streamGuid] = made
            return made
        }
        if winner === made { made.start() }
        return winner
    }

    private func makeJob(_ ladder: Ladder) -> LiveLadderJob {
        var sinks: [Int: any VariantSink] = [:]
        let paths = Dictionary(uniqueKeysWithValues: ladder.variants.map { ($0.level, $0.streamGuid) })
        for variant in ladder.variants {
            let stream = registry.stream(variant.streamGuid)
            stream.setLadder(paths)
            sinks[variant.level] = LiveStreamSink(stream: stream, variant: variant)
        }
        let listener = eventListener
        let registry = registry
        let (guid, top) = (ladder.streamGuid, ladder.top.streamGuid)
        let onEvent: @Sendable (LiveLadderJob.Event) -> Void = { event in
            // A publisher still connected when its job ends (silent past grace on its session)
            // feeds nothing any more: it is disconnected, and a new publish starts a new job.
            if event.kind == "ended" || event.kind == "failed" {
                registry.revokePublisher(top, reason: "the job of \(guid) ended")
            }
            listener?(guid, event)
        }
        return LiveLadderJob(
            ladder: ladder, hlsDirectory: configuration.dataDirectory.appendingPathComponent("hls/\(ladder.streamGuid)"),
            options: configuration.transcode, grace: configuration.grace, mediaTimeout: configuration.mediaTimeout,
            hlsWindow: configuration.hlsWindow, sinks: sinks, logger: logger, loadShedder: configuration.loadShedder, onEvent: onEvent)
    }

    /// Stops every job and waits for their outputs to be finished.
    public func shutdown(timeout: TimeInterval = 30) {
        let (jobs, pushers) = state.withLock { (Array($0.jobs.values), $0.pushers.values.flatMap { $0 }) }
        jobs.forEach { $0.stop() }
        pushers.forEach { $0.stop() }
        jobs.forEach { $0.waitUntilEnded(timeout: timeout) }
    }

    // MARK: PublishPolicy

    public func publisherCredentials(for path: String) -> StreamCredentials? {
        state.withLock { $0.ladders.values.first { $0.top.streamGuid == path }?.publisherCredentials }
    }

    public func decide(_ request: PublishRequest) -> PublishDecision {
        let ladder = state.withLock { $0.ladders.values.first { $0.top.streamGuid == request.path } }
        if let ladder {
            let job = job(for: ladder)
            guard job.acceptsPublisher else {
                return .refuse(status: 403, reason: "\(request.path) already has a publisher")
            }
            let sps = request.description.media.first(where: \.isH264)?.spropSPS.flatMap({ H264SPS($0) })
            if let sps, let refusal = Self.oversizeRefusal(path: request.path, width: sps.width, height: sps.height, ladder: ladder, job: job) {
                return .refuse(status: 415, reason: refusal)
            }
            // Publishing validation has already required an H.264 track.
            let topPassesThrough = sps.map {
                configuration.transcode.topMode.passesThrough(isH264: true, width: $0.width, height: $0.height, top: ladder.top)
            } ?? (configuration.transcode.topMode == .passthrough)
            if let refusal = configuration.admission?(ladder, topPassesThrough) {
                logger.warning("publish refused: \(refusal)", metadata: ["stream.guid": "\(ladder.streamGuid)"])
                return .refuse(status: 503, reason: refusal)
            }
            return .accept(JobPublishSink(job: job, request: request, logger: logger))
        }
        if state.withLock({ $0.ladders.values.contains { $0.variants.contains { $0.streamGuid == request.path } } }) {
            return .refuse(status: 403, reason: "\(request.path) is produced by this node; publish the top variant")
        }
        guard configuration.allowUnprovisioned else {
            return .refuse(status: 404, reason: "\(request.path) is not provisioned")
        }
        if registry.existingStream(request.path) == nil, registry.count >= configuration.maximumStreams {
            return .refuse(status: 503, reason: "the node serves \(configuration.maximumStreams) streams already; \(request.path) is not relayed")
        }
        return .accept(RelaySink(stream: registry.stream(request.path), registry: registry))
    }
}

extension LiveNode {
    /// A publisher's picture the job will not decode: more than 4 times its top's area.
    static func oversizeRefusal(path: String, width: Int, height: Int, ladder: Ladder, job: LiveLadderJob) -> String? {
        guard width * height > job.maximumDecodedPixels else { return nil }
        return "\(path): picture \(width)x\(height) is more than 4 times the top variant's "
            + "\(ladder.top.width)x\(ladder.top.height); publish at most \(job.maximumDecodedPixels) pixels"
    }
}

/// Feeds one publisher's media into its job.
///
/// One RTSP session may feed the job several times: a publisher that goes silent for longer than
/// the media timeout (a covered camera, a backgrounded app) interrupts the job, and when it sends
/// again on the same session a new `LiveSource` resumes it; so does a publisher whose timestamps
/// jump (an encoder restarted with a new timestamp base), as a new timeline.
final class JobPublishSink: PublishSink {
    private let job: LiveLadderJob
    private let request: PublishRequest
    private let logger: Logger
    private let source = Mutex<(live: LiveSource?, attached: Bool, newTimeline: Bool)>((nil, false, false))
    private let audio: (sampleRate: Int, channels: Int, config: [UInt8])?

    init(job: LiveLadderJob, request: PublishRequest, logger: Logger) {
        self.job = job
        self.request = request
        self.logger = logger
        audio = request.description.media.lazy.compactMap { media in media.aacFormat.map { (media.clockRate, $0.channels, $0.config) } }.first
    }

    func receiveVideo(_ unit: H264AccessUnit, ticks: Int64, format: VideoFormat) {
        let live: LiveSource? = source.withLock { current in
            if let existing = current.live, !existing.isEnded {
                // A successor waits (buffered, bounded) until the job has let the last one go.
                if !current.attached { current.attached = job.attach(existing, publisher: request.remoteAddress) }
                return existing
            }
            guard let made = try? LiveSource(url: "rtsp://\(request.remoteAddress)/\(request.path)", sps: format.sps, pps: format.pps,
                                             frameRate: format.frameRate, audio: audio, startsNewTimeline: current.newTimeline) else { return nil }
            let resuming = current.live != nil
            current = (made, job.attach(made, publisher: request.remoteAddress), false)
            if resuming { logger.info("publisher sends again on its session", metadata: ["stream.guid": "\(request.path)"]) }
            return made
        }
        live?.pushVideo(nalUnits: unit.nalUnits, ticks: ticks, isKeyframe: unit.containsIDR)
    }

    func receiveAudio(_ frame: [UInt8], ticks: Int64, format: AudioFormat) {
        source.withLock { $0.live }?.pushAudio(frame, ticks: ticks)
    }

    func receiveNotification(name: String, value: String) {
        job.recordNotification(name, value: value)
    }

    func publisherEnded(reason: String) {
        source.withLock { $0.live }?.end()
    }

    func timelineRestarted() {
        let ended: LiveSource? = source.withLock { current in
            current.newTimeline = true
            return current.live
        }
        logger.notice("publisher's timestamps jumped: a new timeline follows", metadata: ["stream.guid": "\(request.path)"])
        ended?.end()
    }

    /// The same limit the ANNOUNCE was held to, for an SPS that arrives in the stream.
    func refusal(of format: VideoFormat) -> String? {
        LiveNode.oversizeRefusal(path: request.path, width: format.width, height: format.height, ladder: job.ladder, job: job)
    }
}

/// Republishes one variant as the RTSP stream `<guid>_<level>`, with its bandwidth hints in SDP.
final class LiveStreamSink: VariantSink {
    let stream: LiveStream
    let variant: Variant
    private let audioRate = Atomic<Int>(48000)

    init(stream: LiveStream, variant: Variant) {
        self.stream = stream
        self.variant = variant
        stream.setHints(bandwidthKbps: (variant.bitRate + 999) / 1000, bandwidthTIAS: variant.bitRate,
                        attributes: ["x-abr-level:\(variant.level)", "x-abr-declared-bitrate:\(variant.bitRate)"])
    }

    func variantFormat(sps: [UInt8], pps: [UInt8], frameRate: Double, audio: (sampleRate: Int, channels: Int, config: [UInt8])?) {
        if let audio { audioRate.store(audio.sampleRate, ordering: .relaxed) }
        stream.setFormats(video: VideoFormat(sps: sps, pps: pps, frameRate: frameRate),
                          audio: audio.map { AudioFormat(sampleRate: $0.sampleRate, channels: $0.channels, config: $0.config) })
    }

    func variantVideo(_ nalUnits: [[UInt8]], time: MediaTime, isKeyframe: Bool) {
        stream.writeVideo(nalUnits: nalUnits, ticks: time.ticks(in: Self.videoClock), isKeyframe: isKeyframe)
    }

    func variantAudio(_ frame: [UInt8], time: MediaTime) {
        let rate = audioRate.load(ordering: .relaxed)
        guard rate > 0, rate <= Int(Int32.max) else { return }
        stream.writeAudio(frame, ticks: time.ticks(in: Rational(1, Int32(rate))))
    }

    /// RTP's H.264 clock.
    private static let videoClock = Rational(1, 90000)

    /// SDP carries: `b=AS` (kbit/s) and `b=TIAS` (bit/s) of the measured peak, declared until
    /// measured, and `a=x-abr-*` lines with the level, declared, average and peak rates, the
    /// switch thresholds and the keyframe interval.
    func variantHints(_ hint: BandwidthHints.VariantHint, keyframeInterval: Double) {
        // The same thresholds move this rung's players (SwitchingPolicy): the hints are defined once.
        stream.setRung(SwitchingPolicy.Rung(hint: hint))
        stream.setHints(bandwidthKbps: (hint.peakBitRate + 999) / 1000, bandwidthTIAS: hint.peakBitRate, attributes: [
            "x-abr-level:\(hint.abrLevel)",
            "x-abr-declared-bitrate:\(hint.declaredBitRate)",
            "x-abr-average-bitrate:\(hint.averageBitRate)",
            "x-abr-peak-bitrate:\(hint.peakBitRate)",
            "x-abr-upswitch-above:\(hint.upswitchAboveBitRate)",
            "x-abr-downswitch-below:\(hint.downswitchBelowBitRate)",
            "x-abr-keyframe-interval:\(keyframeInterval)",
        ])
    }

    func variantEnded() {
        stream.end()
    }
}
