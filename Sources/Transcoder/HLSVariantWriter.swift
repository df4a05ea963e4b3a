import Foundation
import FFmpegBridge
import MediaCore

/// Packages one variant as HLS: `init.mp4` plus one fMP4 fragment per segment, cut exactly where
/// the job's grid says, and its media playlist. Measures every segment for the hints.
///
/// Confined to the variant's queue.
final class HLSVariantWriter {
    let directory: URL
    private let muxer: Muxer
    private(set) var segments: [HLSMediaPlaylist.Segment] = []
    private(set) var meter: BitrateMeter
    private var segmentStart: Double?
    private var segmentIndex = 0

    static let initName = "init.mp4"
    static let playlistName = "index.m3u8"

    init(directory: URL, video: CodecParameters, videoTimeBase: Rational, audio: AudioTrack?) throws {
        self.directory = directory
        self.meter = BitrateMeter()
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        // empty_moov + frag_custom: the header is the init segment and fragments end only when
        // we say; skip_trailer: no mfra index after the last fragment, which HLS has no use for.
        muxer = try Muxer(format: "mp4", destination: .memory,
                          options: ["movflags": "empty_moov+default_base_moof+frag_custom+skip_trailer"])
        try muxer.addStream(video, timeBase: videoTimeBase)
        if let audio { try muxer.addStream(audio.parameters, timeBase: audio.stream.timeBase) }
        try muxer.writeHeader()
        try Data(muxer.takeBytes()).write(to: directory.appendingPathComponent(Self.initName))
    }

    /// - Parameter startsSegment: this video packet begins a new segment (it is an IDR on the grid).
    func writeVideo(_ packet: Packet, time: Double, startsSegment: Bool) throws {
        if startsSegment, segmentStart != nil { try cutSegment(at: time) }
        if segmentStart == nil { segmentStart = time }
        try muxer.write(packet, stream: 0)
    }

    func writeAudio(_ packet: Packet) throws {
        try muxer.write(packet, stream: 1)
    }

    /// Closes the open segment at `time` (the next segment's start, or the end of the last frame).
    func cutSegment(at time: Double) throws {
        guard let start = segmentStart else { return }
        try muxer.flushFragment()
        let bytes = muxer.takeBytes()
        let name = String(format: "segment_%05d.m4s", segmentIndex)
        try Data(bytes).write(to: directory.appendingPathComponent(name))
        let duration = max(time - start, 0.001)
        segments.append(HLSMediaPlaylist.Segment(uri: name, duration: duration))
        meter.add(duration: duration, bytes: bytes.count)
        segmentIndex += 1
        segmentStart = time
    }

    func finish(endTime: Double) throws {
        try cutSegment(at: endTime)
        segmentStart = nil
        try muxer.finish()
        try writePlaylist(ended: true)
    }

    func writePlaylist(ended: Bool) throws {
        let playlist = HLSMediaPlaylist(kind: .vod, mapURI: Self.initName, segments: segments, ended: ended)
        try playlist.render().write(to: directory.appendingPathComponent(Self.playlistName), atomically: true, encoding: .utf8)
    }
}
