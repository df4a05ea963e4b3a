import MediaCore
import CFFmpeg

/// Decodes one video stream (libavcodec). Outcomes that are not failures (needs more input,
/// fully drained) are values, not errors.
///
/// Confined to the ingest thread.
public final class VideoDecoder {
    private var context: UnsafeMutablePointer<AVCodecContext>?
    private let timeBase: Rational

    public enum Step {
        case frame(Frame)
        case needsInput
        case drained
    }

    /// - Parameters:
    ///   - maximumPixels: pictures larger than this (width × height) are refused by libavcodec
    ///     (`max_pixels`), including after an in-band SPS change; nil keeps its default.
    ///   - lowDelay: slice threads only. Frame threads hold `threads - 1` pictures back before the
    ///     first comes out, latency a live job cannot afford and throughput a file job wants.
    public convenience init(stream: StreamInfo, threads: Int, maximumPixels: Int? = nil, lowDelay: Bool = false) throws(FFmpegError) {
        try self.init(parameters: stream.parameters, timeBase: stream.timeBase, threads: threads, maximumPixels: maximumPixels, lowDelay: lowDelay)
    }

    /// A decoder for packets described by `parameters` (an encoder's own output, for example),
    /// with timestamps in `timeBase`.
    public init(parameters: CodecParameters, timeBase: Rational, threads: Int, maximumPixels: Int? = nil, lowDelay: Bool = false) throws(FFmpegError) {
        let par = parameters.pointer
        let codecName = parameters.codecName
        guard let codec = avcodec_find_decoder(par.pointee.codec_id) else {
            throw FFmpegError(operation: "avcodec_find_decoder", message: "no decoder for \(codecName)")
        }
        guard let context = avcodec_alloc_context3(codec) else {
            throw FFmpegError(operation: "avcodec_alloc_context3", message: "out of memory")
        }
        self.context = context
        self.timeBase = timeBase
        try check(avcodec_parameters_to_context(context, par), "avcodec_parameters_to_context")
        context.pointee.pkt_timebase = timeBase.av
        context.pointee.thread_count = Int32(max(1, threads))
        context.pointee.thread_type = lowDelay ? FF_THREAD_SLICE : FF_THREAD_FRAME | FF_THREAD_SLICE
        if let maximumPixels { context.pointee.max_pixels = Int64(max(1, maximumPixels)) }
        try check(avcodec_open2(context, codec, nil), "cannot open \(codecName) decoder")
    }

    deinit {
        avcodec_free_context(&context)
    }

    /// Feeds one packet, or nil to start draining. Bad data is reported as an error the caller
    /// may count and skip; the decoder stays usable.
    public func send(_ packet: Packet?) throws(FFmpegError) {
        let code = avcodec_send_packet(context, packet?.pointer)
        if code == cffmpeg_averror_eagain() || code == cffmpeg_averror_eof() { return }
        try check(code, "cannot decode video packet")
    }

    /// Receives the next decoded frame into `frame` (reusing its allocation).
    public func receive(into frame: Frame) throws(FFmpegError) -> Step {
        frame.unreference()
        let code = avcodec_receive_frame(context, frame.pointer)
        if code == cffmpeg_averror_eagain() { return .needsInput }
        if code == cffmpeg_averror_eof() { return .drained }
        try check(code, "cannot decode video frame")
        return .frame(frame)
    }
}
