import MediaCore
import CFFmpeg

/// Writes packets into a container (libavformat): a file, or memory for fragmented MP4 where
/// the caller decides where each fragment ends and takes its bytes (HLS segments).
///
/// Confined to the variant's queue.
public final class Muxer {
    public enum Destination: Sendable {
        case file(path: String)
        /// Bytes collect in memory; `takeBytes()` hands them over.
        case memory
    }

    private var context: UnsafeMutablePointer<AVFormatContext>?
    private let sink: ByteSink?
    private let scratch: Packet
    private var streamTimeBases: [Rational] = []
    private var lastDTS: [Int64] = []
    private var headerWritten = false
    private let options: [String: String]
    private let destinationName: String

    /// - Parameters:
    ///   - format: a libavformat muxer name, e.g. `mp4`.
    ///   - options: muxer private options applied at header time, e.g. `movflags`.
    public init(format: String, destination: Destination, options: [String: String] = [:]) throws(FFmpegError) {
        self.options = options
        self.scratch = try Packet()
        var context: UnsafeMutablePointer<AVFormatContext>? = nil
        switch destination {
        case let .file(path):
            destinationName = path
            try check(avformat_alloc_output_context2(&context, nil, format, path), "cannot create \(format) muxer for \(path)")
            sink = nil
            self.context = context
            try check(avio_open(&context!.pointee.pb, path, cffmpeg_avio_flag_write()), "cannot open \(path) for writing")
        case .memory:
            destinationName = "memory"
            try check(avformat_alloc_output_context2(&context, nil, format, nil), "cannot create \(format) muxer")
            self.context = context
            let sink = ByteSink()
            self.sink = sink
            let bufferSize: Int32 = 64 * 1024
            guard let buffer = av_malloc(Int(bufferSize)) else { throw FFmpegError(operation: "av_malloc", message: "out of memory") }
            let io = avio_alloc_context(
                buffer.assumingMemoryBound(to: UInt8.self), bufferSize, 1,
                Unmanaged.passUnretained(sink).toOpaque(), nil,
                { opaque, data, size in
                    guard let opaque, let data, size > 0 else { return size }
                    Unmanaged<ByteSink>.fromOpaque(opaque).takeUnretainedValue()
                        .bytes.append(contentsOf: UnsafeBufferPointer(start: data, count: Int(size)))
                    return size
                }, nil)
            guard let io else {
                av_free(buffer)
                throw FFmpegError(operation: "avio_alloc_context", message: "out of memory")
            }
            context!.pointee.pb = io
            context!.pointee.flags |= AVFMT_FLAG_CUSTOM_IO
        }
    }

    deinit {
        guard let context else { return }
        if sink != nil {
            // Custom IO: libavformat does not own the AVIOContext or its buffer.
            if let pb = context.pointee.pb {
                av_freep(&pb.pointee.buffer)
                var owned: UnsafeMutablePointer<AVIOContext>? = pb
                avio_context_free(&owned)
            }
            context.pointee.pb = nil
        } else {
            avio_closep(&context.pointee.pb)
        }
        avformat_free_context(context)
    }

    /// Declares a track; returns its index. Call before `writeHeader()`.
    @discardableResult
    public func addStream(_ parameters: CodecParameters, timeBase: Rational) throws(FFmpegError) -> Int {
        guard let stream = avformat_new_stream(context, nil) else {
            throw FFmpegError(operation: "avformat_new_stream", message: "out of memory")
        }
        try check(avcodec_parameters_copy(stream.pointee.codecpar, parameters.pointer), "avcodec_parameters_copy")
        stream.pointee.codecpar.pointee.codec_tag = 0
        stream.pointee.time_base = timeBase.av
        streamTimeBases.append(timeBase)
        lastDTS.append(.min)
        return streamTimeBases.count - 1
    }

    public func writeHeader() throws(FFmpegError) {
        var dictionary: OpaquePointer? = nil
        defer { av_dict_free(&dictionary) }
        for (key, value) in options { av_dict_set(&dictionary, key, value, 0) }
        try check(avformat_write_header(context, &dictionary), "cannot write \(destinationName) header")
        // The muxer may choose its own time bases (MP4 picks a timescale per track).
        for index in streamTimeBases.indices {
            if let stream = context?.pointee.streams[index] { streamTimeBases[index] = Rational(stream.pointee.time_base) }
        }
        headerWritten = true
    }

    public var isHeaderWritten: Bool { headerWritten }

    /// Writes one packet to track `stream`, converting its timestamps; the packet itself is not changed.
    public func write(_ packet: Packet, stream: Int) throws(FFmpegError) {
        try check(av_packet_ref(scratch.pointer, packet.pointer), "av_packet_ref")
        defer { av_packet_unref(scratch.pointer) }
        scratch.timeBase = packet.timeBase
        scratch.rescale(to: streamTimeBases[stream])
        scratch.streamIndex = stream
        // Muxers refuse a decoding time that does not increase. Sources overlap at splices and
        // two source ticks can round to one muxer tick; neither may end the job.
        if scratch.dts == noTimestamp { scratch.dts = scratch.pts }
        if scratch.dts <= lastDTS[stream] { scratch.dts = lastDTS[stream] &+ 1 }
        if scratch.pts == noTimestamp || scratch.pts < scratch.dts { scratch.pts = scratch.dts }
        lastDTS[stream] = scratch.dts
        try check(av_write_frame(context, scratch.pointer), "cannot write packet to \(destinationName)")
    }

    /// Ends the current MP4 fragment (with `movflags=frag_custom`) and pushes its bytes out.
    public func flushFragment() throws(FFmpegError) {
        try check(av_write_frame(context, nil), "cannot flush fragment of \(destinationName)")
        avio_flush(context?.pointee.pb)
    }

    /// Bytes written to a `.memory` destination since the last call.
    public func takeBytes() -> [UInt8] {
        avio_flush(context?.pointee.pb)
        guard let sink else { return [] }
        defer { sink.bytes.removeAll(keepingCapacity: true) }
        return sink.bytes
    }

    public func finish() throws(FFmpegError) {
        guard headerWritten else { return }
        headerWritten = false
        try check(av_write_trailer(context), "cannot finish \(destinationName)")
        avio_flush(context?.pointee.pb)
    }
}

/// Where a memory muxer's AVIOContext writes; only touched on the muxer's queue.
private final class ByteSink {
    var bytes: [UInt8] = []
}
