import Foundation
import Ingest
import Logging
import MediaCore
import NIOPosix
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
        /// Low-Latency HLS on every rung (`--hls-low-latency off` turns it off).
        public var hlsLowLatency = true
        /// `rtsp://host:port` of an origin every variant is also pushed to.
        public var origin: String?
        /// Asked before a publisher starts or resumes a ladder's job, with whether its top will be
        /// passed through (from the announced picture size) and whether it resumes a job waiting for
        /// its publisher to come back; a reason refuses the publish with 503 (the node would fall
        /// behind real time with it, or it is leaving service).
        public var admission: (@Sendable (Ladder, _ topPassesThrough: Bool, _ resuming: Bool) -> String?)?
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
    /// Seconds a publisher stays connected after its job ends (HARD_SUNSET gives publishers the
    /// grace period to find another node); 0 releases it at once.
    private let publisherRelease = Mutex<Double>(0)

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
        registry.publishers.revokePublisher(ladder.top.streamGuid, reason: "\(streamGuid) is no longer provisioned")
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
        // Each variant writes straight into its stream: players, origin push and SDP hints read it there.
        var sinks: [Int: any MediaSink] = [:]
        let paths = Dictionary(uniqueKeysWithValues: ladder.variants.map { ($0.level, $0.streamGuid) })
        for variant in ladder.variants {
            let stream = registry.stream(variant.streamGuid)
            stream.setLadder(paths)
            stream.setDeclaredBitRate(variant.bitRate, level: variant.level)
            sinks[variant.level] = stream
        }
        let listener = eventListener
        let registry = registry
        let (guid, top) = (ladder.streamGuid, ladder.top.streamGuid)
        let onEvent: @Sendable (LiveLadderJob.Event) -> Void = { [weak self] event in
            // A publisher still connected when its job ends (silent past grace on its session)
            // feeds nothing any more: it is disconnected, and a new publish starts a new job.
            if event.kind == "ended" || event.kind == "failed" {
                let delay = self?.publisherRelease.withLock { $0 } ?? 0
                if delay > 0 {
                    DispatchQueue.global().asyncAfter(deadline: .now() + delay) {
                        registry.publishers.revokePublisher(top, reason: "the node left service")
                    }
                } else {
                    registry.publishers.revokePublisher(top, reason: "the job of \(guid) ended")
                }
            }
            listener?(guid, event)
        }
        return LiveLadderJob(
            ladder: ladder, hlsDirectory: HLSLayout(ladderGuid: ladder.streamGuid).liveDirectory(dataDirectory: configuration.dataDirectory),
            options: configuration.transcode, grace: configuration.grace, mediaTimeout: configuration.mediaTimeout,
            hlsWindow: configuration.hlsWindow, hlsLowLatency: configuration.hlsLowLatency, sinks: sinks, logger: logger, loadShedder: configuration.loadShedder, onEvent: onEvent)
    }

    /// Stops every job and waits for their outputs to be finished (playlists ended, players told
    /// to leave). With `releasingPublishersAfter`, publishers stay connected that long first.
    public func shutdown(timeout: TimeInterval = 30, releasingPublishersAfter delay: Double = 0) {
        publisherRelease.withLock { $0 = delay }
        let (jobs, pushers) = state.withLock { (Array($0.jobs.values), $0.pushers.values.flatMap { $0 }) }
        jobs.forEach { $0.stop() }
        pushers.forEach { $0.stop() }
        jobs.forEach { $0.waitUntilEnded(timeout: timeout) }
        publisherRelease.withLock { $0 = 0 }
    }

    /// Jobs that have a publisher, or wait for theirs to come back: what a drain waits for.
    public var activeJobs: [LiveLadderJob] {
        jobs.filter { $0.state == .running || $0.state == .interrupted }
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
            let sps = request.sps
            if let sps, let refusal = job.refusal(ofPicture: sps.width, sps.height, from: request.path) {
                return .refuse(status: 415, reason: refusal)
            }
            // Publishing validation has already required an H.264 track.
            let topPassesThrough = sps.map {
                configuration.transcode.topMode.passesThrough(isH264: true, width: $0.width, height: $0.height, top: ladder.top)
            } ?? (configuration.transcode.topMode == .passthrough)
            if let refusal = configuration.admission?(ladder, topPassesThrough, job.state == .interrupted) {
                logger.warning("publish refused: \(refusal)", metadata: ["stream.guid": "\(ladder.streamGuid)"])
                return .refuse(status: 503, reason: refusal)
            }
            return .accept(JobInput(job: job, path: request.path, publisher: request.remoteAddress, transport: request.transport, logger: logger))
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
        return .accept(registry.relayStream(request.path))
    }
}
