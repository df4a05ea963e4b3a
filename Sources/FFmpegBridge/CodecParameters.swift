import CFFmpeg

/// A private copy of a stream's AVCodecParameters: what a muxer needs to declare a track.
public final class CodecParameters: @unchecked Sendable {
    // @unchecked: immutable after creation except through `setExtradata`, which callers use
    // before handing the parameters to another queue.
    let pointer: UnsafeMutablePointer<AVCodecParameters>

    init(copying source: UnsafePointer<AVCodecParameters>) throws(FFmpegError) {
        guard let pointer = avcodec_parameters_alloc() else {
            throw FFmpegError(operation: "avcodec_parameters_alloc", message: "out of memory")
        }
        self.pointer = pointer
        try check(avcodec_parameters_copy(pointer, source), "avcodec_parameters_copy")
    }

    init(from context: UnsafePointer<AVCodecContext>) throws(FFmpegError) {
        guard let pointer = avcodec_parameters_alloc() else {
            throw FFmpegError(operation: "avcodec_parameters_alloc", message: "out of memory")
        }
        self.pointer = pointer
        try check(avcodec_parameters_from_context(pointer, context), "avcodec_parameters_from_context")
    }

    private init() throws(FFmpegError) {
        guard let pointer = avcodec_parameters_alloc() else {
            throw FFmpegError(operation: "avcodec_parameters_alloc", message: "out of memory")
        }
        self.pointer = pointer
    }

    /// H.264 video described by its parameter sets (Annex B or avcC extradata), as a live
    /// publisher's SDP or in-band SPS/PPS give it.
    public static func h264(width: Int, height: Int, extradata: [UInt8]) throws(FFmpegError) -> CodecParameters {
        let parameters = try CodecParameters()
        parameters.pointer.pointee.codec_type = AVMEDIA_TYPE_VIDEO
        parameters.pointer.pointee.codec_id = AV_CODEC_ID_H264
        parameters.pointer.pointee.width = Int32(width)
        parameters.pointer.pointee.height = Int32(height)
        parameters.pointer.pointee.format = AV_PIX_FMT_YUV420P.rawValue
        try parameters.setExtradata(extradata)
        return parameters
    }

    /// AAC audio described by its AudioSpecificConfig.
    public static func aac(sampleRate: Int, channels: Int, audioSpecificConfig: [UInt8]) throws(FFmpegError) -> CodecParameters {
        let parameters = try CodecParameters()
        parameters.pointer.pointee.codec_type = AVMEDIA_TYPE_AUDIO
        parameters.pointer.pointee.codec_id = AV_CODEC_ID_AAC
        parameters.pointer.pointee.sample_rate = Int32(sampleRate)
        parameters.pointer.pointee.frame_size = 1024
        av_channel_layout_default(&parameters.pointer.pointee.ch_layout, Int32(channels))
        parameters.pointer.pointee.profile = Int32(max(0, Int((audioSpecificConfig.first ?? 0x10) >> 3) - 1))
        try parameters.setExtradata(audioSpecificConfig)
        return parameters
    }

    deinit {
        var p: UnsafeMutablePointer<AVCodecParameters>? = pointer
        avcodec_parameters_free(&p)
    }

    public func copy() throws(FFmpegError) -> CodecParameters {
        try CodecParameters(copying: pointer)
    }

    public var codecName: String { String(cString: avcodec_get_name(pointer.pointee.codec_id)) }
    public var isH264: Bool { pointer.pointee.codec_id == AV_CODEC_ID_H264 }
    public var isAAC: Bool { pointer.pointee.codec_id == AV_CODEC_ID_AAC }
    public var isVideo: Bool { pointer.pointee.codec_type == AVMEDIA_TYPE_VIDEO }
    public var isAudio: Bool { pointer.pointee.codec_type == AVMEDIA_TYPE_AUDIO }
    public var width: Int { Int(pointer.pointee.width) }
    public var height: Int { Int(pointer.pointee.height) }
    public var bitRate: Int { Int(pointer.pointee.bit_rate) }
    public var sampleRate: Int { Int(pointer.pointee.sample_rate) }
    public var channelCount: Int { Int(pointer.pointee.ch_layout.nb_channels) }
    /// FFmpeg's profile number; for AAC this is the audio object type minus one.
    public var profile: Int { Int(pointer.pointee.profile) }
    /// Pictures the decoder must hold back to output them in order (B-frames): libavformat's
    /// figure from the pictures it probed (`video_delay`). 0 when none were seen or it did not probe.
    public var videoDelay: Int { Int(pointer.pointee.video_delay) }

    public var extradata: [UInt8] {
        guard let data = pointer.pointee.extradata, pointer.pointee.extradata_size > 0 else { return [] }
        return Array(UnsafeBufferPointer(start: data, count: Int(pointer.pointee.extradata_size)))
    }

    /// Replaces the extradata, e.g. with parameter sets found in-band or an AudioSpecificConfig built from ADTS.
    public func setExtradata(_ bytes: [UInt8]) throws(FFmpegError) {
        av_freep(&pointer.pointee.extradata)
        pointer.pointee.extradata_size = 0
        guard !bytes.isEmpty else { return }
        let padding = 64  // AV_INPUT_BUFFER_PADDING_SIZE
        guard let raw = av_mallocz(bytes.count + padding) else {
            throw FFmpegError(operation: "av_mallocz", message: "out of memory")
        }
        let data = raw.assumingMemoryBound(to: UInt8.self)
        bytes.withUnsafeBufferPointer { data.update(from: $0.baseAddress!, count: bytes.count) }
        pointer.pointee.extradata = data
        pointer.pointee.extradata_size = Int32(bytes.count)
    }
}
