import Dispatch
import Foundation
import FFmpegBridge
import MediaCore

/// Everything one variant's packets go to: its MP4 file and its HLS rendition. Opens lazily on
/// the first video packet, because a passed-through stream may only reveal its parameter sets
/// in-band, and counts what it writes.
///
/// Confined to one thread: the variant's output queue when it has one, else its queue.
final class VariantOutput {
    struct Paths {
        /// nil for live jobs, which have no end to write a file for.
        var mp4: URL?
        var hlsDirectory: URL
        /// Segments in a live playlist; nil writes a complete (VOD) playlist at the end.
        var hlsWindow: Int? = nil
        /// Segments are cut at the next frame once this long, keyframe or not.
        var maximumSegmentDuration: Double? = nil
        /// Live jobs: Low-Latency HLS parts and blocking reloads (nil: plain live HLS).
        var lowLatency: Bool = false
        /// Live jobs: the node's stream for this variant (its RTSP players and origin push).
        var sink: (any MediaSink)? = nil
        /// Live jobs: arrival times of source pictures, to measure the latency this variant adds.
        var arrivals: ArrivalTimes? = nil
    }

    private let paths: Paths
    /// The node's stream for this variant, when live.
    var sink: (any MediaSink)? { paths.sink }
    private let audio: AudioTrack?
    private var mp4: Muxer?
    private var hls: HLSVariantWriter?
    private var pendingAudio: [Packet] = []
    /// End of the last picture written, in the video time base once open.
    private var lastVideoEnd = MediaTime.zero(ArrivalTimes.timeBase)
    private let frameRate: Double
    /// The last picture handed to players, held from the files until the next one gives its
    /// length (`writeHeldVideo`).
    private var heldVideo: (packet: Packet, time: MediaTime, startsSegment: Bool)?

    private(set) var frames = 0
    private(set) var videoBytes = 0
    private var firstVideoTime: MediaTime?
    private(set) var keyframes = 0
    private(set) var keyframeTimes: [MediaTime] = []
    private(set) var codecs = ""
    private(set) var latency = LatencySamples()
    private(set) var videoTimeBase = Rational(1, 90000)

    /// Audio packets held while waiting for the first video packet (about 10 s of AAC).
    static let maximumPendingAudio = 500
    /// What a picture's latency from its arrival is measured on (the live source's clock).
    let clock: NodeClock

    init(paths: Paths, audio: AudioTrack?, frameRate: Double, clock: NodeClock) {
        self.clock = clock
        self.paths = paths
        self.audio = audio
        self.frameRate = frameRate > 0 ? frameRate : 30
    }

    var isOpen: Bool { hls != nil }
    var meter: BitrateMeter { hls?.meter ?? BitrateMeter() }
    var segments: [HLSMediaPlaylist.Segment] { hls.map { Array($0.segments) } ?? [] }
    /// HLS files that could not be written (segments skipped).
    var failedWrites: Int { hls?.failedWrites ?? 0 }

    /// Opens the MP4 and HLS muxers for this video track.
    func open(video parameters: CodecParameters, timeBase: Rational) throws {
        let sets = H264.parameterSets(fromExtradata: parameters.extradata)
        codecs = sets.sps.first.flatMap { H264.codecString(sps: $0) } ?? "avc1.640028"
        if let entry = audio?.codecsEntry { codecs += "," + entry }
        videoTimeBase = timeBase
        lastVideoEnd = lastVideoEnd.rescaled(to: timeBase)
        if let path = paths.mp4 {
            let mp4 = try Muxer(format: "mp4", destination: .file(path: path.path))
            try mp4.addStream(parameters, timeBase: timeBase)
            if let audio { try mp4.addStream(audio.parameters, timeBase: audio.stream.timeBase) }
            try mp4.writeHeader()
            self.mp4 = mp4
        }
        hls = try HLSVariantWriter(directory: paths.hlsDirectory, video: parameters, videoTimeBase: timeBase, audio: audio, window: paths.hlsWindow,
                                   maximumSegmentDuration: paths.maximumSegmentDuration,
                                   lowLatency: paths.lowLatency ? .init(partTarget: HLSVariantWriter.LowLatency.partTarget(frameRate: frameRate)) : nil)
        announceFormat(sets)
        for packet in pendingAudio { try writeAudio(packet) }
        pendingAudio.removeAll()
    }

    /// A new publisher with another video format (passed-through top): a new init segment and a discontinuity.
    func changeFormat(video parameters: CodecParameters, timeBase: Rational, at time: MediaTime) throws {
        let sets = H264.parameterSets(fromExtradata: parameters.extradata)
        if let sps = sets.sps.first, let code = H264.codecString(sps: sps) {
            codecs = code + (audio?.codecsEntry.map { "," + $0 } ?? "")
        }
        try writeHeldVideo()
        try hls?.changeFormat(video: parameters, videoTimeBase: timeBase, at: time)
        announceFormat(sets)
    }

    /// The timeline resumes after an interruption: the next segment is marked as a discontinuity.
    func markDiscontinuity(at time: MediaTime) throws {
        try writeHeldVideo()
        try hls?.markDiscontinuity(at: time)
    }

    private func announceFormat(_ sets: (sps: [[UInt8]], pps: [[UInt8]])) {
        guard let sink = paths.sink, let sps = sets.sps.first, let pps = sets.pps.first else { return }
        let audioFormat = audio.flatMap { track -> AudioFormat? in
            track.parameters.isAAC ? AudioFormat(sampleRate: track.parameters.sampleRate, channels: track.parameters.channelCount,
                                                 config: track.parameters.extradata) : nil
        }
        sink.setFormats(video: VideoFormat(sps: sps, pps: pps, frameRate: frameRate), audio: audioFormat)
    }

    func writeVideo(_ packet: Packet, startsSegment: Bool) throws {
        guard hls != nil else { return }
        // Live sources (RTSP) carry no packet durations, and MP4 takes the last sample's length
        // from its packet: without one the edit list would cut the last picture off.
        if packet.duration <= 0 {
            packet.duration = max(1, MediaTime(seconds: 1 / frameRate, timeBase: packet.timeBase).ticks)
        }
        let time = MediaTime(ticks: packet.pts, timeBase: packet.timeBase)
        // Players first: a picture that starts a segment closes the previous one (the fragment,
        // its file and the playlist), and RTSP players need not wait for that. HLS players see
        // the picture only with its whole segment, seconds later, either way.
        if let sink = paths.sink {
            // Split in place: each NAL unit is copied once, straight out of the packet.
            let units = packet.withBytes { (H264.accessUnitNALUnits($0) ?? []).map(Array.init) }
            sink.writeVideo(units, time: time, isKeyframe: packet.isKeyframe)
        }
        if let arrivals = paths.arrivals,
           let arrival = arrivals.arrival(timelineTicks: packet.timeBase.rescale(packet.pts, to: ArrivalTimes.timeBase)) {
            latency.add(clock.seconds(since: arrival))
        }
        if let held = heldVideo {
            // The real gap to this picture is the held one's length, whatever the frame rate says.
            if held.packet.dts != noTimestamp, packet.dts != noTimestamp, packet.dts > held.packet.dts,
               packet.timeBase == held.packet.timeBase {
                held.packet.duration = packet.dts - held.packet.dts
            }
            try writeHeldVideo()
        }
        heldVideo = (packet, time, startsSegment || frames == 0)
        frames += 1
        videoBytes += packet.size
        if firstVideoTime == nil { firstVideoTime = time }
        if packet.isKeyframe {
            keyframes += 1
            keyframeTimes.append(time)
        }
        lastVideoEnd = max(lastVideoEnd, time + MediaTime(ticks: packet.duration, timeBase: packet.timeBase))
    }

    /// Writes the held picture to the files. A fragment's last sample takes its length from its
    /// packet, and the next fragment starts where that length ends: with the frame rate's guess
    /// instead of the real gap, a variable-rate publisher's keyframe (the next segment's first
    /// picture) would move by the difference.
    private func writeHeldVideo() throws {
        guard let held = heldVideo, let hls else { return }
        heldVideo = nil
        try hls.writeVideo(held.packet, time: held.time, startsSegment: held.startsSegment,
                           frameDuration: MediaTime(ticks: held.packet.duration, timeBase: held.packet.timeBase).seconds)
        try mp4?.write(held.packet, stream: 0)
        let waiting = pendingAudio
        pendingAudio.removeAll()
        for packet in waiting { try writeAudio(packet) }
    }

    /// Video payload alone over the video's duration: what compares with a declared `videoBitRate`
    /// (the HLS figures include audio and container, as RFC 8216 wants).
    var videoBitRate: Int {
        let duration = (lastVideoEnd - (firstVideoTime ?? .zero(videoTimeBase))).seconds
        return duration > 0 ? Int((Double(videoBytes) * 8 / duration).rounded()) : 0
    }

    func writeAudio(_ packet: Packet) throws {
        guard audio != nil else { return }
        // Before the first picture is written (none yet, or the first one still held) there is no
        // segment to put audio in; it waits for one.
        guard let hls, hls.hasOpenSegment || heldVideo == nil else {
            if pendingAudio.count < Self.maximumPendingAudio { pendingAudio.append(packet) }
            return
        }
        try hls.writeAudio(packet)
        try mp4?.write(packet, stream: 1)
        paths.sink?.writeAudio(packet.bytes, time: MediaTime(ticks: packet.pts, timeBase: packet.timeBase))
    }

    func finish() throws {
        try writeHeldVideo()
        try hls?.finish(endTime: lastVideoEnd)
        try mp4?.finish()
        mp4 = nil
        paths.sink?.end(reason: "the job ended")
    }

    /// End of the last picture written, on the job's timeline.
    var endTime: MediaTime { lastVideoEnd }
}
