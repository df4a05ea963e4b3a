import CFFmpeg
import MediaCore

/// The publisher's audio as Opus for browsers (RFC 7587): decoded with libavcodec, resampled to
/// 48 kHz stereo with libswresample, and encoded by libopus in 20 ms packets. One per job, so
/// every WebRTC viewer of the job shares its packets.
///
/// Confined to the job's ingest thread.
public final class OpusEncoder {
    /// One Opus packet and its presentation time in 48 kHz ticks on the input's timeline.
    public struct Output {
        public var bytes: [UInt8]
        public var ticks: Int64
    }

    public static let sampleRate = 48000
    /// 20 ms: what browsers send and expect (`ptime` unset).
    public static let frameSamples = 960
    static let channels = 2

    private var decoder: UnsafeMutablePointer<AVCodecContext>?
    private var encoder: UnsafeMutablePointer<AVCodecContext>?
    private var resampler: OpaquePointer?
    /// The time base of the packets being decoded now: each packet carries its own (a publisher
    /// that came back over another protocol has another), and decoded frames keep the packet's.
    private var inputTimeBase: Rational
    private let decoded: Frame
    private let encoderFrame: Frame
    private let packetScratch: Packet
    /// Interleaved float samples waiting for a whole Opus frame, and the 48 kHz time of the first.
    private var waiting: [Float] = []
    private var waitingStart: Int64?
    /// Input packets libavcodec could not decode (a damaged publisher frame costs only itself).
    public private(set) var decodeErrors = 0

    /// - Parameters:
    ///   - parameters: the publisher's audio (AAC, MP3, anything libavcodec decodes).
    ///   - timeBase: its packets' timestamps.
    public init(parameters: CodecParameters, timeBase: Rational, bitRate: Int = 64_000) throws(FFmpegError) {
        inputTimeBase = timeBase
        decoded = try Frame()
        encoderFrame = try Frame()
        packetScratch = try Packet()
        let codecName = parameters.codecName
        guard let decoderCodec = avcodec_find_decoder(parameters.pointer.pointee.codec_id) else {
            throw FFmpegError(operation: "avcodec_find_decoder", message: "no decoder for \(codecName) audio")
        }
        decoder = avcodec_alloc_context3(decoderCodec)
        guard let decoder else { throw FFmpegError(operation: "avcodec_alloc_context3", message: "out of memory") }
        try check(avcodec_parameters_to_context(decoder, parameters.pointer), "avcodec_parameters_to_context")
        decoder.pointee.pkt_timebase = timeBase.av
        try check(avcodec_open2(decoder, decoderCodec, nil), "cannot open the \(codecName) audio decoder")

        guard let opus = avcodec_find_encoder_by_name("libopus") else {
            throw FFmpegError(operation: "avcodec_find_encoder_by_name", message: "this FFmpeg has no libopus encoder")
        }
        encoder = avcodec_alloc_context3(opus)
        guard let encoder else { throw FFmpegError(operation: "avcodec_alloc_context3", message: "out of memory") }
        encoder.pointee.sample_rate = Int32(Self.sampleRate)
        encoder.pointee.sample_fmt = AV_SAMPLE_FMT_FLT
        av_channel_layout_default(&encoder.pointee.ch_layout, Int32(Self.channels))
        encoder.pointee.bit_rate = Int64(bitRate)
        encoder.pointee.time_base = AVRational(num: 1, den: Int32(Self.sampleRate))
        var options: OpaquePointer? = nil
        defer { av_dict_free(&options) }
        // Low delay over music-grade lookahead; in-band FEC lets a browser hide a lost packet.
        av_dict_set(&options, "application", "lowdelay", 0)
        av_dict_set(&options, "frame_duration", "20", 0)
        av_dict_set(&options, "fec", "1", 0)
        av_dict_set(&options, "packet_loss", "5", 0)
        // Constrained VBR: libopus's unconstrained VBR spent 86 kbit/s on a tone asked for 64, a
        // third more on a link whose rungs are counted to the kilobit (a 240p rung is 250 kbit/s).
        av_dict_set(&options, "vbr", "constrained", 0)
        try check(avcodec_open2(encoder, opus, &options), "cannot open libopus")
    }

    deinit {
        swr_free(&resampler)
        avcodec_free_context(&decoder)
        avcodec_free_context(&encoder)
    }

    /// Encodes what `packet` carries; returns the Opus packets now complete (none, one or a few).
    /// A packet that does not decode is counted and skipped.
    public func encode(_ packet: Packet) -> [Output] {
        inputTimeBase = packet.timeBase
        guard avcodec_send_packet(decoder, packet.pointer) >= 0 else {
            decodeErrors += 1
            return []
        }
        var outputs: [Output] = []
        while true {
            decoded.unreference()
            guard avcodec_receive_frame(decoder, decoded.pointer) >= 0 else { break }
            do {
                try append(decoded)
            } catch {
                decodeErrors += 1
                continue
            }
            outputs += encodeWaiting()
        }
        return outputs
    }

    /// Resamples one decoded frame into `waiting`. A frame that does not follow the last one
    /// (a publisher's gap, a new session) starts the waiting samples afresh at its own time.
    private func append(_ frame: Frame) throws(FFmpegError) {
        let input = frame.pointer
        let pts = input.pointee.best_effort_timestamp != cffmpeg_nopts_value() ? input.pointee.best_effort_timestamp : input.pointee.pts
        let ticks = pts == cffmpeg_nopts_value() ? nil : Optional(inputTimeBase.rescale(pts, to: Rational(1, Int32(Self.sampleRate))))
        if resampler == nil || input.pointee.sample_rate != resamplerInputRate || input.pointee.format != resamplerInputFormat
            || input.pointee.ch_layout.nb_channels != resamplerInputChannels {
            try makeResampler(for: frame)
        }
        if let ticks {
            let expected = waitingStart.map { $0 + Int64(waiting.count / Self.channels) }
            if expected == nil || abs(ticks - expected!) > Int64(Self.sampleRate / 10) {
                waiting.removeAll(keepingCapacity: true)
                waitingStart = ticks
            }
        }
        guard waitingStart != nil else { return }
        let capacity = Int(swr_get_out_samples(resampler, input.pointee.nb_samples))
        guard capacity > 0 else { return }
        var converted = [Float](repeating: 0, count: capacity * Self.channels)
        let written: Int32 = converted.withUnsafeMutableBytes { raw in
            var out: UnsafeMutablePointer<UInt8>? = raw.baseAddress?.assumingMemoryBound(to: UInt8.self)
            return input.pointee.extended_data.withMemoryRebound(to: UnsafePointer<UInt8>?.self,
                                                                 capacity: Int(max(1, input.pointee.ch_layout.nb_channels))) { inputData in
                swr_convert(resampler, &out, Int32(capacity), inputData, input.pointee.nb_samples)
            }
        }
        try check(written, "cannot resample audio to 48 kHz")
        waiting += converted.prefix(Int(written) * Self.channels)
    }

    private var resamplerInputRate: Int32 = 0
    private var resamplerInputFormat: Int32 = -1
    private var resamplerInputChannels: Int32 = 0

    private func makeResampler(for frame: Frame) throws(FFmpegError) {
        swr_free(&resampler)
        let input = frame.pointer
        var outputLayout = AVChannelLayout()
        av_channel_layout_default(&outputLayout, Int32(Self.channels))
        defer { av_channel_layout_uninit(&outputLayout) }
        var made: OpaquePointer?
        try check(swr_alloc_set_opts2(&made, &outputLayout, AV_SAMPLE_FMT_FLT, Int32(Self.sampleRate),
                                      &input.pointee.ch_layout, AVSampleFormat(rawValue: input.pointee.format), input.pointee.sample_rate, 0, nil),
                  "swr_alloc_set_opts2")
        resampler = made
        try check(swr_init(resampler), "cannot resample \(input.pointee.sample_rate) Hz audio")
        resamplerInputRate = input.pointee.sample_rate
        resamplerInputFormat = input.pointee.format
        resamplerInputChannels = input.pointee.ch_layout.nb_channels
    }

    /// Whole 20 ms frames out of `waiting`, through libopus.
    private func encodeWaiting() -> [Output] {
        var outputs: [Output] = []
        let frameValues = Self.frameSamples * Self.channels
        while waiting.count >= frameValues, let start = waitingStart {
            let frame = encoderFrame.pointer
            av_frame_unref(frame)
            frame.pointee.nb_samples = Int32(Self.frameSamples)
            frame.pointee.format = AV_SAMPLE_FMT_FLT.rawValue
            frame.pointee.sample_rate = Int32(Self.sampleRate)
            av_channel_layout_default(&frame.pointee.ch_layout, Int32(Self.channels))
            frame.pointee.pts = start
            guard av_frame_get_buffer(frame, 0) >= 0, let data = frame.pointee.data.0 else { break }
            waiting.withUnsafeBytes { source in
                data.update(from: source.baseAddress!.assumingMemoryBound(to: UInt8.self), count: frameValues * MemoryLayout<Float>.size)
            }
            waiting.removeFirst(frameValues)
            waitingStart = start + Int64(Self.frameSamples)
            guard avcodec_send_frame(encoder, frame) >= 0 else { continue }
            while avcodec_receive_packet(encoder, packetScratch.pointer) >= 0 {
                let packet = packetScratch.pointer.pointee
                if let bytes = packet.data, packet.size > 0 {
                    outputs.append(Output(bytes: Array(UnsafeBufferPointer(start: bytes, count: Int(packet.size))), ticks: packet.pts))
                }
                av_packet_unref(packetScratch.pointer)
            }
        }
        return outputs
    }
}
