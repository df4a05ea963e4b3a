import Dispatch
import FFmpegBridge
import Logging
import MediaCore

/// The job's single reading thread: demux, decode once, decide the grid, fan out.
/// Timestamps are shifted so the first video keyframe's decoding time is zero in every output.
struct DecodeLoop {
    let source: any PacketReader
    let video: StreamInfo
    /// The session's audio, as the job's track takes it.
    let audio: SessionAudio?
    let decoder: VideoDecoder
    let pipelines: [VariantPipeline]
    var grid: KeyframeGrid
    /// When the job started, on `clock`.
    let started: UInt64
    let clock: NodeClock
    let progress: ((JobProgress) -> Void)?
    let cancellation: Cancellation
    let isLive: Bool
    let logger: Logger
    /// Added to every output timestamp: where this publish continues the job's timeline.
    var timelineOffset = MediaTime.zero(ArrivalTimes.timeBase)
    /// A live input that delivers nothing for this long has ended (its publisher is gone).
    var idleLimit: Double?
    /// Live jobs: where each picture's arrival time is kept for latency measurement.
    var arrivals: ArrivalTimes?
    /// Live jobs: the audio as Opus for WebRTC viewers.
    var browserAudio: BrowserAudio?
    /// When the input last delivered a packet (uptime nanoseconds): silence is measured on the clock,
    /// not by counting the reader's wake-ups.
    private var lastDelivery: UInt64

    private(set) var videoPackets = 0
    private(set) var skippedLeadingPackets = 0
    private(set) var decodedFrames = 0
    private(set) var decodeErrors = 0
    private(set) var sourceKeyframeTimes: [MediaTime] = []
    /// Source media read so far (for progress and speed), without the timeline offset.
    private(set) var mediaSeconds = 0.0
    /// End of the last decoded frame on the output timeline.
    private(set) var timelineEnd: MediaTime

    /// Origin in each stream's time base, set by the first video keyframe.
    private var videoOrigin: Int64?
    private var audioBeforeOrigin: [Packet] = []
    /// Grid decisions taken on keyframe packets, waiting for their decoded frames (follow-source mode).
    private var decisionsByPTS: [Int64: KeyframeGrid.Decision] = [:]
    private var lastProgress: UInt64 = 0
    /// The video packet read last and when it arrived, held back in case the next one is another
    /// slice of the same picture (only for readers that may split pictures).
    private var heldVideo: (packet: Packet, arrival: UInt64?)?
    /// One frame at the source's nominal rate, in the video time base: frames carry no duration of their own.
    private let frameDuration: MediaTime
    /// The parameter sets the passed-through top's outputs were opened (or last re-opened) with.
    private var topParameterSets: (sps: [UInt8], pps: [UInt8])?

    init(source: any PacketReader, video: StreamInfo, audio: SessionAudio?, decoder: VideoDecoder, pipelines: [VariantPipeline],
         grid: KeyframeGrid, clock: NodeClock, started: UInt64, progress: ((JobProgress) -> Void)?, cancellation: Cancellation,
         isLive: Bool, logger: Logger) {
        self.source = source
        self.video = video
        self.audio = audio
        self.decoder = decoder
        self.pipelines = pipelines
        self.grid = grid
        self.started = started
        self.clock = clock
        lastDelivery = clock.nanoseconds
        self.progress = progress
        self.cancellation = cancellation
        self.isLive = isLive
        self.logger = logger
        self.frameDuration = MediaTime(seconds: 1 / LadderJob.plausibleFrameRate(video.frameRate), timeBase: video.timeBase)
        self.timelineEnd = .zero(video.timeBase)
        let sets = H264.parameterSets(fromExtradata: video.parameters.extradata)
        if let sps = sets.sps.first, let pps = sets.pps.first { topParameterSets = (sps, pps) }
    }

    private var followsSource: Bool {
        if case .followSource = grid.mode { return true }
        return false
    }

    private var passthrough: VariantPipeline? { pipelines.first { $0.isPassthrough } }
    private var encoders: [VariantPipeline] { pipelines.filter { !$0.isPassthrough } }

    mutating func run() throws(TranscodeError) {
        let passthrough = self.passthrough
        let encoders = self.encoders
        let holdsPictures = !source.deliversWholeAccessUnits
        readLoop: while true {
            if let failure = pipelines.lazy.compactMap({ $0.statistics.failure }).first {
                throw .failed(failure)
            }
            if cancellation.isCancelled { throw .cancelled }
            if cancellation.isStopped { break readLoop }
            let packet: Packet
            do {
                switch try source.read() {
                case let .packet(p):
                    packet = p
                    lastDelivery = clock.nanoseconds
                case .endOfInput:
                    break readLoop
                case .idle:
                    let silent = clock.seconds(since: lastDelivery)
                    if let idleLimit, silent >= idleLimit {
                        logger.info("input \(source.url) sent nothing for \(idleLimit) s")
                        break readLoop
                    }
                    reportProgress(force: false)
                    continue readLoop
                }
            } catch {
                // A live peer that goes away after sending media ends the stream; a file that
                // cannot be read on is damaged.
                if isLive, decodedFrames > 0 {
                    logger.warning("input \(source.url) ended: \(error.message)")
                    break readLoop
                }
                throw .badInput("input \(source.url) is corrupted or truncated: \(error.message)")
            }
            if packet.streamIndex == video.index {
                let arrival = source.lastArrival
                guard holdsPictures else {
                    try handleVideo(packet, arrival: arrival, passthrough: passthrough, encoders: encoders)
                    reportProgress(force: false)
                    continue readLoop
                }
                // RTSP and raw inputs may deliver one picture's slices as separate packets with one
                // timestamp; an MP4 sample must be the whole access unit, so they are joined here.
                if let held = heldVideo, held.packet.pts != noTimestamp, held.packet.pts == packet.pts {
                    do {
                        heldVideo = (try held.packet.appending(packet), held.arrival)
                    } catch {
                        throw .failed(error.description)
                    }
                    continue
                }
                if let held = heldVideo { try handleVideo(held.packet, arrival: held.arrival, passthrough: passthrough, encoders: encoders) }
                heldVideo = (packet, arrival)
            } else if let audio, packet.streamIndex == audio.streamIndex {
                handleAudio(packet)
            }
            reportProgress(force: false)
        }
        if let held = heldVideo {
            heldVideo = nil
            try handleVideo(held.packet, arrival: held.arrival, passthrough: passthrough, encoders: encoders)
        }
        do {
            try decoder.send(nil)
        } catch {
            decodeErrors += 1
        }
        try drainDecoder(encoders: encoders)
        reportProgress(force: true)
    }

    private mutating func handleVideo(_ packet: Packet, arrival: UInt64?, passthrough: VariantPipeline?,
                                      encoders: [VariantPipeline]) throws(TranscodeError) {
        if videoOrigin == nil {
            // Nothing before the first keyframe can be decoded or played, and nothing without a
            // timestamp can anchor the timeline (RTSP sources send some before their first RTCP report).
            guard packet.isKeyframe, packet.pts != noTimestamp || packet.dts != noTimestamp else {
                skippedLeadingPackets += 1
                return
            }
            let dts = packet.dts != noTimestamp ? packet.dts : packet.pts
            let origin = packet.pts != noTimestamp ? min(dts, packet.pts) : dts
            // The timeline offset moves the origin back, so this publish continues where the last one ended.
            videoOrigin = origin &- timelineOffset.ticks(in: video.timeBase)
            let held = audioBeforeOrigin
            audioBeforeOrigin.removeAll()
            held.forEach { handleAudio($0) }
        }
        let firstPacket = videoPackets == 0
        shift(packet, by: videoOrigin!)
        videoPackets += 1
        if firstPacket, passthrough != nil, packet.pts != noTimestamp, packet.dts != noTimestamp, packet.pts > packet.dts {
            encoders.forEach { $0.submit(.decodeOffset(packet.pts - packet.dts)) }
        }
        if let arrivals, let arrival, packet.pts != noTimestamp {
            arrivals.record(timelineTicks: packet.timeBase.rescale(packet.pts, to: ArrivalTimes.timeBase), arrival: arrival)
        }
        var decision = KeyframeGrid.Decision.none
        if packet.isKeyframe, followsSource, packet.pts != noTimestamp {
            let time = MediaTime(ticks: packet.pts, timeBase: video.timeBase)
            decision = grid.decide(time: time, isSourceKeyframe: true)
            decisionsByPTS[packet.pts] = decision
            // Only an offline report reads them; a live session would keep one per GOP for hours.
            if !isLive { sourceKeyframeTimes.append(time) }
        }
        // The passed-through top goes first: it must not wait for the decoder. It gets its own
        // reference, because its queue's muxer rewrites the packet while the decoder reads it.
        if let passthrough {
            do {
                if packet.isKeyframe, let parameters = try newParameterSets(in: packet) {
                    passthrough.submit(.changeFormat(parameters, timeBase: video.timeBase, time: MediaTime(ticks: packet.pts, timeBase: video.timeBase)))
                }
                passthrough.submit(.packet(try packet.reference(), decision))
            } catch {
                throw .failed(error.description)
            }
        }
        do {
            try decoder.send(packet)
        } catch {
            // A damaged packet costs its own frame (or a GOP); the stream goes on.
            decodeErrors += 1
        }
        try drainDecoder(encoders: encoders)
    }

    /// Parameter sets a keyframe carries in-band (Annex B: RTSP, MPEG-TS) that differ from the
    /// top's: a publisher that changed its picture size or profile mid-stream. The decoder follows
    /// by itself, but the passed-through top's fMP4 init segment and its players' SDP hold the old
    /// ones, so it gets new outputs (`changeFormat`: a new init segment and a discontinuity).
    private mutating func newParameterSets(in packet: Packet) throws(FFmpegError) -> CodecParameters? {
        guard packet.pts != noTimestamp else { return nil }
        let sets = packet.withBytes { H264.isAnnexB($0) ? H264.parameterSets(inAnnexB: $0) : (sps: [], pps: []) }
        guard let sps = sets.sps.first, let pps = sets.pps.first, let parsed = H264SPS(sps) else { return nil }
        if let current = topParameterSets, current.sps == sps, current.pps == pps { return nil }
        let first = topParameterSets == nil
        topParameterSets = (sps, pps)
        // Extradata that was empty (sets only in-band) is filled by the top's own first keyframe.
        guard !first else { return nil }
        logger.info("publisher changed its parameter sets", metadata: ["size": "\(parsed.width)x\(parsed.height)"])
        return try CodecParameters.h264(width: parsed.width, height: parsed.height, extradata: H264.annexB([sps, pps]))
    }

    private mutating func handleAudio(_ packet: Packet) {
        guard let videoOrigin else {
            if audioBeforeOrigin.count < VariantOutput.maximumPendingAudio { audioBeforeOrigin.append(packet) }
            return
        }
        let origin = video.timeBase.rescale(videoOrigin, to: packet.timeBase)
        shift(packet, by: origin)
        guard packet.pts == noTimestamp || packet.pts >= 0 else { return }
        for prepared in audio?.packets(for: packet) ?? [] {
            browserAudio?.write(prepared)
            for pipeline in pipelines {
                guard let reference = try? prepared.reference() else { continue }
                pipeline.submit(.audio(reference))
            }
        }
    }

    private mutating func drainDecoder(encoders: [VariantPipeline]) throws(TranscodeError) {
        let frame: Frame
        do {
            frame = try Frame()
        } catch {
            throw .failed(error.description)
        }
        while true {
            let step: VideoDecoder.Step
            do {
                step = try decoder.receive(into: frame)
            } catch {
                decodeErrors += 1
                continue
            }
            guard case let .frame(decoded) = step else { return }
            decodedFrames += 1
            let pts = decoded.pts
            let time = MediaTime(ticks: pts, timeBase: video.timeBase)
            timelineEnd = max(timelineEnd, time + frameDuration)
            mediaSeconds = max(mediaSeconds, (timelineEnd - timelineOffset).seconds)
            let decision: KeyframeGrid.Decision
            if followsSource {
                decision = decisionsByPTS.removeValue(forKey: pts) ?? .none
                // Decisions for frames the decoder never produced must not pile up.
                if decisionsByPTS.count > 64 { decisionsByPTS = decisionsByPTS.filter { $0.key > pts } }
            } else {
                decision = grid.decide(time: time, isSourceKeyframe: decoded.isKeyframe)
            }
            for pipeline in encoders {
                do {
                    pipeline.submit(.frame(try decoded.reference(), decision))
                } catch {
                    throw .failed(error.description)
                }
            }
        }
    }

    /// Timestamps come from the network and files: absurd ones become "no timestamp", never a trap.
    private func shift(_ packet: Packet, by origin: Int64) {
        packet.pts = Self.shifted(packet.pts, by: origin)
        packet.dts = Self.shifted(packet.dts, by: origin)
    }

    static func shifted(_ value: Int64, by origin: Int64) -> Int64 {
        guard value != noTimestamp else { return noTimestamp }
        let (result, overflow) = value.subtractingReportingOverflow(origin)
        return overflow || result == noTimestamp ? noTimestamp : result
    }

    private mutating func reportProgress(force: Bool) {
        guard let progress else { return }
        let now = clock.nanoseconds
        guard force || now &- lastProgress > 500_000_000 else { return }
        lastProgress = now
        let wall = Double(now &- started) / 1e9
        progress(JobProgress(
            sourceFrames: decodedFrames, mediaSeconds: mediaSeconds, wallSeconds: wall,
            variants: pipelines.map {
                let s = $0.statistics
                return .init(level: $0.variant.level, frames: s.framesOut, dropped: s.dropped, bitRate: s.averageBitRate)
            }))
    }
}
