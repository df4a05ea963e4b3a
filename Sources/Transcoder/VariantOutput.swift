import Foundation
import FFmpegBridge
import MediaCore

/// Everything one variant's packets go to: its MP4 file and its HLS rendition. Opens lazily on
/// the first video packet, because a passed-through stream may only reveal its parameter sets
/// in-band, and counts what it writes.
///
/// Confined to the variant's queue.
final class VariantOutput {
    struct Paths {
        var mp4: URL
        var hlsDirectory: URL
    }

    private let paths: Paths
    private let audio: AudioTrack?
    private var mp4: Muxer?
    private var hls: HLSVariantWriter?
    private var pendingAudio: [Packet] = []
    private var lastVideoEnd = 0.0
    private let frameDuration: Double

    private(set) var frames = 0
    private(set) var videoBytes = 0
    private var firstVideoTime: Double?
    private(set) var keyframes = 0
    private(set) var keyframeTimes: [Double] = []
    private(set) var codecs = ""
    private(set) var videoTimeBase = Rational(1, 90000)

    /// Audio packets held while waiting for the first video packet (about 10 s of AAC).
    static let maximumPendingAudio = 500

    init(paths: Paths, audio: AudioTrack?, frameRate: Double) {
        self.paths = paths
        self.audio = audio
        self.frameDuration = frameRate > 0 ? 1 / frameRate : 1.0 / 30
    }

    var isOpen: Bool { mp4 != nil }
    var meter: BitrateMeter { hls?.meter ?? BitrateMeter() }
    var segments: [HLSMediaPlaylist.Segment] { hls?.segments ?? [] }

    /// Opens the MP4 and HLS muxers for this video track.
    func open(video parameters: CodecParameters, timeBase: Rational) throws {
        let sets = H264.parameterSets(fromExtradata: parameters.extradata)
        codecs = sets.sps.first.flatMap { H264.codecString(sps: $0) } ?? "avc1.640028"
        if let entry = audio?.codecsEntry { codecs += "," + entry }
        videoTimeBase = timeBase
        let mp4 = try Muxer(format: "mp4", destination: .file(path: paths.mp4.path))
        try mp4.addStream(parameters, timeBase: timeBase)
        if let audio { try mp4.addStream(audio.parameters, timeBase: audio.stream.timeBase) }
        try mp4.writeHeader()
        self.mp4 = mp4
        hls = try HLSVariantWriter(directory: paths.hlsDirectory, video: parameters, videoTimeBase: timeBase, audio: audio)
        for packet in pendingAudio { try writeAudio(packet) }
        pendingAudio.removeAll()
    }

    func writeVideo(_ packet: Packet, startsSegment: Bool) throws {
        guard let mp4, let hls else { return }
        // Live sources (RTSP) carry no packet durations, and MP4 takes the last sample's length
        // from its packet: without one the edit list would cut the last picture off.
        if packet.duration <= 0 {
            packet.duration = max(1, Int64((frameDuration / packet.timeBase.seconds(1)).rounded()))
        }
        let time = packet.timeBase.seconds(packet.pts)
        try hls.writeVideo(packet, time: time, startsSegment: startsSegment || frames == 0)
        try mp4.write(packet, stream: 0)
        frames += 1
        videoBytes += packet.size
        if firstVideoTime == nil { firstVideoTime = time }
        if packet.isKeyframe {
            keyframes += 1
            keyframeTimes.append(time)
        }
        lastVideoEnd = max(lastVideoEnd, time + packet.timeBase.seconds(packet.duration))
    }

    /// Video payload alone over the video's duration: what compares with a declared `videoBitRate`
    /// (the HLS figures include audio and container, as RFC 8216 wants).
    var videoBitRate: Int {
        let duration = lastVideoEnd - (firstVideoTime ?? 0)
        return duration > 0 ? Int((Double(videoBytes) * 8 / duration).rounded()) : 0
    }

    func writeAudio(_ packet: Packet) throws {
        guard audio != nil else { return }
        guard let mp4, let hls else {
            if pendingAudio.count < Self.maximumPendingAudio { pendingAudio.append(packet) }
            return
        }
        try hls.writeAudio(packet)
        try mp4.write(packet, stream: 1)
    }

    func finish() throws {
        try hls?.finish(endTime: lastVideoEnd)
        try mp4?.finish()
        mp4 = nil
    }
}
