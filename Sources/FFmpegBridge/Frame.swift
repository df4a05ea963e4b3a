import CFFmpeg
import MediaCore

/// A decoded picture (owns an AVFrame). `reference()` gives another owner of the same
/// refcounted buffers, which is how one decoded frame feeds every variant without a copy.
///
/// Not thread-safe; a frame handed to another queue must no longer be used by the sender.
public final class Frame: @unchecked Sendable {
    // @unchecked: ownership moves with the frame between queues; the pixel buffers it shares
    // with other references are read-only to all of them (scalers write into their own frames).
    let pointer: UnsafeMutablePointer<AVFrame>

    public init() throws(FFmpegError) {
        guard let pointer = av_frame_alloc() else { throw FFmpegError(operation: "av_frame_alloc", message: "out of memory") }
        self.pointer = pointer
    }

    deinit {
        var p: UnsafeMutablePointer<AVFrame>? = pointer
        av_frame_free(&p)
    }

    public func reference() throws(FFmpegError) -> Frame {
        let copy = try Frame()
        try check(av_frame_ref(copy.pointer, pointer), "av_frame_ref")
        return copy
    }

    /// Drops the buffers so the frame can be reused.
    public func unreference() {
        av_frame_unref(pointer)
    }

    public var width: Int { Int(pointer.pointee.width) }
    public var height: Int { Int(pointer.pointee.height) }
    public var pixelFormat: Int32 { pointer.pointee.format }
    public var pixelFormatName: String {
        av_get_pix_fmt_name(AVPixelFormat(rawValue: pointer.pointee.format)).map { String(cString: $0) } ?? "unknown"
    }

    /// Presentation time in the decoder's packet time base (the best effort guess when the stream lacks one).
    public var pts: Int64 {
        get {
            let pts = pointer.pointee.pts
            return pts != noTimestamp ? pts : pointer.pointee.best_effort_timestamp
        }
        set { pointer.pointee.pts = newValue }
    }

    /// Whether the picture is 8-bit YUV 4:2:0 (full or limited range), the layout the quality
    /// measurement reads.
    public var isYUV420: Bool {
        pointer.pointee.format == AV_PIX_FMT_YUV420P.rawValue || pointer.pointee.format == AV_PIX_FMT_YUVJ420P.rawValue
    }

    /// The Y, U and V planes of an 8-bit 4:2:0 picture, borrowed for `body`; nil for any other layout.
    public func withYUV420Planes<R>(_ body: ([PlaneView]) throws -> R) rethrows -> R? {
        guard isYUV420, let y = pointer.pointee.data.0, let u = pointer.pointee.data.1, let v = pointer.pointee.data.2 else { return nil }
        let chromaWidth = (width + 1) / 2, chromaHeight = (height + 1) / 2
        return try body([
            PlaneView(base: UnsafePointer(y), stride: Int(pointer.pointee.linesize.0), width: width, height: height),
            PlaneView(base: UnsafePointer(u), stride: Int(pointer.pointee.linesize.1), width: chromaWidth, height: chromaHeight),
            PlaneView(base: UnsafePointer(v), stride: Int(pointer.pointee.linesize.2), width: chromaWidth, height: chromaHeight),
        ])
    }

    public var isKeyframe: Bool { pointer.pointee.key_frame != 0 }
    public var isCorrupt: Bool { pointer.pointee.flags & cffmpeg_frame_flag_corrupt() != 0 }

    /// Asks the encoder to make this frame an IDR (with `forced-idr`) or leaves the choice to it.
    public var forceKeyframe: Bool {
        get { pointer.pointee.pict_type == AV_PICTURE_TYPE_I }
        set { pointer.pointee.pict_type = newValue ? AV_PICTURE_TYPE_I : AV_PICTURE_TYPE_NONE }
    }
}
