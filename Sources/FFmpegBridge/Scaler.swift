import MediaCore
import CFFmpeg
import CPlaneScaler

/// Scales and converts decoded frames to one output size in YUV 4:2:0: 8-bit 4:2:0 pictures with
/// the ladder's bicubic by the node's own plane scaler (CPlaneScaler), everything else by
/// libswscale. Rebuilds what it holds when the input size or pixel format changes mid-stream.
///
/// Confined to the variant's queue.
public final class Scaler {
    public let width: Int
    public let height: Int
    public let algorithm: ScalingAlgorithm
    private var context: OpaquePointer?
    private var planeScalers: PlaneScalers?
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

    /// The kernel the plane scaler runs for the current input ("avx512", "avx2", "portable"), or
    /// "swscale" when libswscale scales it; nil before the first picture.
    public var kernel: String? {
        guard inputSignature.2 >= 0 else { return nil }
        return planeScalers?.kernelName ?? "swscale"
    }

    /// Returns a frame of the output size holding `input`'s picture and timestamps.
    /// The returned frame is reused by the next call unless the encoder still holds it,
    /// in which case a new buffer is allocated (the encoder keeps its reference).
    public func scale(_ input: Frame) throws(FFmpegError) -> Frame {
        let source = input.pointer
        let signature = (source.pointee.width, source.pointee.height, source.pointee.format)
        if signature != inputSignature {
            // The node's own kernel where it computes what swscale would: limited-range 8-bit
            // 4:2:0 in and out (swscale would also convert a full-range source's levels).
            planeScalers = algorithm == .bicubic && signature.2 == AV_PIX_FMT_YUV420P.rawValue
                ? PlaneScalers(from: (Int(signature.0), Int(signature.1)), to: (width, height)) : nil
            if planeScalers == nil {
                context = sws_getCachedContext(
                    context, signature.0, signature.1, AVPixelFormat(rawValue: signature.2),
                    Int32(width), Int32(height), AV_PIX_FMT_YUV420P,
                    algorithm.swscaleFlags, nil, nil, nil)
                guard context != nil else {
                    throw FFmpegError(operation: "sws_getCachedContext",
                                      message: "cannot scale \(signature.0)x\(signature.1) \(input.pixelFormatName) to \(width)x\(height)")
                }
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
        if let planeScalers {
            planeScalers.scale(source, into: out)
        } else {
            try swscale(source, into: out)
        }
        out.pointee.pts = input.pts
        out.pointee.pict_type = AV_PICTURE_TYPE_NONE
        out.pointee.color_primaries = source.pointee.color_primaries
        out.pointee.color_trc = source.pointee.color_trc
        out.pointee.colorspace = source.pointee.colorspace
        // swscale writes limited range for YUV420P whatever the input range (the plane scaler
        // takes limited-range input only).
        out.pointee.color_range = AVCOL_RANGE_MPEG
        out.pointee.sample_aspect_ratio = AVRational(num: 1, den: 1)
        return output
    }

    private func swscale(_ source: UnsafeMutablePointer<AVFrame>, into out: UnsafeMutablePointer<AVFrame>) throws(FFmpegError) {
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
    }
}

/// One CPlaneScaler for each plane of an 8-bit 4:2:0 picture (chroma at half size, rounded up,
/// as FFmpeg lays it out).
final class PlaneScalers {
    private let planes: [OpaquePointer]

    /// nil when a size is out of the plane scaler's range; the caller then uses swscale.
    init?(from source: (width: Int, height: Int), to target: (width: Int, height: Int),
          widest: abr_plane_scaler_kernel = ABR_PLANE_SCALER_AVX512) {
        var planes: [OpaquePointer] = []
        for subsampling in [1, 2, 2] {
            guard let plane = abr_plane_scaler_create(
                Int32((source.width + subsampling - 1) / subsampling), Int32((source.height + subsampling - 1) / subsampling),
                Int32((target.width + subsampling - 1) / subsampling), Int32((target.height + subsampling - 1) / subsampling),
                widest)
            else {
                planes.forEach { abr_plane_scaler_free($0) }
                return nil
            }
            planes.append(plane)
        }
        self.planes = planes
    }

    deinit {
        planes.forEach { abr_plane_scaler_free($0) }
    }

    var kernelName: String {
        switch abr_plane_scaler_kernel_in_use(planes[0]) {
        case ABR_PLANE_SCALER_AVX512: "avx512"
        case ABR_PLANE_SCALER_AVX2: "avx2"
        default: "portable"
        }
    }

    func scale(_ source: UnsafeMutablePointer<AVFrame>, into out: UnsafeMutablePointer<AVFrame>) {
        abr_plane_scaler_run(planes[0], source.pointee.data.0, Int(source.pointee.linesize.0), out.pointee.data.0, Int(out.pointee.linesize.0))
        abr_plane_scaler_run(planes[1], source.pointee.data.1, Int(source.pointee.linesize.1), out.pointee.data.1, Int(out.pointee.linesize.1))
        abr_plane_scaler_run(planes[2], source.pointee.data.2, Int(source.pointee.linesize.2), out.pointee.data.2, Int(out.pointee.linesize.2))
    }
}

/// The filter a `Scaler` resamples with.
public enum ScalingAlgorithm: String, Sendable, CaseIterable {
    /// The ladder's scaler: Keys' bicubic (swscale's kernel and default), a good balance of speed
    /// and sharpness. The node's own SIMD plane scaler computes it for limited-range 8-bit 4:2:0
    /// pictures (about twice swscale's speed); swscale for any other layout.
    case bicubic
    /// The same kernel by swscale alone, to measure the plane scaler against.
    case swscaleBicubic = "swscale-bicubic"
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
        case .bicubic, .swscaleBicubic: SWS_BICUBIC
        case .bicublin: SWS_BICUBLIN
        case .bilinear: SWS_BILINEAR
        case .fastBilinear: SWS_FAST_BILINEAR
        case .area: SWS_AREA
        case .lanczos: SWS_LANCZOS
        }
    }
}
