import DequeModule
import Dispatch
import Foundation
import FFmpegBridge
import Logging
import MediaCore
import Synchronization

/// A live ladder: the same engine as `LadderJob`, fed by publishers instead of a file, running for
/// as long as the stream is provisioned and published.
///
/// Lifecycle: `waitingForPublisher → running ⇄ interrupted → ended` (or `failed`). A publisher that
/// goes away interrupts the job: players stay attached, playlists stop growing, a grace timer runs.
/// A publisher that comes back within grace resumes the same job: the same encoders, the timeline
/// carrying on from where it stopped, an IDR first, and a new init segment plus a discontinuity in
/// HLS where the passed-through top's format changed. After grace, or `stop()`, every output is
/// finished (`EXT-X-ENDLIST`, players closed).
///
/// Threads: publishers call `attach`/`detach` from any thread; the job runs on its own thread.
public final class LiveLadderJob: SheddableJob, @unchecked Sendable {
    // @unchecked: `shared` is guarded by `condition`; everything else mutable is touched only on
    // the job's own thread (`pipelines`, `grid`, `timelineEnd`, ...), or is itself thread-safe.

    public typealias State = LiveJobLifecycle.State

    public struct Event: Sendable, Codable, Equatable {
        /// Unix time in seconds.
        public var time: Double
        /// `publisherConnected`, `interrupted`, `resumed`, `ended`, `failed`, `hintsUpdated`, or a
        /// publisher notification such as `publisherBackground`.
        public var kind: String
        public var detail: String
    }

    public struct VariantStatus: Sendable, Codable {
        public var streamGuid: String
        public var abrLevel: Int
        public var width: Int
        public var height: Int
        public var passthrough: Bool
        public var framesIn: Int
        public var framesOut: Int
        public var droppedFrames: Int
        /// Audio packets dropped because this variant's queue was a whole audio room behind.
        public var droppedAudioPackets: Int
        public var fps: Double
        public var averageBitRate: Int
        public var peakBitRate: Int
        /// Latency this variant adds from a picture's arrival to its sending, milliseconds.
        public var latencyP50: Double?
        public var latencyP99: Double?
        /// Seconds this variant's queue has spent scaling and encoding: the capacity estimate's input.
        public var busySeconds: Double
        /// HLS segments that could not be written (disk full...) and were skipped; the job goes on.
        public var segmentWriteFailures: Int
        /// The node is over capacity and stopped encoding this rung (lowest rungs go first).
        public var shed: Bool
        /// Frames not encoded while the rung was shed.
        public var shedFrames: Int
    }

    public struct Status: Sendable, Codable {
        public var streamGuid: String
        public var state: State
        public var publisher: String?
        /// How the publisher sends: `rtsp`, `rtmp` or `srt`.
        public var publisherProtocol: String?
        public var publisherSince: Double?
        public var sourceWidth: Int?
        public var sourceHeight: Int?
        public var sourceFrameRate: Double?
        /// The publisher's video as an RFC 6381 CODECS string (`avc1.64001f`).
        public var sourceCodecs: String?
        public var droppedAtIngest: Int
        /// Publisher notifications not recorded: unknown names, or over the rate limit.
        public var notificationsRefused: Int
        public var variants: [VariantStatus]
    }

    public let ladder: Ladder
    /// `DATA_DIR/hls/<top guid>`: `master.m3u8`, `abr.json` and a folder per variant.
    public let hlsDirectory: URL
    public let grace: Double
    let options: TranscodeOptions
    let mediaTimeout: Double
    let hlsWindow: Int
    /// Low-Latency HLS: parts, blocking reloads, preload hints and rendition reports.
    let hlsLowLatency: Bool
    let sinks: [Int: any MediaSink]
    let logger: Logger
    let onEvent: (@Sendable (Event) -> Void)?
    /// The node's cores this job shares with the others: its thread plan is sized for its share.
    let coreBudget: CoreBudget
    /// Sheds this job's lower rungs when the node cannot encode everything in real time (nil: never).
    let loadShedder: LoadShedder?

    private let condition = NSCondition()
    private var shared: Shared
    /// Monotonic seconds: the lifecycle's and the notification budget's clock.
    let clock: @Sendable () -> Double

    private struct Shared {
        var lifecycle: LiveJobLifecycle
        var notifications = RateBudget(burst: LiveLadderJob.notificationBurst, perSecond: LiveLadderJob.notificationsPerSecond)
        var pendingSource: (source: LiveSource, publisher: String)?
        var currentSource: LiveSource?
        var publisher: String?
        var publisherSince: Double?
        var events = Deque<Event>()
        var sourceFormat: (width: Int, height: Int, frameRate: Double?, codecs: String?)?
        var droppedAtIngest = 0
        var notificationsRefused = 0
        /// Seconds spent running before the current publisher, and when it started: rates are
        /// per second of publishing, not of waiting.
        var publishedSeconds = 0.0
        var runningSince: UInt64?
    }

    // Job thread only.
    private var pipelines: [VariantPipeline] = []
    private var grid: KeyframeGrid?
    private var audioTrack: AudioTrack?
    /// Made with the outputs, kept across sessions that keep the audio format.
    private var browserAudio: BrowserAudio?
    private var passthroughTop = false
    private var topExtradata: [UInt8] = []
    private var timelineEnd = MediaTime.zero(ArrivalTimes.timeBase)
    private var decoderThreads = 1
    private var lastHints: BandwidthHints?
    /// The rate the encoders were opened with (the publisher's, or a plausible one when its SDP
    /// has none): stable, unlike a measured rate, so hints only change when measurements do.
    private let outputFrameRate = Atomic<Double>(0)
    private var thread: Thread?
    private let arrivals = ArrivalTimes()

    /// The largest picture the job decodes: 4× the top variant's area, so a publisher may send a
    /// larger source than the top (it is scaled down) but an in-band SPS cannot make the decoder
    /// allocate for 16384×16384.
    public var maximumDecodedPixels: Int { max(4 * ladder.top.width * ladder.top.height, 1920 * 1080) }


    /// Events kept for the control plane; older ones are dropped.
    public static let maximumEvents = 1000
    /// How long a first session may take to show its frame rate (`LiveSource.videoFrameRate`) before
    /// the encoders open at 30 fps: the 12 it looks at take 0.4 s at 30 fps.
    static let frameRateWait = 2.0

    public init(ladder: Ladder, hlsDirectory: URL, options: TranscodeOptions, grace: Double = 30, mediaTimeout: Double = 5,
                hlsWindow: Int = 6, hlsLowLatency: Bool = true, sinks: [Int: any MediaSink] = [:], logger: Logger = Logger(label: "abr.live"),
                coreBudget: CoreBudget = .node, loadShedder: LoadShedder? = nil,
                clock: @escaping @Sendable () -> Double = { ProcessInfo.processInfo.systemUptime },
                onEvent: (@Sendable (Event) -> Void)? = nil) {
        self.ladder = ladder
        self.hlsDirectory = hlsDirectory
        var options = options
        options.backpressure = .dropUntilKeyframe
        // A second of frames: a publisher's burst after reconnecting, or a decoder re-initialising
        // on a new size, must not count as a variant falling behind.
        options.inboxCapacity = max(options.inboxCapacity, 32)
        self.options = options
        self.grace = grace
        self.mediaTimeout = mediaTimeout
        self.hlsWindow = hlsWindow
        self.hlsLowLatency = hlsLowLatency
        self.sinks = sinks
        var logger = logger
        logger[metadataKey: "stream.guid"] = "\(ladder.streamGuid)"
        self.logger = logger
        self.onEvent = onEvent
        self.coreBudget = coreBudget
        self.loadShedder = loadShedder
        self.clock = clock
        shared = Shared(lifecycle: LiveJobLifecycle(grace: grace))
    }

    /// Starts the job's thread; it waits for a publisher. The job counts in the node's core budget
    /// from now until it ends, so ladders provisioned together plan for each other.
    public func start() {
        coreBudget.join()
        loadShedder?.register(self)
        let thread = Thread { [self] in main() }
        thread.name = "abr.live.\(ladder.name)"
        thread.stackSize = 4 << 20
        self.thread = thread
        thread.start()
    }

    public var state: State { withShared { $0.lifecycle.state } }
    public var events: [Event] { withShared { Array($0.events) } }

    /// A publisher started recording; its media arrives through `source`. False when the job
    /// already has a publisher or has ended.
    public func attach(_ source: LiveSource, publisher: String) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard shared.lifecycle.offerPublisher() else { return false }
        shared.pendingSource = (source, publisher)
        condition.broadcast()
        return true
    }

    /// Whether a publisher may attach now.
    public var acceptsPublisher: Bool {
        withShared { $0.lifecycle.acceptsPublisher }
    }

    /// A publisher notification (`SET_PARAMETER publisherBackground`, ...), kept as an event.
    /// The notifications a publisher may send (Red5's telephony-interrupt names); anything else
    /// would let a publisher write arbitrary rows into the node's history.
    public static let publisherNotificationNames: Set<String> = ["publisherBackground", "publisherForeground", "publisherInterrupt"]
    /// Notifications kept: a burst of this many, refilled at `notificationsPerSecond`.
    public static let notificationBurst = 20.0
    public static let notificationsPerSecond = 2.0
    public static let maximumNotificationValue = 256

    public func recordNotification(_ name: String, value: String) {
        let now = clock()
        let accepted: Bool = withShared { shared in
            guard Self.publisherNotificationNames.contains(name), shared.notifications.take(now: now) else {
                shared.notificationsRefused += 1
                return false
            }
            return true
        }
        guard accepted else { return }
        addEvent(name, String(value.utf8.prefix(Self.maximumNotificationValue)) ?? "")
    }

    /// Ends the job: the current publisher's input ends, outputs are finished.
    public func stop() {
        condition.lock()
        shared.lifecycle.stop()
        shared.currentSource?.end()
        condition.broadcast()
        condition.unlock()
    }

    /// Waits for the job's thread to finish everything (after `stop()` or grace).
    @discardableResult
    public func waitUntilEnded(timeout: TimeInterval) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock()
        defer { condition.unlock() }
        while !shared.lifecycle.isFinished {
            if !condition.wait(until: deadline) { return false }
        }
        return true
    }

    public var status: Status {
        let (state, publisher, transport, since, format, dropped, elapsed, refused) = withShared {
            ($0.lifecycle.state, $0.publisher, $0.currentSource?.transport, $0.publisherSince, $0.sourceFormat, $0.droppedAtIngest + ($0.currentSource?.droppedFrames ?? 0),
             $0.publishedSeconds + ($0.runningSince.map(seconds(since:)) ?? 0), $0.notificationsRefused)
        }
        let variants = pipelineSnapshot.map { pipeline -> VariantStatus in
            let s = pipeline.statistics
            return VariantStatus(streamGuid: pipeline.variant.streamGuid, abrLevel: pipeline.variant.level, width: pipeline.variant.width,
                                 height: pipeline.variant.height, passthrough: pipeline.isPassthrough, framesIn: s.framesIn,
                                 framesOut: s.framesOut, droppedFrames: s.dropped, droppedAudioPackets: s.droppedAudio,
                                 fps: elapsed > 0 ? (Double(s.framesOut) / elapsed * 10).rounded() / 10 : 0,
                                 averageBitRate: s.averageBitRate, peakBitRate: s.peakBitRate,
                                 latencyP50: s.latencyP50, latencyP99: s.latencyP99, busySeconds: s.busySeconds,
                                 segmentWriteFailures: s.segmentWriteFailures, shed: pipeline.isShed, shedFrames: s.shedFrames)
        }
        return Status(streamGuid: ladder.streamGuid, state: state, publisher: publisher, publisherProtocol: transport, publisherSince: since,
                      sourceWidth: format?.width, sourceHeight: format?.height, sourceFrameRate: format?.frameRate ?? measuredFrameRate(variants, elapsed: elapsed),
                      sourceCodecs: format?.codecs, droppedAtIngest: dropped, notificationsRefused: refused, variants: variants)
    }

    private func seconds(since start: UInt64) -> Double {
        options.clock.seconds(since: start)
    }

    /// Publishers over RTSP rarely declare a frame rate: the top variant's input rate stands in.
    private func measuredFrameRate(_ variants: [VariantStatus], elapsed: Double) -> Double? {
        guard elapsed >= 1, let top = variants.first(where: { $0.abrLevel == ladder.top.level }), top.framesIn > 0 else { return nil }
        return (Double(top.framesIn) / elapsed * 100).rounded() / 100
    }

    // MARK: - Load shedding

    /// The rungs below the top that this job encodes (a passed-through or encoded top is never shed).
    public func sampleRungLoads() -> [RungLoad] {
        let encoded = pipelineSnapshot.filter { !$0.isPassthrough && $0.variant.level > 1 }
        let bottomUp = encoded.map(\.variant.level).sorted(by: >)
        return encoded.map { pipeline in
            RungLoad(rung: RungID(job: ladder.streamGuid, level: pipeline.variant.level),
                     fromBottom: bottomUp.firstIndex(of: pipeline.variant.level) ?? 0,
                     leastQueued: pipeline.takeLeastQueuedFrames(), dropped: pipeline.statistics.dropped)
        }
    }

    public func setShed(_ shed: Bool, level: Int) {
        guard let pipeline = pipelineSnapshot.first(where: { $0.variant.level == level && !$0.isPassthrough }) else { return }
        pipeline.setShed(shed)
        addEvent(shed ? "rungShed" : "rungRestored",
                 shed ? "node over capacity: level \(level) stops encoding so the others keep real time"
                      : "node has room again: level \(level) resumes at the next keyframe")
        logger.notice("\(shed ? "rung shed" : "rung restored")", metadata: ["level": "\(level)"])
    }

    /// The current hints (declared until measured).
    public var hints: BandwidthHints { makeHints(pipelineSnapshot) }

    // MARK: - Job thread

    private var pipelineSnapshot: [VariantPipeline] { withShared { _ in pipelines } }

    private func main() {
        while true {
            condition.lock()
            var step = shared.lifecycle.next(now: clock())
            while case let .wait(deadline) = step {
                if let deadline {
                    _ = condition.wait(until: Date().addingTimeInterval(max(0, deadline - clock())))
                } else {
                    condition.wait()
                }
                step = shared.lifecycle.next(now: clock())
            }
            guard case let .run(resuming) = step, let (source, publisher) = shared.pendingSource else {
                condition.unlock()
                if case let .finish(reason) = step { finish(reason: reason) } else { finish(reason: "publisher lost before its session") }
                return
            }
            shared.pendingSource = nil
            shared.currentSource = source
            shared.publisher = publisher
            shared.publisherSince = Date().timeIntervalSince1970
            shared.runningSince = options.clock.nanoseconds
            if let video = source.bestVideoStream {
                let sps = H264.parameterSets(fromExtradata: video.parameters.extradata).sps.first
                shared.sourceFormat = (video.width, video.height, video.frameRate.isValid ? video.frameRate.doubleValue : nil,
                                       sps.flatMap { H264.codecString(sps: $0) })
            }
            condition.broadcast()
            condition.unlock()
            addEvent(resuming ? "resumed" : "publisherConnected", publisher)
            logger.info("\(resuming ? "publisher resumed" : "publisher connected")", metadata: ["publisher": "\(publisher)"])

            do {
                try runSession(source, resuming: resuming)
            } catch {
                logger.error("live ingest failed: \(error)")
                addEvent("error", "\(error)")
            }

            // Nothing reads this source any more (its publisher left, or went silent): a publisher
            // that sends again on the same session gets a new one, and the job resumes.
            source.end()
            condition.lock()
            shared.droppedAtIngest += source.droppedFrames
            shared.currentSource = nil
            shared.publisher = nil
            shared.publishedSeconds += shared.runningSince.map(seconds(since:)) ?? 0
            shared.runningSince = nil
            guard shared.lifecycle.publisherLeft(now: clock()) != nil else {
                condition.unlock()
                finish(reason: "stopped")
                return
            }
            condition.broadcast()
            condition.unlock()
            addEvent("interrupted", "publisher gone; waiting \(Int(grace)) s for it to return")
            logger.info("publisher gone; grace period started", metadata: ["grace": "\(grace)"])
        }
    }

    private func runSession(_ source: LiveSource, resuming: Bool) throws {
        guard var video = source.bestVideoStream else { throw TranscodeError.badInput("\(source.url) has no video") }
        let sourceAudio = source.streams.first { $0.kind == .audio }
        if !video.frameRate.isValid {
            // Encoders open once, at the first session's rate; a resumed session keeps it.
            let rate = pipelines.isEmpty ? source.videoFrameRate(waitingUpTo: Self.frameRateWait) : outputFrameRate.load(ordering: .relaxed)
            if let rate, rate > 0 {
                video.frameRate = Rational(framesPerSecond: rate)
                withShared { $0.sourceFormat?.frameRate = rate }
            }
        }
        var sessionAudio: SessionAudio?
        if pipelines.isEmpty {
            try setUp(video: video, audio: sourceAudio)
            sessionAudio = audioTrack.map(SessionAudio.init(track:))
        } else {
            let (audio, fit) = SessionAudio.fit(sourceAudio, to: audioTrack)
            sessionAudio = audio
            switch fit {
            case let .reencoded(from, to):
                addEvent("audioReencoded", "the publisher's audio is \(from); it is encoded again as the job's \(to)")
                logger.notice("resumed publisher's audio encoded again in the job's format", metadata: ["from": "\(from)", "to": "\(to)"])
            case let .leftOut(reason):
                addEvent("audioLeftOut", "the publisher's audio is left out: \(reason)")
                logger.warning("resumed publisher's audio left out: \(reason)")
            case .asIs, nil:
                break
            }
            grid?.forceNextKeyframe()
            if source.startsNewTimeline {
                // The publisher's timestamps jumped: each variant's HLS starts a new timeline segment.
                pipelines.forEach { $0.submit(.pause) }
            }
            if passthroughTop, video.parameters.extradata != topExtradata, let top = pipelines.first(where: \.isPassthrough) {
                top.submit(.changeFormat(try video.parameters.copy(), timeBase: video.timeBase, time: timelineEnd))
                topExtradata = video.parameters.extradata
            }
        }
        let decoder = try VideoDecoder(stream: video, threads: decoderThreads, maximumPixels: maximumDecodedPixels, lowDelay: true)
        var ingest = DecodeLoop(source: source, video: video, audio: sessionAudio, decoder: decoder, pipelines: pipelines, grid: grid!,
                            clock: options.clock, started: options.clock.nanoseconds, progress: { [self] _ in refreshHints() }, cancellation: Cancellation(),
                            isLive: true, logger: logger)
        ingest.timelineOffset = timelineEnd
        ingest.idleLimit = mediaTimeout
        ingest.arrivals = arrivals
        ingest.browserAudio = sessionAudio == nil ? nil : browserAudio
        defer {
            grid = ingest.grid
            timelineEnd = max(timelineEnd, ingest.timelineEnd)
        }
        try ingest.run()
    }

    private func setUp(video: StreamInfo, audio: StreamInfo?) throws {
        audioTrack = try audio.flatMap { try AudioTrack(stream: $0) }
        browserAudio = audioTrack.flatMap { BrowserAudio(track: $0, sinks: sinks.sorted { $0.key < $1.key }.map(\.value), logger: logger) }
        var passesThrough = LadderPlan.topMatches(options.topMode, video: video, top: ladder.top)
        if passesThrough, ladder.webRTCSafe, LadderPlan.mayReorder(video) {
            // The provision asked for rungs WebRTC can carry: a top with B-frames is encoded.
            passesThrough = false
            logger.info("the top is encoded, not passed through: the source may have B-frames and the provision asks for WebRTC-safe rungs")
        }
        let plan = LadderPlan(ladder: ladder, video: video, passthroughTop: passesThrough, options: options, cores: coreBudget.share)
        passthroughTop = plan.passthroughTop
        topExtradata = video.parameters.extradata
        grid = plan.grid
        outputFrameRate.store(plan.frameRate, ordering: .relaxed)
        decoderThreads = plan.threads.decoderThreads
        logger.info("thread plan", metadata: ["cores": "\(coreBudget.share) of \(coreBudget.cores)", "decoder": "\(decoderThreads)",
                                              "encoders": "\(plan.threads.encoderThreads.sorted { $0.key < $1.key }.map(\.value))"])
        let made = try plan.makePipelines(ladder: ladder, video: video) { variant in
            VariantOutput(
                paths: .init(mp4: nil, hlsDirectory: hlsDirectory.appendingPathComponent(HLSLayout(ladderGuid: ladder.streamGuid).variantFolder(level: variant.level)),
                             // Low latency keeps ten segments at least, so a delta update (`_HLS_skip`)
                             // has segments beyond its six-target-duration boundary to leave out.
                             hlsWindow: hlsLowLatency ? max(hlsWindow, 10) : hlsWindow,
                             maximumSegmentDuration: 3 * options.keyframeInterval, lowLatency: hlsLowLatency,
                             sink: sinks[variant.level], arrivals: arrivals),
                audio: audioTrack, frameRate: plan.frameRate, clock: options.clock)
        }
        withShared { _ in pipelines = made }
        try FileManager.default.createDirectory(at: hlsDirectory, withIntermediateDirectories: true)
        refreshHints()
    }

    private func finish(reason: String) {
        defer { coreBudget.leave() }
        loadShedder?.unregister(self)
        let group = DispatchGroup()
        pipelines.forEach { $0.finish(group: group) }
        group.wait()
        if pipelines.isEmpty { sinks.values.forEach { $0.end(reason: "the job ended") } }
        refreshHints()
        let failure = pipelines.compactMap { $0.statistics.failure }.first
        withShared { $0.lifecycle.finished(failed: failure != nil) }
        // The event first: whoever waits for the end finds it in the history.
        addEvent(failure == nil ? "ended" : "failed", failure ?? reason)
        condition.lock()
        condition.broadcast()
        condition.unlock()
        logger.info("live job ended: \(failure ?? reason)")
    }

    /// Rewrites `master.m3u8` and `abr.json`, and tells the sinks, when the measurements changed.
    private func refreshHints() {
        guard !pipelines.isEmpty else { return }
        let hints = makeHints(pipelines)
        guard hints != lastHints else { return }
        lastHints = hints
        do {
            try LadderHints.write(hints, ladder: ladder, master: hlsDirectory.appendingPathComponent(HLSLayout.masterPlaylist),
                                  hintsFile: hlsDirectory.appendingPathComponent(HLSLayout.hintsFile), durable: false)
        } catch {
            logger.warning("cannot write hints: \(error)")
        }
        for hint in hints.variants { sinks[hint.abrLevel]?.setBandwidthHints(hint, keyframeInterval: hints.keyframeInterval) }
        addEvent("hintsUpdated", hints.variants.map { "L\($0.abrLevel) avg \($0.averageBitRate) peak \($0.peakBitRate)" }.joined(separator: ", "))
    }

    private func makeHints(_ pipelines: [VariantPipeline]) -> BandwidthHints {
        let frameRate = withShared { $0.sourceFormat?.frameRate } ?? outputFrameRate.load(ordering: .relaxed)
        let measurements = Dictionary(pipelines.map { pipeline in
            let s = pipeline.statistics
            return (pipeline.variant.level, LadderHints.Measurement(codecs: s.codecs, averageBitRate: s.averageBitRate, peakBitRate: s.peakBitRate))
        }, uniquingKeysWith: { first, _ in first })
        return LadderHints.make(ladder: ladder, frameRate: frameRate, keyframeInterval: options.keyframeInterval,
                                passthroughLevel: pipelines.first { $0.isPassthrough }?.variant.level, measurements: measurements)
    }

    private func addEvent(_ kind: String, _ detail: String) {
        let event = Event(time: Date().timeIntervalSince1970, kind: kind, detail: detail)
        withShared { shared in
            shared.events.append(event)
            if shared.events.count > Self.maximumEvents { shared.events.removeFirst(shared.events.count - Self.maximumEvents) }
        }
        onEvent?(event)
    }

    private func withShared<T>(_ body: (inout Shared) -> T) -> T {
        condition.lock()
        defer { condition.unlock() }
        return body(&shared)
    }
}
