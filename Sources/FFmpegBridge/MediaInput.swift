import MediaCore
import CFFmpeg

/// Where a job's packets come from: a container libavformat reads, or a live publisher.
/// Read from one thread only.
public protocol PacketReader: AnyObject {
    var url: String { get }
    var streams: [StreamInfo] { get }
    var bestVideoStream: StreamInfo? { get }
    /// Container-level bit rate, 0 when unknown.
    var bitRate: Int { get }
    func read() throws(FFmpegError) -> MediaInput.ReadResult
    /// When the packet `read` returned last arrived from the network (uptime nanoseconds), for live inputs.
    var lastArrival: UInt64? { get }
    /// Whether every video packet is a whole picture. Demuxers of RTP and raw streams may hand
    /// one picture's slices over as separate packets; a reader that assembles access units itself
    /// spares the job from holding each packet back until the next shows where the picture ends.
    var deliversWholeAccessUnits: Bool { get }
}

extension PacketReader {
    public var lastArrival: UInt64? { nil }
    public var deliversWholeAccessUnits: Bool { false }
}

/// What a demuxed stream is, read once when the input opens.
public struct StreamInfo: Sendable {
    public enum Kind: Sendable { case video, audio, other }
    public var index: Int
    public var kind: Kind
    public var codecName: String
    public var timeBase: Rational
    public var width: Int
    public var height: Int
    /// The shape of one stored pixel (4/3 for 1440x1080 shown as 1920x1080), 1/1 when square
    /// or when neither the container nor the bitstream says.
    public var sampleAspectRatio: Rational
    /// Average frame rate as the container reports it (0/0 when unknown).
    public var frameRate: Rational
    /// Bit rate declared by the container or measured by probing, 0 when unknown.
    public var bitRate: Int
    /// Frame count from the container's index (MP4 sample tables), 0 when unknown.
    public var frameCount: Int
    public var parameters: CodecParameters

    public init(index: Int, kind: Kind, codecName: String, timeBase: Rational, width: Int, height: Int,
                sampleAspectRatio: Rational = Rational(1, 1), frameRate: Rational, bitRate: Int, frameCount: Int, parameters: CodecParameters) {
        self.index = index
        self.kind = kind
        self.codecName = codecName
        self.timeBase = timeBase
        self.width = width
        self.height = height
        self.sampleAspectRatio = sampleAspectRatio.isValid ? sampleAspectRatio : Rational(1, 1)
        self.frameRate = frameRate
        self.bitRate = bitRate
        self.frameCount = frameCount
        self.parameters = parameters
    }
}

/// An opened input: a file libavformat can read, or a network URL (`rtsp://` is pulled over TCP).
///
/// Confined to one thread: the ingest loop that reads it.
public final class MediaInput: PacketReader {
    private var context: UnsafeMutablePointer<AVFormatContext>?
    public let url: String
    public private(set) var streams: [StreamInfo] = []

    public enum ReadResult {
        case packet(Packet)
        case endOfInput
        /// A live reader got nothing for a while; the caller decides whether that ends the input.
        case idle
    }

    /// A live stream's bytes, when they come through `ByteFeed` rather than a URL libavformat opens.
    private var feed: ByteFeed?

    /// - Parameter timeoutSeconds: for network inputs, how long a read may stall before it fails.
    public init(url: String, timeoutSeconds: Int = 10) throws(FFmpegError) {
        self.url = url
        var options: OpaquePointer? = nil
        defer { av_dict_free(&options) }
        if url.hasPrefix("rtsp://") || url.hasPrefix("rtsps://") {
            av_dict_set(&options, "rtsp_transport", "tcp", 0)
            av_dict_set(&options, "timeout", String(timeoutSeconds * 1_000_000), 0)
        } else if url.contains("://") {
            av_dict_set(&options, "rw_timeout", String(timeoutSeconds * 1_000_000), 0)
        }
        var context: UnsafeMutablePointer<AVFormatContext>? = nil
        try check(avformat_open_input(&context, url, nil, &options), "cannot open input \(url)")
        self.context = context
        try readStreams(analyzeDuration: nil)
    }

    /// A live stream in container `format` (`mpegts`) read from `feed` on this thread, which
    /// blocks while the feed waits for bytes: what an SRT publisher sends. `name` is for messages.
    /// Stream information is judged from at most `analyzeDuration` seconds of it.
    public init(feed: ByteFeed, format: String, name: String, analyzeDuration: Double = 1) throws(FFmpegError) {
        self.url = name
        self.feed = feed
        guard let inputFormat = av_find_input_format(format) else {
            throw FFmpegError(operation: "av_find_input_format", message: "this FFmpeg has no \(format) demuxer")
        }
        guard let allocated = avformat_alloc_context() else { throw FFmpegError(operation: "avformat_alloc_context", message: "out of memory") }
        let bufferSize: Int32 = 64 * 1024
        guard let buffer = av_malloc(Int(bufferSize)) else {
            avformat_free_context(allocated)
            throw FFmpegError(operation: "av_malloc", message: "out of memory")
        }
        // The feed outlives the context: this object holds it, and the context dies in deinit first.
        let io = avio_alloc_context(buffer.assumingMemoryBound(to: UInt8.self), bufferSize, 0, Unmanaged.passUnretained(feed).toOpaque(),
                                    { opaque, destination, size in
            guard let opaque, let destination, size > 0 else { return cffmpeg_averror_eof() }
            let read = Unmanaged<ByteFeed>.fromOpaque(opaque).takeUnretainedValue().read(into: destination, count: Int(size))
            return read > 0 ? Int32(read) : cffmpeg_averror_eof()
        }, nil, nil)
        guard let io else {
            av_free(buffer)
            avformat_free_context(allocated)
            throw FFmpegError(operation: "avio_alloc_context", message: "out of memory")
        }
        allocated.pointee.pb = io
        allocated.pointee.flags |= AVFMT_FLAG_CUSTOM_IO
        var context: UnsafeMutablePointer<AVFormatContext>? = allocated
        let opened = avformat_open_input(&context, name, inputFormat, nil)
        guard opened >= 0 else {
            // libavformat freed the context it was given, not the custom IO.
            Self.free(io)
            try check(opened, "cannot read \(format) from \(name)")
            return
        }
        self.context = context
        try readStreams(analyzeDuration: analyzeDuration)
    }

    private static func free(_ io: UnsafeMutablePointer<AVIOContext>) {
        av_freep(&io.pointee.buffer)
        var owned: UnsafeMutablePointer<AVIOContext>? = io
        avio_context_free(&owned)
    }

    /// What the input's streams are, as libavformat judges them from its first packets.
    private func readStreams(analyzeDuration: Double?) throws(FFmpegError) {
        guard let context else { throw FFmpegError(operation: "avformat_open_input", message: "no context") }
        if let analyzeDuration {
            // A live stream is judged from its first moments; no more than 2 MiB of it is read to do so.
            context.pointee.max_analyze_duration = Int64(analyzeDuration * 1_000_000)
            context.pointee.probesize = 2 << 20
        }
        try check(avformat_find_stream_info(context, nil), "cannot read stream information from \(url)")
        for i in 0..<Int(context.pointee.nb_streams) {
            guard let stream = context.pointee.streams[i], let par = stream.pointee.codecpar else { continue }
            let kind: StreamInfo.Kind = switch par.pointee.codec_type {
            case AVMEDIA_TYPE_VIDEO: .video
            case AVMEDIA_TYPE_AUDIO: .audio
            default: .other
            }
            var frameRate = Rational(stream.pointee.avg_frame_rate)
            if !frameRate.isValid { frameRate = Rational(stream.pointee.r_frame_rate) }
            // The container's pixel shape wins over the bitstream's (ffmpeg's own rule).
            var pixelShape = Rational(stream.pointee.sample_aspect_ratio)
            if !pixelShape.isValid { pixelShape = Rational(par.pointee.sample_aspect_ratio) }
            streams.append(StreamInfo(
                index: i, kind: kind,
                codecName: String(cString: avcodec_get_name(par.pointee.codec_id)),
                timeBase: Rational(stream.pointee.time_base),
                width: Int(par.pointee.width), height: Int(par.pointee.height),
                sampleAspectRatio: pixelShape, frameRate: frameRate,
                bitRate: Int(par.pointee.bit_rate),
                frameCount: Int(stream.pointee.nb_frames),
                parameters: try CodecParameters(copying: par)))
        }
    }

    deinit {
        let customIO = feed != nil ? context?.pointee.pb : nil
        avformat_close_input(&context)
        if let customIO { Self.free(customIO) }
    }

    public var formatName: String {
        context?.pointee.iformat?.pointee.name.map { String(cString: $0) } ?? "unknown"
    }

    /// Container duration in seconds, 0 when unknown (live inputs).
    public var duration: Double {
        guard let d = context?.pointee.duration, d > 0 else { return 0 }
        return Double(d) / 1_000_000
    }

    /// Whole-container bit rate in bit/s, 0 when unknown.
    public var bitRate: Int { Int(context?.pointee.bit_rate ?? 0) }

    /// The container's byte position, for error messages.
    public var bytePosition: Int64 {
        guard let pb = context?.pointee.pb else { return -1 }
        return avio_tell(pb)
    }

    /// The best video stream, as libavformat ranks them.
    public var bestVideoStream: StreamInfo? {
        let index = av_find_best_stream(context, AVMEDIA_TYPE_VIDEO, -1, -1, nil, 0)
        return index >= 0 ? streams.first { $0.index == Int(index) } : nil
    }

    public func read() throws(FFmpegError) -> ReadResult {
        let packet = try Packet()
        let code = av_read_frame(context, packet.pointer)
        if code == cffmpeg_averror_eof() { return .endOfInput }
        try check(code, "cannot read from \(url) at byte \(bytePosition)")
        if let stream = streams.first(where: { $0.index == packet.streamIndex }) {
            packet.timeBase = stream.timeBase
        }
        return .packet(packet)
    }
}
