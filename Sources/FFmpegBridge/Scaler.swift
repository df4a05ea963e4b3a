import MediaCore
import CFFmpeg

/// Scales and converts decoded frames to one output size in YUV 4:2:0 (libswscale).
/// Rebuilds its context when the input size or pixel format changes mid-stream.
///
/// Confined to the variant's queue.
public final class Scaler {
    public let width: Int
    public let height: Int
    public let algorithm: ScalingAlgorithm
    private var context: OpaquePointer?
    private var output: Frame
    private var inputSignature: (Int32, Int32, Int32) = (0, 0, -1)

    public init(width: Int, height: Int, algorithm: ScalingAlgorithm = .bicubic) throws(FFmpegError) {
        self.width = width
        self.height = height
        self.algorithm = algorithm
        self.output = try Frame()
    }

    deinit {
        sws_freeContext(context)
    }

    /// Returns a frame of the output size holding `input`'s picture and timestamps.
    /// The returned frame is reused by the next call unless the encoder still holds it,
    /// in which case a new buffer is allocated (the encoder keeps its reference).
    public func scale(_ input: Frame) throws(FFmpegError) -> Frame {
        let source = input.pointer
        let signature = (source.pointee.width, source.pointee.height, source.pointee.format)
        if signature != inputSignature {
            context = sws_getCachedContext(
                context, signature.0, signature.1, AVPixelFormat(rawValue: signature.2),
                Int32(width), Int32(height), AV_PIX_FMT_YUV420P,
                algorithm.swscaleFlags, nil, nil, nil)
            guard context != nil else {
                throw FFmpegError(operation: "sws_getCachedContext",
                                  message: "cannot scale \(signature.0)x\(signature.1) \(input.pixelFormatName) to \(width)x\(height)")
            }
            inputSignature = signature
        }
        let out = output.pointer
        // The encoder may still hold the last picture; then take a fresh buffer rather than
        // letting av_frame_make_writable copy pixels we are about to overwrite.
        if out.pointee.buf.0 == nil || av_frame_is_writable(out) == 0 {
            av_frame_unref(out)
            out.pointee.width = Int32(width)
            out.pointee.height = Int32(height)
            out.pointee.format = AV_PIX_FMT_YUV420P.rawValue
            try check(av_frame_get_buffer(out, 0), "av_frame_get_buffer")
        }
        try withUnsafePointer(to: source.pointee.data) { srcData throws(FFmpegError) in
            try withUnsafePointer(to: source.pointee.linesize) { srcLines throws(FFmpegError) in
                try withUnsafeMutablePointer(to: &out.pointee.data) { dstData throws(FFmpegError) in
                    try withUnsafeMutablePointer(to: &out.pointee.linesize) { dstLines throws(FFmpegError) in
                        let srcPlanes = UnsafeRawPointer(srcData).assumingMemoryBound(to: UnsafePointer<UInt8>?.self)
                        let dstPlanes = UnsafeRawPointer(dstData).assumingMemoryBound(to: UnsafeMutablePointer<UInt8>?.self)
                        let srcStrides = UnsafeRawPointer(srcLines).assumingMemoryBound(to: Int32.self)
                        let dstStrides = UnsafeRawPointer(dstLines).assumingMemoryBound(to: Int32.self)
                        try check(sws_scale(context, srcPlanes, srcStrides, 0, source.pointee.height, dstPlanes, dstStrides),
                                  "sws_scale")
                    }
                }
            }
        }
        out.pointee.pts = input.pts
        out.pointee.pict_type = AV_PICTURE_TYPE_NONE
        out.pointee.color_primaries = source.pointee.color_primaries
        out.pointee.color_trc = source.pointee.color_trc
        out.pointee.colorspace = source.pointee.colorspace
        // swscale writes limited range for YUV420P whatever the input range.
        out.pointee.color_range = AVCOL_RANGE_MPEG
        out.pointee.sample_aspect_ratio = AVRational(num: 1, den: 1)
        return output
    }
}

/// The filter a `Scaler` resamples with.
public enum ScalingAlgorithm: String, Sendable, CaseIterable {
    /// The ladder's scaler: swscale's default, a good balance of speed and sharpness.
    case bicubic
    /// Bicubic luma, bilinear chroma.
    case bicublin
    case bilinear
    /// swscale's fastest, with visibly worse quality; for measuring what speed costs.
    case fastBilinear = "fast-bilinear"
    /// Averages the source pixels under each output pixel: a good fit for large reductions.
    case area
    /// A reference: the picture a rung is measured against, sharper and slower than the ladder's
    /// own.
    case lanczos

    var swscaleFlags: Int32 {
        switch self {
        case .bicubic: SWS_BICUBIC
        case .bicublin: SWS_BICUBLIN
        case .bilinear: SWS_BILINEAR
        case .fastBilinear: SWS_FAST_BILINEAR
        case .area: SWS_AREA
        case .lanczos: SWS_LANCZOS
        }
    }
}
