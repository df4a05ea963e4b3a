import CFFmpeg
import MediaCore

/// A publisher's audio encoded again: decoded with libavcodec, resampled with libswresample and
/// encoded in whole frames of the target's. Two targets:
/// - `opus`: 48 kHz stereo Opus in 20 ms packets for browsers (RFC 7587), one per job, so every
///   WebRTC viewer of the job shares its packets;
/// - `aac`: AAC-LC in a job's own rate and channels, for a publisher who came back with another
///   (a phone at 44.1 kHz mono after a desktop at 48 kHz stereo): the job's outputs were opened
///   with the first publisher's format, and their players keep it.
///
/// Confined to the job's ingest thread.
public final class AudioReencoder {
    /// One encoded packet and its presentation time in ticks of the target's rate, on the
    /// input's timeline.
    public struct Output {
        public var bytes: [UInt8]
        public var ticks: Int64
    }

    /// What to encode to.
    public struct Target: Sendable, Equatable {
        /// libavcodec's encoder name.
        public var encoder: String
        public var sampleRate: Int
        public var channels: Int
        public var bitRate: Int
        /// The encoder takes planar samples (libavcodec's AAC) rather than interleaved (libopus).
        var planar: Bool
        var options: [String: String]

        /// What browsers send and expect (`ptime` unset): 48 kHz stereo in 20 ms packets.
        public static func opus(bitRate: Int = 64_000) -> Target {
            // Low delay over music-grade lookahead; in-band FEC lets a browser hide a lost packet.
            // Constrained VBR: libopus's unconstrained VBR spent 86 kbit/s on a tone asked for 64,
            // a third more on a link whose rungs are counted to the kilobit (a 240p rung is 250 kbit/s).
            Target(encoder: "libopus", sampleRate: opusSampleRate, channels: 2, bitRate: bitRate, planar: false,
                   options: ["application": "lowdelay", "frame_duration": "20", "fec": "1", "packet_loss": "5", "vbr": "constrained"])
        }

        /// AAC-LC (libavcodec's own encoder) at `sampleRate` with `channels`.
        public static func aac(sampleRate: Int, channels: Int, bitRate: Int) -> Target {
            Target(encoder: "aac", sampleRate: sampleRate, channels: channels, bitRate: bitRate, planar: true, options: [:])
        }
    }

    public static let opusSampleRate = 48000

    public let target: Target
    private var decoder: UnsafeMutablePointer<AVCodecContext>?
    private var encoder: UnsafeMutablePointer<AVCodecContext>?
    private var resampler: OpaquePointer?
    /// Samples per channel in each frame the encoder takes (960 for 20 ms of Opus, 1024 for AAC).
    public let frameSamples: Int
    /// The time base of the packets being decoded now: each packet carries its own (a publisher
    /// that came back over another protocol has another), and decoded frames keep the packet's.
    private var inputTimeBase: Rational
    private let decoded: Frame
    private let encoderFrame: Frame
    private let packetScratch: Packet
    /// Interleaved float samples waiting for a whole frame, and the target-rate time of the first.
    private var waiting: [Float] = []
    private var waitingStart: Int64?
    /// Input packets libavcodec could not decode (a damaged publisher frame costs only itself).
    public private(set) var decodeErrors = 0

    /// - Parameters:
    ///   - parameters: the publisher's audio (AAC, MP3, anything libavcodec decodes).
    ///   - timeBase: its packets' timestamps.
    public init(parameters: CodecParameters, timeBase: Rational, target: Target) throws(FFmpegError) {
        self.target = target
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

        guard let codec = avcodec_find_encoder_by_name(target.encoder) else {
            throw FFmpegError(operation: "avcodec_find_encoder_by_name", message: "this FFmpeg has no \(target.encoder) encoder")
        }
        encoder = avcodec_alloc_context3(codec)
        guard let encoder else { throw FFmpegError(operation: "avcodec_alloc_context3", message: "out of memory") }
        encoder.pointee.sample_rate = Int32(target.sampleRate)
        encoder.pointee.sample_fmt = target.planar ? AV_SAMPLE_FMT_FLTP : AV_SAMPLE_FMT_FLT
        av_channel_layout_default(&encoder.pointee.ch_layout, Int32(target.channels))
        encoder.pointee.bit_rate = Int64(target.bitRate)
        encoder.pointee.time_base = AVRational(num: 1, den: Int32(target.sampleRate))
        var options: OpaquePointer? = nil
        defer { av_dict_free(&options) }
        for (key, value) in target.options { av_dict_set(&options, key, value, 0) }
        try check(avcodec_open2(encoder, codec, &options), "cannot open \(target.encoder) at \(target.sampleRate) Hz, \(target.channels) channels")
        frameSamples = Int(encoder.pointee.frame_size > 0 ? encoder.pointee.frame_size : 1024)
    }

    deinit {
        swr_free(&resampler)
        avcodec_free_context(&decoder)
        avcodec_free_context(&encoder)
    }

    /// Encodes what `packet` carries; returns the packets now complete (none, one or a few).
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
        let ticks = pts == cffmpeg_nopts_value() ? nil : Optional(inputTimeBase.rescale(pts, to: Rational(1, Int32(target.sampleRate))))
        if resampler == nil || input.pointee.sample_rate != resamplerInputRate || input.pointee.format != resamplerInputFormat
            || input.pointee.ch_layout.nb_channels != resamplerInputChannels {
            try makeResampler(for: frame)
        }
        if let ticks {
            let expected = waitingStart.map { $0 + Int64(waiting.count / target.channels) }
            if expected == nil || abs(ticks - expected!) > Int64(target.sampleRate / 10) {
                waiting.removeAll(keepingCapacity: true)
                waitingStart = ticks
            }
        }
        guard waitingStart != nil else { return }
        let capacity = Int(swr_get_out_samples(resampler, input.pointee.nb_samples))
        guard capacity > 0 else { return }
        var converted = [Float](repeating: 0, count: capacity * target.channels)
        let written: Int32 = converted.withUnsafeMutableBytes { raw in
            var out: UnsafeMutablePointer<UInt8>? = raw.baseAddress?.assumingMemoryBound(to: UInt8.self)
            return input.pointee.extended_data.withMemoryRebound(to: UnsafePointer<UInt8>?.self,
                                                                 capacity: Int(max(1, input.pointee.ch_layout.nb_channels))) { inputData in
                swr_convert(resampler, &out, Int32(capacity), inputData, input.pointee.nb_samples)
            }
        }
        try check(written, "cannot resample audio to \(target.sampleRate) Hz")
        waiting += converted.prefix(Int(written) * target.channels)
    }

    private var resamplerInputRate: Int32 = 0
    private var resamplerInputFormat: Int32 = -1
    private var resamplerInputChannels: Int32 = 0

    private func makeResampler(for frame: Frame) throws(FFmpegError) {
        swr_free(&resampler)
        let input = frame.pointer
        var outputLayout = AVChannelLayout()
        av_channel_layout_default(&outputLayout, Int32(target.channels))
        defer { av_channel_layout_uninit(&outputLayout) }
        var made: OpaquePointer?
        try check(swr_alloc_set_opts2(&made, &outputLayout, AV_SAMPLE_FMT_FLT, Int32(target.sampleRate),
                                      &input.pointee.ch_layout, AVSampleFormat(rawValue: input.pointee.format), input.pointee.sample_rate, 0, nil),
                  "swr_alloc_set_opts2")
        resampler = made
        try check(swr_init(resampler), "cannot resample \(input.pointee.sample_rate) Hz audio")
        resamplerInputRate = input.pointee.sample_rate
        resamplerInputFormat = input.pointee.format
        resamplerInputChannels = input.pointee.ch_layout.nb_channels
    }

    /// Whole frames out of `waiting`, through the encoder (de-interleaved for a planar one).
    private func encodeWaiting() -> [Output] {
        var outputs: [Output] = []
        let channels = target.channels
        let frameValues = frameSamples * channels
        while waiting.count >= frameValues, let start = waitingStart {
            let frame = encoderFrame.pointer
            av_frame_unref(frame)
            frame.pointee.nb_samples = Int32(frameSamples)
            frame.pointee.format = (target.planar ? AV_SAMPLE_FMT_FLTP : AV_SAMPLE_FMT_FLT).rawValue
            frame.pointee.sample_rate = Int32(target.sampleRate)
            av_channel_layout_default(&frame.pointee.ch_layout, Int32(channels))
            frame.pointee.pts = start
            guard av_frame_get_buffer(frame, 0) >= 0 else { break }
            let filled: Bool = waiting.withUnsafeBufferPointer { source in
                guard target.planar else {
                    guard let data = frame.pointee.data.0 else { return false }
                    data.withMemoryRebound(to: Float.self, capacity: frameValues) { $0.update(from: source.baseAddress!, count: frameValues) }
                    return true
                }
                return frame.pointee.extended_data.withMemoryRebound(to: UnsafeMutablePointer<Float>?.self, capacity: channels) { planes in
                    for channel in 0..<channels {
                        guard let plane = planes[channel] else { return false }
                        for index in 0..<frameSamples { plane[index] = source[index * channels + channel] }
                    }
                    return true
                }
            }
            guard filled else { break }
            waiting.removeFirst(frameValues)
            waitingStart = start + Int64(frameSamples)
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
