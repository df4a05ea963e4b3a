import DequeModule
import Dispatch
import Foundation
import FFmpegBridge
import MediaCore

/// A live publisher's media as a `PacketReader`: the RTSP server pushes access units from its
/// event loop, the job's ingest thread pulls them. The queue is bounded; when the ingest falls
/// that far behind, whole GOPs are dropped (counted) so the decoder never sees a broken one and
/// the network side never waits.
public final class LiveSource: PacketReader, @unchecked Sendable {
    // @unchecked: `pending`, `ended`, `dropping` and `dropped` are only touched under `condition`.
    public let url: String
    public let streams: [StreamInfo]
    public var bitRate: Int { 0 }
    /// The RTSP depacketizer hands over whole access units (it ends one on the marker bit or a new timestamp).
    public var deliversWholeAccessUnits: Bool { true }
    public var bestVideoStream: StreamInfo? { streams.first { $0.kind == .video } }

    public static let videoTimeBase = Rational(1, 90000)
    /// Packets held for the ingest; ~8 s of 30 fps video with its audio.
    public static let capacity = 600
    /// Bytes held for the ingest, whatever the packet count: ~10 s of a 25 Mbit/s publisher.
    public static let capacityBytes = 32 * 1024 * 1024
    /// How long `read` waits before answering `.idle`.
    public static let pollInterval = 0.25

    public let startsNewTimeline: Bool
    /// How the publisher sends (`rtsp`, `rtmp`, `srt`).
    public let transport: String
    /// What each packet's arrival is stamped on (the job's clock: its pictures' latency is measured from it).
    let clock: NodeClock

    private let condition = NSCondition()
    private var pending = Deque<(packet: Packet, arrival: UInt64)>()
    private var pendingBytes = 0
    /// Ingest thread only: when the packet `read` returned last arrived.
    public private(set) var lastArrival: UInt64?
    private var ended = false
    private var dropping = false
    private var dropped = 0
    private let reorderDepth: Int
    private let frameTicks: Int64
    /// The SDP's `a=framerate`, when the publisher sent one.
    private let statedFrameRate: Double?
    private var frameRateEstimate = FrameRateEstimate(clockRate: 90_000)
    /// Push side only (one publisher session delivers in order).
    private var decodeTimestamps: DecodeTimestamps?

    /// - Parameters:
    ///   - video: the publisher's parameter sets and what they announce.
    ///   - audio: its AAC track, if any.
    ///   - startsNewTimeline: the publisher's timestamps jumped and this source carries on after
    ///     the jump: the job marks a discontinuity in every variant's HLS.
    public init(url: String, video: VideoFormat, audio: AudioFormat?, transport: String = "rtsp", startsNewTimeline: Bool = false,
                clock: NodeClock = .system) throws {
        self.clock = clock
        let (sps, pps, frameRate) = (video.sps, video.pps, video.frameRate)
        guard let parsed = H264SPS(sps) else { throw TranscodeError.badInput("\(url): the publisher's SPS cannot be read") }
        self.url = url
        self.transport = transport
        self.startsNewTimeline = startsNewTimeline
        reorderDepth = parsed.reorderDepth
        statedFrameRate = frameRate.flatMap { $0 > 0 ? $0 : nil }
        frameTicks = Int64((90000 / (statedFrameRate ?? 30)).rounded())
        var streams = [StreamInfo(
            index: 0, kind: .video, codecName: "h264", timeBase: Self.videoTimeBase, width: parsed.width, height: parsed.height,
            frameRate: frameRate.map { Rational(framesPerSecond: $0) } ?? Rational(0, 0), bitRate: 0, frameCount: 0,
            parameters: try CodecParameters.h264(width: parsed.width, height: parsed.height, extradata: H264.annexB([sps, pps])))]
        if let audio {
            streams.append(StreamInfo(
                index: 1, kind: .audio, codecName: "aac", timeBase: audio.timeBase, width: 0, height: 0,
                frameRate: Rational(0, 0), bitRate: 0, frameCount: 0,
                parameters: try CodecParameters.aac(sampleRate: audio.sampleRate, channels: audio.channels, audioSpecificConfig: audio.config)))
        }
        self.streams = streams
    }

    /// One access unit's NAL units (without start codes) at its presentation time, in decode order.
    public func pushVideo(nalUnits: [[UInt8]], time: MediaTime, isKeyframe: Bool) {
        let ticks = time.ticks(in: Self.videoTimeBase)
        guard let packet = try? Packet(annexBUnits: nalUnits, timeBase: Self.videoTimeBase) else { return }
        packet.pts = ticks
        // RTP carries presentation times only; with B-frames, decoding times must be derived.
        if decodeTimestamps == nil { decodeTimestamps = DecodeTimestamps(depth: reorderDepth, firstPTS: ticks, step: frameTicks) }
        packet.dts = decodeTimestamps!.next(pts: ticks)
        packet.streamIndex = 0
        packet.isKeyframe = isKeyframe
        push(packet, isVideo: true)
    }

    /// One raw AAC access unit at its presentation time.
    public func pushAudio(_ frame: [UInt8], time: MediaTime) {
        guard streams.count > 1, let packet = try? Packet(bytes: frame, timeBase: streams[1].timeBase) else { return }
        packet.pts = time.ticks(in: streams[1].timeBase)
        packet.dts = packet.pts
        packet.streamIndex = 1
        packet.isKeyframe = true
        push(packet, isVideo: false)
    }

    private func push(_ packet: Packet, isVideo: Bool) {
        condition.lock()
        defer { condition.unlock() }
        guard !ended else { return }
        if isVideo, !frameRateEstimate.isComplete {
            frameRateEstimate.add(presentationTicks: packet.pts)
            if frameRateEstimate.isComplete { condition.broadcast() }
        }
        let size = packet.size
        if pending.count >= Self.capacity || pendingBytes + size > Self.capacityBytes { dropping = true }
        if dropping {
            guard isVideo, packet.isKeyframe, pending.count < Self.capacity / 2, pendingBytes + size <= Self.capacityBytes / 2 else {
                if isVideo { dropped += 1 }
                return
            }
            dropping = false
        }
        pendingBytes += size
        pending.append((packet, clock.nanoseconds))
        condition.signal()
    }

    /// The video's frame rate: the publisher's SDP figure, else judged from its first pictures'
    /// timestamps (`FrameRateEstimate`), waiting up to `timeout` seconds for enough of them. nil
    /// when neither tells (too few pictures, or gaps no plausible rate fits).
    public func videoFrameRate(waitingUpTo timeout: Double) -> Double? {
        if let statedFrameRate { return statedFrameRate }
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock()
        defer { condition.unlock() }
        while !frameRateEstimate.isComplete, !ended, condition.wait(until: deadline) {}
        return frameRateEstimate.frameRate(minimumPictures: 3)
    }

    /// The publisher is gone; what is queued is still read.
    public func end() {
        condition.lock()
        ended = true
        condition.broadcast()
        condition.unlock()
    }

    /// Whether the source has ended: its publisher left, or the job stopped reading it (silence).
    /// A publisher that sends again needs a new source.
    public var isEnded: Bool {
        condition.lock()
        defer { condition.unlock() }
        return ended
    }

    /// Video access units dropped because the ingest fell behind.
    public var droppedFrames: Int {
        condition.lock()
        defer { condition.unlock() }
        return dropped
    }

    public func read() throws(FFmpegError) -> MediaInput.ReadResult {
        condition.lock()
        defer { condition.unlock() }
        if pending.isEmpty, !ended {
            _ = condition.wait(until: Date().addingTimeInterval(Self.pollInterval))
        }
        if let (packet, arrival) = pending.popFirst() {
            lastArrival = arrival
            pendingBytes -= packet.size
            return .packet(packet)
        }
        return ended ? .endOfInput : .idle
    }
}
