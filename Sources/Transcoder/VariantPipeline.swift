import Dispatch
import Foundation
import FFmpegBridge
import LadderQuality
import MediaCore
import Synchronization

/// One variant's work on its own serial queue (an `EncoderThread`) behind a bounded inbox: scale → encode → package,
/// or, for a passed-through top, package the source's own packets.
///
/// Thread affinity: `submit` and `finish` are called from the ingest thread only; everything
/// they enqueue runs on `queue`, which alone touches the scaler and encoder. The outputs (HLS,
/// MP4, the players' stream) are touched by `outputQueue` when the rung has one, else by `queue`.
final class VariantPipeline: @unchecked Sendable {
    // @unchecked: mutable state is either confined to `queue` (codec objects), to the output
    // queue (`output`), to the ingest thread (`awaitingKeyframe`), or inside `state` (a Mutex).

    enum Work {
        case encode(H264EncoderSettings)
        case passthrough(CodecParameters, timeBase: Rational)
    }

    enum Input {
        case frame(Frame, KeyframeGrid.Decision)
        case packet(Packet, KeyframeGrid.Decision)
        case audio(Packet)
        /// A new publisher's video format for a passed-through variant, starting at `time`.
        case changeFormat(CodecParameters, timeBase: Rational, time: MediaTime)
        /// Decode times of encoded pictures lead their presentation by this much (in the video time
        /// base), as the passed-through top's B-frames do, so every variant's fMP4 track starts its
        /// decode timeline at the same point and IDRs line up in HLS.
        case decodeOffset(Int64)
        /// The rung is shed: what the encoder holds is sent, and the open segment ends there.
        case pause
    }

    struct Statistics: Sendable {
        var framesIn = 0
        var framesOut = 0
        var dropped = 0
        /// Audio packets turned away because the audio room was full (the queue far behind).
        var droppedAudio = 0
        var busySeconds = 0.0
        /// Measured over the segments finished so far.
        var averageBitRate = 0
        var peakBitRate = 0
        var segments = 0
        var measuredBytes = 0
        /// Added latency (publisher arrival → sent), milliseconds, live jobs only.
        var latencyP50: Double?
        var latencyP99: Double?
        var codecs = ""
        var failure: String?
        /// IDRs made off the grid for players switching to this rung.
        var forcedKeyframes = 0
        /// HLS segments that could not be written (disk full...) and were skipped.
        var segmentWriteFailures = 0
        /// Frames not encoded because the node shed this rung to keep the others in real time.
        var shedFrames = 0
        /// CPU time of the rung's queue work (scale, encode, package, and the quality probe if on).
        /// x264's own worker threads, when it has more than one, are not in it.
        var cpuSeconds = 0.0
        /// The rung measured against the source, when the job measures quality.
        var quality: QualitySummary?
        /// The part of `cpuSeconds` the quality measurement took.
        var qualityCPUSeconds = 0.0
        /// Every measured picture, set when the rung finishes.
        var qualitySamples: [QualityTimeline.Sample] = []
    }

    let variant: Variant
    let isPassthrough: Bool
    private let queue: EncoderThread
    /// An encoded rung whose encoder runs behind the node's own threads (`EncoderPriority
    /// .background`) hands each packet to this thread, at the node's own scheduling, to be muxed
    /// into HLS and sent to its players: that work must not wait behind the encoders, as the
    /// ingest and the network's event loops do not. nil: the rung's `queue` does it (a
    /// passed-through top, which encodes nothing, or encoders at the node's own priority).
    private let outputQueue: EncoderThread?
    /// Output jobs handed over and not yet done, bounded (about two seconds of pictures): an
    /// output that falls behind (a stalled disk) holds the encoder, whose inbox then drops, so
    /// memory stays flat.
    private let outputSlots = DispatchSemaphore(value: VariantPipeline.outputJobsInFlight)
    static let outputJobsInFlight = 64
    /// The inbox's bound in pictures (decoded frames or passed-through packets): what memory and
    /// lag are measured in.
    private let pictureSlots: DispatchSemaphore
    /// Audio packets are small and come about 1.6 times as often as pictures: they have their own
    /// bound, so they neither eat the pictures' room nor count as the variant falling behind.
    private let audioSlots: DispatchSemaphore
    private let policy: BackpressurePolicy
    private let state = Mutex(Statistics())
    /// Pictures handed to the queue and not yet processed: how far behind real time the variant is.
    private let queuedPictures = Atomic<Int>(0)
    /// The fewest pictures queued since the shedder last looked: a rung that keeps up empties its
    /// inbox now and then, one that is behind never does. A sampled depth would see bursts too.
    private let leastQueuedPictures = Atomic<Int>(0)
    /// Set from any thread by the node's load shedder; the ingest thread acts on it.
    private let shedRequested = Atomic<Bool>(false)

    // Queue-confined.
    private let work: Work
    private var scaler: Scaler?
    private var encoder: H264Encoder?
    /// Measures every `qualitySampleInterval`th picture when set.
    private let qualitySampleInterval: Int?
    private let scaling: ScalingAlgorithm
    private var qualityProbe: RungQualityProbe?
    let output: VariantOutput
    private var pendingSegmentStarts: Set<Int64> = []
    private var lastPTS = Int64.min
    private var decodeOffset: Int64 = 0
    /// What each frame's work is timed on.
    let clock: NodeClock

    // Ingest-confined.
    private var awaitingKeyframe = false
    /// Frames are being withheld for shedding; the rung comes back only on a grid keyframe.
    private var shedding = false

    init(variant: Variant, work: Work, output: VariantOutput, policy: BackpressurePolicy, inboxCapacity: Int,
         qualitySampleInterval: Int? = nil, scaling: ScalingAlgorithm = .bicubic, priority: EncoderPriority = .normal, clock: NodeClock = .system) {
        self.clock = clock
        self.variant = variant
        self.scaling = scaling
        self.qualitySampleInterval = qualitySampleInterval
        self.work = work
        self.output = output
        self.policy = policy
        if case .passthrough = work { isPassthrough = true } else { isPassthrough = false }
        let queuePriority = Self.queuePriority(for: work, encoders: priority)
        self.queue = EncoderThread(name: "abr.variant.\(variant.level)", priority: queuePriority)
        outputQueue = queuePriority == .normal ? nil : EncoderThread(name: "abr.output.\(variant.level)", priority: .normal)
        self.pictureSlots = DispatchSemaphore(value: max(1, inboxCapacity))
        self.audioSlots = DispatchSemaphore(value: Self.audioPacketsPerPicture * max(1, inboxCapacity))
        if case .encode = work, let sink = output.sink {
            // Players moving down to this rung ask for an IDR rather than wait up to a keyframe
            // interval for the grid's; the latest request's time wins (it satisfies the earlier).
            sink.setKeyframeSource { [weak self] after in
                self?.keyframeWanted.withLock { $0 = max($0 ?? -.infinity, after.seconds) }
            }
        }
    }

    /// The scheduling of a pipeline's queue. A passed-through top encodes nothing: its queue only
    /// muxes HLS and hands the source's pictures to its players, work that must not wait behind
    /// the encoders (`EncoderPriority.background`, which lets the ingest and network threads
    /// ahead of them), so it keeps the node's own.
    static func queuePriority(for work: Work, encoders: EncoderPriority) -> EncoderPriority {
        if case .passthrough = work { return .normal }
        return encoders
    }

    /// Tests: runs `body` on the pipeline's queue, after what is already queued.
    func runOnQueueForTesting(_ body: @escaping () -> Void) { queue.async(body) }

    /// A keyframe players switching to this rung asked for: forced on the first picture after
    /// this presentation time (seconds), unless the grid gives one first.
    private let keyframeWanted = Mutex<Double?>(nil)
    /// The last keyframe this rung made (seconds): a forced one keeps at least
    /// `minimumKeyframeSpacing` from it.
    private var lastKeyframeSeconds = -Double.infinity
    static let minimumKeyframeSpacing = 0.5
    /// At most one IDR off the grid between two of the grid's, however many players move: the
    /// rung's IDRs at most double, whatever its viewers do (the others wait for the grid's).
    private var forcedSinceGrid = false

    /// Whether the picture at `seconds` should be an IDR: the grid's, or one asked for.
    private func keyframeDecision(grid: Bool, at seconds: Double) -> Bool {
        if grid { forcedSinceGrid = false }
        let mayForce = !grid && !forcedSinceGrid && seconds - lastKeyframeSeconds >= Self.minimumKeyframeSpacing
        // Any keyframe past the time asked for answers the request: the grid's, or one forced now.
        let forced = keyframeWanted.withLock { wanted in
            guard let after = wanted, seconds > after, grid || mayForce else { return false }
            wanted = nil
            return !grid
        }
        guard grid || forced else { return false }
        lastKeyframeSeconds = seconds
        if forced {
            forcedSinceGrid = true
            state.withLock { $0.forcedKeyframes += 1 }
        }
        return true
    }

    deinit {
        queue.close()
        outputQueue?.close()
    }

    /// Runs `write` (work on `output`) on the output queue, in order, then records what the
    /// outputs measured; or here when the rung has none. A failure there stops the rung as one
    /// here does. `then` runs after it in either case, failed or not.
    private func deliver(_ write: @escaping () throws -> Void, then: (() -> Void)? = nil) throws {
        guard let outputQueue else {
            defer { then?() }
            return try write()
        }
        outputSlots.wait()
        outputQueue.async { [self] in
            defer {
                outputSlots.signal()
                then?()
            }
            guard state.withLock({ $0.failure == nil }) else { return }
            let cpuStarted = CPUClock.thread()
            do {
                try write()
                recordOutputStatistics()
            } catch {
                recordFailure(error)
            }
            let cpu = CPUClock.thread() - cpuStarted
            state.withLock { $0.cpuSeconds += cpu }
        }
    }

    /// The rung's first failure is kept; it stops the rung.
    private func recordFailure(_ error: any Error) {
        state.withLock { $0.failure = "variant \(variant.streamGuid): \(error)" }
    }

    var statistics: Statistics { state.withLock { $0 } }

    /// Audio packets the inbox may hold per picture it may hold: AAC at 48 kHz sends about 47
    /// packets a second against 25–30 pictures, so 4 keeps audio from being the first to run out.
    static let audioPacketsPerPicture = 4

    /// Pictures waiting for this variant's queue (audio not counted).
    var queuedFrames: Int { queuedPictures.load(ordering: .relaxed) }

    /// The fewest pictures queued since the last call (0 on the first), and starts a new interval
    /// from the current count.
    func takeLeastQueuedFrames() -> Int {
        leastQueuedPictures.exchange(queuedPictures.load(ordering: .relaxed), ordering: .relaxed)
    }

    /// Whether the rung is shed (asked to be, or still waiting for a keyframe to come back).
    var isShed: Bool { shedRequested.load(ordering: .relaxed) }

    /// The node sheds this rung (stops encoding it) or restores it. Restoring takes effect at the
    /// next grid keyframe, so the rung's IDRs and segments stay aligned with the others.
    func setShed(_ shed: Bool) {
        shedRequested.store(shed, ordering: .relaxed)
    }

    /// Hands one input to the variant. Blocks when the inbox is full under `.block`;
    /// under `.dropUntilKeyframe` drops it, and after a picture every following one up to the next
    /// grid IDR. Control inputs (format, offset, pause) carry no media and take no room.
    func submit(_ input: Input) {
        let (isVideo, isKeyframe, slots): (Bool, Bool, DispatchSemaphore?) = switch input {
        case let .frame(_, decision), let .packet(_, decision): (true, decision.isKeyframe, pictureSlots)
        case .audio: (false, false, audioSlots)
        case .changeFormat, .decodeOffset, .pause: (false, false, nil)
        }
        if case .encode = work, isVideo {
            if shedRequested.load(ordering: .relaxed) || (shedding && !isKeyframe) {
                state.withLock { $0.shedFrames += 1 }
                if !shedding {
                    // The open segment ends with the last frame encoded; the next one, when the
                    // rung returns, is marked as a discontinuity.
                    shedding = true
                    enqueue(.pause)
                }
                return
            }
            if shedding {
                shedding = false
                awaitingKeyframe = false
            }
        }
        switch policy {
        case .block:
            slots?.wait()
        case .dropUntilKeyframe:
            if isVideo, awaitingKeyframe, !isKeyframe {
                state.withLock { $0.dropped += 1 }
                return
            }
            if let slots, slots.wait(timeout: .now()) == .timedOut {
                if isVideo {
                    awaitingKeyframe = true
                    state.withLock { $0.dropped += 1 }
                } else {
                    state.withLock { $0.droppedAudio += 1 }
                }
                return
            }
            if isVideo { awaitingKeyframe = false }
        }
        if isVideo {
            state.withLock { $0.framesIn += 1 }
            queuedPictures.add(1, ordering: .relaxed)
        }
        queue.async { [self] in
            defer {
                if isVideo {
                    let left = queuedPictures.subtract(1, ordering: .relaxed).newValue
                    leastQueuedPictures.min(left, ordering: .relaxed)
                }
                slots?.signal()
            }
            let started = clock.nanoseconds
            let cpuStarted = CPUClock.thread()
            guard perform(input) else { return }
            let elapsed = clock.seconds(since: started)
            let cpu = CPUClock.thread() - cpuStarted
            // The quality probe is this queue's; a summary twice a second at 30 fps is plenty.
            jobsSinceQuality += 1
            let quality = jobsSinceQuality % 15 == 0 ? qualityProbe?.accumulator.summary : nil
            let qualityCPU = qualityProbe?.cpuSeconds ?? 0
            state.withLock {
                if let quality { $0.quality = quality }
                $0.qualityCPUSeconds = qualityCPU
                $0.cpuSeconds += cpu
                $0.busySeconds += elapsed
            }
            // With an output queue, each of its jobs records what the outputs wrote, there.
            if outputQueue == nil { recordOutputStatistics() }
        }
    }

    /// Queue-confined: jobs run since the pipeline started, to space the quality summaries.
    private var jobsSinceQuality = 0

    /// Copies what the outputs measured into the statistics (where the outputs are written).
    private func recordOutputStatistics() {
        let framesOut = output.frames
        let meter = output.meter
        let segments = meter.segments.count
        // A live meter keeps a window of segments, so a new segment shows in the byte total.
        let changed = state.withLock { $0.measuredBytes != meter.totalBytes }
        // The peak is re-measured only when a segment was added: it walks the retained segments.
        let peak = changed ? meter.peakBitRate(targetDuration: Double(meter.targetDuration)) : nil
        let codecs = output.codecs
        let failedWrites = output.failedWrites
        // Percentiles sort a thousand samples: twice a second at 30 fps is plenty.
        let latency = framesOut % 15 == 0 ? output.latency.percentiles : nil
        state.withLock {
            if let latency {
                $0.latencyP50 = latency.p50
                $0.latencyP99 = latency.p99
            }
            $0.framesOut = framesOut
            $0.averageBitRate = meter.averageBitRate
            $0.segments = segments
            $0.measuredBytes = meter.totalBytes
            $0.codecs = codecs
            $0.segmentWriteFailures = failedWrites
            if let peak { $0.peakBitRate = peak }
        }
    }

    /// Tests hold the queue to see what the inbox admits while the variant is behind.
    func suspendProcessingForTesting() { queue.suspend() }
    func resumeProcessingForTesting() { queue.resume() }

    /// Work that bypasses the inbox (it carries no picture): runs in order after what is queued.
    private func enqueue(_ input: Input) {
        queue.async { [self] in _ = perform(input) }
    }

    /// Processes one input on the queue unless the variant already failed; a failure is kept.
    /// False when nothing was done because of an earlier failure.
    private func perform(_ input: Input) -> Bool {
        guard state.withLock({ $0.failure == nil }) else { return false }
        do {
            try process(input)
        } catch {
            recordFailure(error)
        }
        return true
    }

    /// Flushes the encoder and closes the outputs; `group` is left when done (the output queue's
    /// last job included).
    func finish(group: DispatchGroup) {
        group.enter()
        queue.async { [self] in
            defer { group.leave() }
            guard state.withLock({ $0.failure == nil }) else { return }
            let cpuStarted = CPUClock.thread()
            do {
                if let encoder {
                    try encoder.send(nil)
                    try drainEncoder(encoder)
                }
                try qualityProbe?.finish()
                let quality = qualityProbe?.accumulator.summary
                let qualityCPU = qualityProbe?.cpuSeconds ?? 0
                let qualitySamples = qualityProbe?.samples ?? []
                let cpu = CPUClock.thread() - cpuStarted
                state.withLock {
                    $0.quality = quality
                    $0.qualitySamples = qualitySamples
                    $0.qualityCPUSeconds = qualityCPU
                    $0.cpuSeconds += cpu
                }
                // After every packet handed over (the output queue runs its jobs in order); the
                // group is left once the outputs are closed.
                group.enter()
                try deliver({ [self] in
                    try output.finish()
                    let framesOut = output.frames
                    state.withLock { $0.framesOut = framesOut }
                }, then: { group.leave() })
            } catch {
                recordFailure(error)
            }
        }
    }

    private func process(_ input: Input) throws {
        switch input {
        case let .frame(frame, decision):
            guard case let .encode(settings) = work else { return }
            let encoder = try self.encoder ?? makeEncoder(settings)
            let scaler = try self.scaler ?? Scaler(width: settings.width, height: settings.height, algorithm: scaling)
            self.scaler = scaler
            let picture = try scaler.scale(frame)
            // x264 needs strictly increasing timestamps; a source that repeats one must not stop the job.
            if picture.pts <= lastPTS { picture.pts = lastPTS &+ 1 }
            lastPTS = picture.pts
            picture.forceKeyframe = keyframeDecision(grid: decision.isKeyframe, at: MediaTime(ticks: picture.pts, timeBase: settings.timeBase).seconds)
            if let qualitySampleInterval {
                let probe = try qualityProbe ?? RungQualityProbe(width: settings.width, height: settings.height,
                                                                 timeBase: settings.timeBase, sampleInterval: qualitySampleInterval)
                qualityProbe = probe
                try probe.sourcePicture(frame, pts: picture.pts, isKeyframe: decision.isKeyframe)
            }
            if decision.startsSegment { pendingSegmentStarts.insert(picture.pts) }
            try encoder.send(picture)
            try drainEncoder(encoder)
        case let .packet(packet, decision):
            guard case let .passthrough(parameters, timeBase) = work else { return }
            if !output.isOpen {
                // Wait for an IDR: a player cannot start on anything else.
                guard packet.isKeyframe else { return }
                if parameters.extradata.isEmpty {
                    // MPEG-TS and RTSP sources carry SPS/PPS in-band; MP4 needs them in the header.
                    let sets = packet.withBytes { H264.parameterSets(inAnnexB: $0) }
                    try parameters.setExtradata(H264.annexB(sets.sps + sets.pps))
                }
                try output.open(video: parameters, timeBase: timeBase)
            }
            try output.writeVideo(packet, startsSegment: decision.startsSegment)
        case let .audio(packet):
            try deliver { [self] in try output.writeAudio(packet) }
        case let .decodeOffset(offset):
            decodeOffset = offset
        case .pause:
            try deliver { [self] in try output.markDiscontinuity(at: output.endTime) }
        case let .changeFormat(parameters, timeBase, time):
            guard case .passthrough = work, output.isOpen else { return }
            try output.changeFormat(video: parameters, timeBase: timeBase, at: time)
        }
    }

    private func makeEncoder(_ settings: H264EncoderSettings) throws -> H264Encoder {
        let encoder = try H264Encoder(settings: settings)
        self.encoder = encoder
        let parameters = try encoder.parameters()
        try deliver { [self] in try output.open(video: parameters, timeBase: settings.timeBase) }
        return encoder
    }

    private func drainEncoder(_ encoder: H264Encoder) throws {
        while case let .packet(packet) = try encoder.receive() {
            // Before the muxer takes the packet: it moves the packet's data out.
            try qualityProbe?.encodedPacket(packet) { () throws(FFmpegError) in try encoder.parameters() }
            let startsSegment = pendingSegmentStarts.remove(packet.pts) != nil
            if decodeOffset > 0, packet.pts != noTimestamp { packet.dts = packet.pts &- decodeOffset }
            try deliver { [self] in try output.writeVideo(packet, startsSegment: startsSegment) }
        }
    }
}
