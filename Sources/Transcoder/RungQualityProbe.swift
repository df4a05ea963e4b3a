import FFmpegBridge
import Foundation
import MediaCore

/// Measures one encoded rung against its source as a viewer of that rung sees it: the rung's
/// own bitstream is decoded again and compared, picture by picture, with the source picture
/// scaled to the rung's size by a reference scaler (Lanczos), not by the ladder's own scaler, so
/// the figure covers scaling and encoding together.
///
/// Every picture is decoded (H.264's references need it), but only every `sampleInterval`th one
/// is scaled and measured: the decode is cheap, the reference scale and SSIM are not.
///
/// Confined to the variant's queue, like the encoder it watches.
final class RungQualityProbe {
    let sampleInterval: Int
    private let referenceScaler: Scaler
    private let timeBase: Rational
    private var decoder: VideoDecoder?
    private let decoded: Frame
    /// Reference pictures by the presentation time the encoder was given, until the decoder
    /// hands back the picture with that time.
    private var references: [Int64: Frame] = [:]
    private var picturesSeen = 0
    private(set) var accumulator = QualityAccumulator()
    /// CPU time the probe spent on its thread: what the measurement costs.
    private(set) var cpuSeconds = 0.0

    /// References the probe keeps before giving up on the oldest. x264 here runs without
    /// lookahead or B-frames (zerolatency), so a picture comes back at once; this bounds memory
    /// if an encoder ever held pictures back.
    static let maximumPendingReferences = 64

    init(width: Int, height: Int, timeBase: Rational, sampleInterval: Int) throws(FFmpegError) {
        self.sampleInterval = max(1, sampleInterval)
        self.referenceScaler = try Scaler(width: width, height: height, algorithm: .lanczos)
        self.timeBase = timeBase
        self.decoded = try Frame()
    }

    /// The source picture the encoder is about to get with presentation time `pts`.
    func sourcePicture(_ source: Frame, pts: Int64) throws(FFmpegError) {
        defer { picturesSeen += 1 }
        guard picturesSeen % sampleInterval == 0 else { return }
        let started = CPUClock.thread()
        defer { cpuSeconds += CPUClock.thread() - started }
        let reference = try referenceScaler.scale(source).reference()
        if references.count >= Self.maximumPendingReferences, let oldest = references.keys.min() {
            references[oldest] = nil
        }
        references[pts] = reference
    }

    /// One packet the encoder produced; `parameters` describe the encoder's output (SPS/PPS).
    func encodedPacket(_ packet: Packet, parameters: () throws(FFmpegError) -> CodecParameters) throws(FFmpegError) {
        let started = CPUClock.thread()
        defer { cpuSeconds += CPUClock.thread() - started }
        let decoder: VideoDecoder
        if let existing = self.decoder {
            decoder = existing
        } else {
            decoder = try VideoDecoder(parameters: try parameters(), timeBase: timeBase, threads: 1, lowDelay: true)
            self.decoder = decoder
        }
        try decoder.send(packet)
        try measureDecoded(decoder)
    }

    /// Drains the decoder at the end of the rung.
    func finish() throws(FFmpegError) {
        guard let decoder else { return }
        let started = CPUClock.thread()
        defer { cpuSeconds += CPUClock.thread() - started }
        try decoder.send(nil)
        try measureDecoded(decoder)
        references.removeAll()
    }

    private func measureDecoded(_ decoder: VideoDecoder) throws(FFmpegError) {
        while case let .frame(picture) = try decoder.receive(into: decoded) {
            guard let reference = references.removeValue(forKey: picture.pts) else { continue }
            _ = picture.withYUV420Planes { planes in
                reference.withYUV420Planes { referencePlanes in
                    accumulator.add(picture: planes, reference: referencePlanes)
                }
            }
        }
    }
}

/// CPU time in seconds, of the calling thread (what one rung's queue work costs, apart from every
/// other thread of the process) or of the whole process.
public enum CPUClock {
    public static func thread() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    /// CPU time of the whole process so far (every thread, user and system).
    public static func process() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }
}
