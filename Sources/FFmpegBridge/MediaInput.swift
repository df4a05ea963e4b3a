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
    /// Average frame rate as the container reports it (0/0 when unknown).
    public var frameRate: Rational
    /// Bit rate declared by the container or measured by probing, 0 when unknown.
    public var bitRate: Int
    /// Frame count from the container's index (MP4 sample tables), 0 when unknown.
    public var frameCount: Int
    public var parameters: CodecParameters

    public init(index: Int, kind: Kind, codecName: String, timeBase: Rational, width: Int, height: Int, frameRate: Rational,
                bitRate: Int, frameCount: Int, parameters: CodecParameters) {
        self.index = index
        self.kind = kind
        self.codecName = codecName
        self.timeBase = timeBase
        self.width = width
        self.height = height
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
        try check(avformat_find_stream_info(context, nil), "cannot read stream information from \(url)")
        guard let context else { throw FFmpegError(operation: "avformat_open_input", message: "no context") }
        for i in 0..<Int(context.pointee.nb_streams) {
            guard let stream = context.pointee.streams[i], let par = stream.pointee.codecpar else { continue }
            let kind: StreamInfo.Kind = switch par.pointee.codec_type {
            case AVMEDIA_TYPE_VIDEO: .video
            case AVMEDIA_TYPE_AUDIO: .audio
            default: .other
            }
            var frameRate = Rational(stream.pointee.avg_frame_rate)
            if !frameRate.isValid { frameRate = Rational(stream.pointee.r_frame_rate) }
            streams.append(StreamInfo(
                index: i, kind: kind,
                codecName: String(cString: avcodec_get_name(par.pointee.codec_id)),
                timeBase: Rational(stream.pointee.time_base),
                width: Int(par.pointee.width), height: Int(par.pointee.height),
                frameRate: frameRate,
                bitRate: Int(par.pointee.bit_rate),
                frameCount: Int(stream.pointee.nb_frames),
                parameters: try CodecParameters(copying: par)))
        }
    }

    deinit {
        avformat_close_input(&context)
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
