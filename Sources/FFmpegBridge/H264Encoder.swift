import MediaCore
import CFFmpeg

/// x264 settings for one live ladder rung.
public struct H264EncoderSettings: Sendable, Hashable {
    public var width: Int
    public var height: Int
    /// Target and VBV max rate, bit/s.
    public var bitRate: Int
    /// VBV buffer in bits; at most one second of `bitRate`.
    public var bufferSize: Int
    public var timeBase: Rational
    public var frameRate: Rational
    public var preset: String
    /// baseline, main or high.
    public var profile: String
    public var threads: Int

    public init(width: Int, height: Int, bitRate: Int, bufferSize: Int? = nil, timeBase: Rational,
                frameRate: Rational, preset: String = "veryfast", profile: String = "high", threads: Int = 1) {
        self.width = width
        self.height = height
        self.bitRate = bitRate
        self.bufferSize = min(bufferSize ?? bitRate, bitRate)
        self.timeBase = timeBase
        self.frameRate = frameRate
        self.preset = preset
        self.profile = profile
        self.threads = threads
    }
}

/// libx264 through libavcodec, set up for live ABR: CBR-like VBV, zerolatency, no B-frames,
/// no scenecut and no keyframes of its own: IDRs come only where the job's grid forces them.
///
/// Confined to the variant's queue.
public final class H264Encoder {
    private var context: UnsafeMutablePointer<AVCodecContext>?
    private let packetScratch: Packet
    public let settings: H264EncoderSettings

    public enum Step {
        case packet(Packet)
        case needsInput
        case drained
    }

    /// x264's "no automatic keyframes" value (X264_KEYINT_MAX_INFINITE).
    static let infiniteKeyint: Int32 = 1 << 30

    public init(settings: H264EncoderSettings) throws(FFmpegError) {
        self.settings = settings
        self.packetScratch = try Packet()
        guard let codec = avcodec_find_encoder_by_name("libx264") else {
            throw FFmpegError(operation: "avcodec_find_encoder_by_name", message: "this FFmpeg has no libx264 encoder")
        }
        guard let context = avcodec_alloc_context3(codec) else {
            throw FFmpegError(operation: "avcodec_alloc_context3", message: "out of memory")
        }
        self.context = context
        context.pointee.width = Int32(settings.width)
        context.pointee.height = Int32(settings.height)
        context.pointee.pix_fmt = AV_PIX_FMT_YUV420P
        context.pointee.time_base = settings.timeBase.av
        context.pointee.pkt_timebase = settings.timeBase.av
        if settings.frameRate.isValid { context.pointee.framerate = settings.frameRate.av }
        context.pointee.sample_aspect_ratio = AVRational(num: 1, den: 1)
        context.pointee.bit_rate = Int64(settings.bitRate)
        context.pointee.rc_max_rate = Int64(settings.bitRate)
        context.pointee.rc_buffer_size = Int32(settings.bufferSize)
        context.pointee.gop_size = Self.infiniteKeyint
        context.pointee.max_b_frames = 0
        context.pointee.thread_count = Int32(max(1, settings.threads))
        // MP4 and HLS init segments need SPS/PPS up front (avcC), not only in-band.
        context.pointee.flags |= cffmpeg_codec_flag_global_header()

        var options: OpaquePointer? = nil
        defer { av_dict_free(&options) }
        av_dict_set(&options, "preset", settings.preset, 0)
        av_dict_set(&options, "tune", "zerolatency", 0)
        av_dict_set(&options, "profile", settings.profile, 0)
        av_dict_set(&options, "forced-idr", "1", 0)
        av_dict_set(&options, "x264-params", "scenecut=0", 0)
        try check(avcodec_open2(context, codec, &options), "cannot open libx264 at \(settings.width)x\(settings.height) preset \(settings.preset) profile \(settings.profile)")
    }

    deinit {
        avcodec_free_context(&context)
    }

    /// The codec parameters of the output (with SPS/PPS extradata), for muxers.
    public func parameters() throws(FFmpegError) -> CodecParameters {
        try CodecParameters(from: context!)
    }

    /// SPS and PPS as x264 emitted them (Annex B).
    public var extradata: [UInt8] {
        guard let data = context?.pointee.extradata, let size = context?.pointee.extradata_size, size > 0 else { return [] }
        return Array(UnsafeBufferPointer(start: data, count: Int(size)))
    }

    /// Feeds a picture (nil to drain). Its `forceKeyframe` decides whether it becomes an IDR.
    public func send(_ frame: Frame?) throws(FFmpegError) {
        let code = avcodec_send_frame(context, frame?.pointer)
        if code == cffmpeg_averror_eof() { return }
        try check(code, "libx264 rejected a frame")
    }

    public func receive() throws(FFmpegError) -> Step {
        let code = avcodec_receive_packet(context, packetScratch.pointer)
        if code == cffmpeg_averror_eagain() { return .needsInput }
        if code == cffmpeg_averror_eof() { return .drained }
        try check(code, "libx264 failed to encode")
        let packet = try Packet()
        av_packet_move_ref(packet.pointer, packetScratch.pointer)
        packet.timeBase = settings.timeBase
        return .packet(packet)
    }
}
