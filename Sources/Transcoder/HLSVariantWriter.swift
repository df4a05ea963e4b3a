import DequeModule
import Foundation
import FFmpegBridge
import MediaCore

/// Packages one variant as HLS: an init segment plus one fMP4 fragment per segment, cut exactly
/// where the job's grid says, and its media playlist: complete (VOD) when offline, a sliding
/// window rewritten after every segment when live. Measures every segment for the hints.
///
/// Files are written aside and renamed into place (`ReplacingFile`), so a player never reads half
/// a segment; only VOD output is synced to disk. A
/// write that fails (disk full) is counted and that segment skipped; the job goes on, and the
/// playlist marks the gap as a discontinuity.
///
/// Confined to the variant's queue.
final class HLSVariantWriter {
    let directory: URL
    /// Segments listed in a live playlist (on disk a playlist's length longer); nil keeps all (VOD).
    let window: Int?
    /// A segment is cut at the next frame once it is this long, keyframe or not, so a source
    /// with a very long GOP cannot make segments (and player latency) grow without bound.
    let maximumSegmentDuration: Double?
    /// Segments (and init segments) that could not be written.
    private(set) var failedWrites = 0
    /// An init segment not yet on disk: retried before the next segment, which needs it.
    private var pendingInit: [UInt8]?
    private var independentSegments = true
    private var muxer: Muxer
    private let audio: AudioTrack?
    private(set) var segments = Deque<HLSMediaPlaylist.Segment>()
    /// Segments that left the live window stay on disk a while: RFC 8216's rule.
    private var retention = HLSSegmentRetention()
    private(set) var meter: BitrateMeter
    private var segmentStart: MediaTime?
    private var segmentIndex = 0
    private var mediaSequence = 0
    private var discontinuitySequence = 0
    private var initIndex = 0
    private var currentMap: String
    private var pendingDiscontinuity = false
    private var longestSegment = 1

    static let playlistName = HLSLayout.mediaPlaylist

    /// Low-Latency HLS (live only): every segment is also cut into parts of about `partTarget`
    /// seconds, each a fragment of its own written as a file as soon as it ends; the segment's
    /// file is its parts' bytes end to end, so the rung is muxed once. The playlist is
    /// published to `livePlaylists` after every part, where blocked reloads wait for it.
    struct LowLatency {
        /// `PART-TARGET`: a whole number of frames, about a third of a second.
        var partTarget: Double
        var livePlaylists: LivePlaylists = .shared

        /// The part target for a frame rate: the whole number of frames nearest a third of a second.
        static func partTarget(frameRate: Double) -> Double {
            let rate = frameRate.isFinite && frameRate > 1 ? frameRate : 30
            return max(1, (rate / 3).rounded()) / rate
        }
    }

    /// Parts of the segment being written (Low-Latency HLS): its bytes so far, its parts, and
    /// where the part being written began.
    private let lowLatency: LowLatency?
    private var segmentBytes: [UInt8] = []
    private var openParts: [HLSMediaPlaylist.Part] = []
    private var partStart: MediaTime?
    private var segmentStartsWithKeyframe = true
    /// Part files still on disk, oldest segment first (they go a few segments after their segment).
    private var partFiles = Deque<(segment: Int, names: [String])>()
    /// Segments whose parts stay on disk after the segment is complete: a player that read a
    /// playlist listing them may still ask (parts are listed for the last three target durations).
    static let segmentsKeepingParts = 6

    init(directory: URL, video: CodecParameters, videoTimeBase: Rational, audio: AudioTrack?, window: Int?,
         maximumSegmentDuration: Double? = nil, lowLatency: LowLatency? = nil) throws {
        self.directory = directory
        playlistPath = directory.appendingPathComponent(Self.playlistName).standardizedFileURL.path
        directoryPath = directory.path
        self.window = window
        self.lowLatency = window == nil ? nil : lowLatency
        self.audio = audio
        self.maximumSegmentDuration = maximumSegmentDuration
        self.meter = BitrateMeter(retainedSegments: window.map { max($0, 30) } ?? .max)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        currentMap = HLSLayout.initSegment(0)
        muxer = try Self.makeMuxer(video: video, videoTimeBase: videoTimeBase, audio: audio)
        if window != nil { continueNumbering() }
        pendingInit = muxer.takeBytes()
        writePendingInit()
    }

    /// A writer that goes away unfinished (its rung failed, or finishing it threw first) takes its
    /// live playlist with it: left behind, the last one would be served as live for as long as
    /// the node runs, and blocked reloads on it would wait out their limit.
    deinit {
        lowLatency?.livePlaylists.remove(path: playlistPath, owner: ObjectIdentifier(self))
    }

    /// A live playlist already in the folder (a restart, or an earlier job of the same
    /// provision): numbering carries on after it, with a discontinuity, and its files go.
    private func continueNumbering() {
        let playlist = directory.appendingPathComponent(Self.playlistName)
        guard let data = FileManager.default.contents(atPath: playlist.path), data.count <= 1 << 20 else { return }
        let previous = HLSPlaylistContinuation(playlistText: String(decoding: data, as: UTF8.self))
        mediaSequence = previous.mediaSequence
        discontinuitySequence = previous.discontinuitySequence
        segmentIndex = previous.segmentIndex
        initIndex = previous.initIndex
        currentMap = HLSLayout.initSegment(initIndex)
        pendingDiscontinuity = true
        let folder = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        for name in previous.supersededFiles(among: folder) { try? FileManager.default.removeItem(at: directory.appendingPathComponent(name)) }
    }

    /// Writes `bytes` next to `name` and renames it into place: readers see the old file or the whole new one.
    private func writeFile(_ bytes: [UInt8], name: String) -> Bool {
        do {
            try ReplacingFile.write(bytes, directory: directoryPath, name: name, durable: window == nil)
            return true
        } catch {
            failedWrites += 1
            return false
        }
    }

    private func writePendingInit() {
        if let bytes = pendingInit, writeFile(bytes, name: currentMap) { pendingInit = nil }
    }

    /// empty_moov + frag_custom: the header is the init segment and fragments end only when we
    /// say; skip_trailer: no mfra index after the last fragment, which HLS has no use for.
    private static func makeMuxer(video: CodecParameters, videoTimeBase: Rational, audio: AudioTrack?) throws -> Muxer {
        let muxer = try Muxer(format: "mp4", destination: .memory,
                              options: ["movflags": "empty_moov+default_base_moof+frag_custom+skip_trailer"])
        try muxer.addStream(video, timeBase: videoTimeBase)
        if let audio { try muxer.addStream(audio.parameters, timeBase: audio.stream.timeBase) }
        try muxer.writeHeader()
        return muxer
    }

    /// - Parameters:
    ///   - startsSegment: this video packet begins a new segment (it is an IDR on the grid).
    ///   - frameDuration: its length (seconds): a part ends before the picture that would take it past the target.
    func writeVideo(_ packet: Packet, time: MediaTime, startsSegment: Bool, frameDuration: Double = 0) throws {
        if startsSegment, segmentStart != nil {
            try cutSegment(at: time)
        } else if let start = segmentStart, let maximum = maximumSegmentDuration, (time - start).seconds >= maximum {
            if !packet.isKeyframe { independentSegments = false }
            try cutSegment(at: time)
        } else if let lowLatency, let start = partStart, (time - start).seconds + frameDuration / 2 > lowLatency.partTarget {
            try cutPart(at: time)
        }
        if segmentStart == nil {
            segmentStart = time
            segmentStartsWithKeyframe = packet.isKeyframe
        }
        if partStart == nil { partStart = time }
        try muxer.write(packet, stream: 0)
    }

    /// Ends the part being written at `time`: its fragment becomes a file, and the playlist names
    /// it. `publish` false: the segment ends with it, and the playlist is published with the
    /// segment (published now, its hint would name a part of this segment that never comes).
    private func cutPart(at time: MediaTime, publish: Bool = true) throws {
        guard let lowLatency, let start = partStart else { return }
        try muxer.flushFragment()
        let bytes = muxer.takeBytes()
        partStart = time
        guard !bytes.isEmpty else { return }
        let name = HLSLayout.partialSegment(segmentIndex, part: openParts.count)
        writePendingInit()
        // A part that cannot be written is left out of the playlist; its bytes still go into the segment.
        segmentBytes += bytes
        guard pendingInit == nil, writeFile(bytes, name: name) else { return }
        // Never longer than the target the playlist declares (a timestamp's jitter of a millisecond).
        let duration = min(max((time - start).seconds, 0.001), lowLatency.partTarget)
        openParts.append(HLSMediaPlaylist.Part(uri: name, duration: duration, independent: openParts.isEmpty && segmentStartsWithKeyframe))
        if publish { publishLowLatency() }
    }

    /// Audio is written only into a segment a picture has opened.
    var hasOpenSegment: Bool { segmentStart != nil }

    func writeAudio(_ packet: Packet) throws {
        guard segmentStart != nil else { return }
        try muxer.write(packet, stream: 1)
    }

    /// The video format changed (a new publisher with another size): the open segment ends at
    /// `time`, a new init segment follows, and the next segment is marked as a discontinuity.
    func changeFormat(video: CodecParameters, videoTimeBase: Rational, at time: MediaTime) throws {
        try cutSegment(at: time)
        segmentStart = nil
        partStart = nil
        _ = try? muxer.finish()
        initIndex += 1
        currentMap = HLSLayout.initSegment(initIndex)
        muxer = try Self.makeMuxer(video: video, videoTimeBase: videoTimeBase, audio: audio)
        pendingInit = muxer.takeBytes()
        writePendingInit()
        pendingDiscontinuity = true
    }

    /// Timestamps jump (a publisher came back after an interruption): the next segment is marked.
    func markDiscontinuity(at time: MediaTime) throws {
        try cutSegment(at: time)
        segmentStart = nil
        partStart = nil
        pendingDiscontinuity = true
    }

    /// Closes the open segment at `time` (the next segment's start, or the end of the last frame).
    func cutSegment(at time: MediaTime) throws {
        guard let start = segmentStart else { return }
        let bytes: [UInt8]
        var parts: [HLSMediaPlaylist.Part] = []
        if lowLatency != nil {
            // The last part ends with the segment, which is all its parts' bytes.
            try cutPart(at: time, publish: false)
            bytes = segmentBytes
            parts = openParts
            segmentBytes = []
            openParts = []
            if !parts.isEmpty { partFiles.append((segmentIndex, parts.map(\.uri))) }
            while let oldest = partFiles.first, oldest.segment <= segmentIndex - Self.segmentsKeepingParts {
                for name in oldest.names { try? FileManager.default.removeItem(at: directory.appendingPathComponent(name)) }
                partFiles.removeFirst()
            }
        } else {
            try muxer.flushFragment()
            bytes = muxer.takeBytes()
        }
        segmentStart = time
        guard !bytes.isEmpty else { return }
        let name = HLSLayout.mediaSegment(segmentIndex)
        segmentIndex += 1
        writePendingInit()
        guard pendingInit == nil, writeFile(bytes, name: name) else {
            // Skipped, not fatal: the next segment that fits on disk follows a discontinuity.
            if pendingInit != nil { failedWrites += 1 }
            pendingDiscontinuity = true
            return
        }
        // A segment made of parts lasts exactly as long as they do together.
        let duration = parts.isEmpty ? max((time - start).seconds, 0.001) : parts.reduce(0) { $0 + $1.duration }
        segments.append(HLSMediaPlaylist.Segment(uri: name, duration: duration, discontinuity: pendingDiscontinuity, mapURI: currentMap,
                                                 parts: parts))
        pendingDiscontinuity = false
        meter.add(duration: duration, bytes: bytes.count)
        longestSegment = max(longestSegment, HLSMediaPlaylist.targetDuration(for: [duration]))
        if let window {
            var removed: [HLSMediaPlaylist.Segment] = []
            while segments.count > window {
                removed.append(segments.removeFirst())
                mediaSequence += 1
                // EXT-X-DISCONTINUITY-SEQUENCE counts the discontinuity tags that left the window.
                if removed.last?.discontinuity == true { discontinuitySequence += 1 }
            }
            for name in retention.retire(removed, listed: segments, currentMap: currentMap) {
                try? FileManager.default.removeItem(at: directory.appendingPathComponent(name))
            }
            try? writePlaylist(ended: false)
        }
    }

    func finish(endTime: MediaTime) throws {
        try cutSegment(at: endTime)
        segmentStart = nil
        partStart = nil
        if let lowLatency { lowLatency.livePlaylists.remove(path: playlistPath, owner: ObjectIdentifier(self)) }
        try muxer.finish()
        // An offline rendition with a hole in it is not a result; a live one has moved on.
        if window == nil, failedWrites > 0 {
            throw TranscodeError.failed("cannot write HLS files in \(directory.path) (\(failedWrites) failed writes; is the disk full?)")
        }
        try writePlaylist(ended: true)
    }

    /// The key `LivePlaylists` knows the rung by: the playlist file's standardized absolute path,
    /// as the HTTP side finds it from a request's path.
    /// Computed once: Foundation's URL calls cost more than the rest of a part's publishing.
    private let playlistPath: String
    private let directoryPath: String

    private func playlist(ended: Bool) -> HLSMediaPlaylist {
        let kind: HLSMediaPlaylist.Kind = window == nil ? .vod : .live(mediaSequence: mediaSequence, discontinuitySequence: discontinuitySequence)
        // A live playlist's target duration never shrinks, as RFC 8216 requires.
        return HLSMediaPlaylist(kind: kind, mapURI: currentMap, segments: Array(segments), ended: ended,
                                minimumTargetDuration: window == nil ? 1 : longestSegment, independentSegments: independentSegments,
                                lowLatency: lowLatency.map {
                                    .init(partTarget: $0.partTarget, openParts: openParts,
                                          preloadHint: ended ? nil : HLSLayout.partialSegment(segmentIndex, part: openParts.count))
                                })
    }

    /// The playlist with its newest part, where blocked reloads wait. The node's HTTP server
    /// answers a live rung's playlist from there; the file on disk follows whole segments
    /// (`writePlaylist`), as with Low-Latency HLS off. Rewriting it with every part made a new
    /// file three times a second per rung, and the file system's inode allocation, which steps
    /// over every file deleted in the last half minute, cost more than the rest of LL-HLS.
    private func publishLowLatency() {
        guard let lowLatency else { return }
        HLSMediaPlaylist.forgetUnlistedParts(in: &segments, openSeconds: openParts.reduce(0) { $0 + $1.duration }, targetDuration: longestSegment)
        lowLatency.livePlaylists.publish(playlist(ended: false), path: playlistPath, owner: ObjectIdentifier(self))
    }

    func writePlaylist(ended: Bool) throws {
        let text: String
        if lowLatency != nil, !ended {
            // The file is what players waiting on the rung are given at this segment's end (its
            // rendition reports included), so a reader of the folder sees the same playlist.
            publishLowLatency()
            guard let published = lowLatency?.livePlaylists.snapshot(playlistPath)?.full else { return }
            text = published
        } else {
            text = playlist(ended: ended).render()
        }
        do {
            try ReplacingFile.write(Array(text.utf8), directory: directoryPath, name: Self.playlistName, durable: window == nil)
        } catch {
            // A live playlist is rewritten with the next segment; a VOD one must exist, so that fails the run.
            failedWrites += 1
            if window == nil { throw error }
        }
    }
}
