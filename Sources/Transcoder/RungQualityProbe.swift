import FFmpegBridge
import Foundation
import LadderQuality
import MediaCore

/// Measures one encoded rung against its source as a viewer of that rung sees it: the rung's
/// own bitstream is decoded again and compared, picture by picture, with the source picture
/// scaled to the rung's size by a reference scaler (Lanczos), not by the ladder's own scaler, so
/// the figure covers scaling and encoding together.
///
/// One picture in `sampleInterval` is measured. H.264 cannot decode a picture without the ones
/// it refers to, so the second decode, the largest part of the cost, can only be skipped a whole
/// GOP at a time: from one in four on, every other GOP (from its IDR) is decoded, and one picture
/// in `sampleInterval / 2` of it measured. The count of measured pictures stays about one in
/// `sampleInterval`; the decoding is halved.
///
/// Confined to the variant's queue, like the encoder it watches.
final class RungQualityProbe {
    let sampleInterval: Int
    /// Decode one GOP in this many.
    private let gopStride: Int
    /// Within a decoded GOP, measure one picture in this many.
    private let pictureInterval: Int
    private var gopsSeen = 0
    private var picturesInGOP = 0
    private var measuringGOP = false
    /// IDRs that begin a GOP to decode, by presentation time; the encoder's packet with that time
    /// turns decoding on, any other IDR turns it off.
    private var measuredGOPStarts: Set<Int64> = []
    private var decodingGOP = false
    private let referenceScaler: Scaler
    private let timeBase: Rational
    private var decoder: VideoDecoder?
    private let decoded: Frame
    /// Reference pictures by the presentation time the encoder was given, until the decoder
    /// hands back the picture with that time.
    private var references: [Int64: Frame] = [:]
    private(set) var accumulator = QualityAccumulator()
    /// Every measured picture's figures in time (up to `QualityTimeline.maximumSamples`).
    private(set) var samples: [QualityTimeline.Sample] = []
    /// CPU time the probe spent on its thread: what the measurement costs.
    private(set) var cpuSeconds = 0.0

    /// References the probe keeps before giving up on the oldest. x264 here runs without
    /// lookahead or B-frames (zerolatency), so a picture comes back at once; this bounds memory
    /// if an encoder ever held pictures back.
    static let maximumPendingReferences = 64

    init(width: Int, height: Int, timeBase: Rational, sampleInterval: Int) throws(FFmpegError) {
        self.sampleInterval = max(1, sampleInterval)
        gopStride = self.sampleInterval >= 4 ? 2 : 1
        pictureInterval = max(1, self.sampleInterval / gopStride)
        self.referenceScaler = try Scaler(width: width, height: height, algorithm: .lanczos)
        self.timeBase = timeBase
        self.decoded = try Frame()
    }

    /// The source picture the encoder is about to get with presentation time `pts`; `isKeyframe`
    /// when the job forces an IDR there (every GOP starts with one).
    func sourcePicture(_ source: Frame, pts: Int64, isKeyframe: Bool) throws(FFmpegError) {
        if isKeyframe {
            measuringGOP = gopsSeen % gopStride == 0
            gopsSeen += 1
            picturesInGOP = 0
            if measuringGOP { measuredGOPStarts.insert(pts) }
        }
        defer { picturesInGOP += 1 }
        guard measuringGOP, picturesInGOP % pictureInterval == 0 else { return }
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
        if packet.isKeyframe { decodingGOP = measuredGOPStarts.remove(packet.pts) != nil }
        guard decodingGOP else { return }
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
            let figures = picture.withYUV420Planes { planes in
                reference.withYUV420Planes { referencePlanes in
                    accumulator.add(picture: planes, reference: referencePlanes)
                }
            } ?? nil
            if let figures, samples.count < QualityTimeline.maximumSamples {
                samples.append(QualityTimeline.Sample(seconds: Double(picture.pts) * timeBase.doubleValue, psnrY: figures.psnrY,
                                                      psnrYUV: figures.psnrYUV, ssimY: figures.ssimY, ssimAll: figures.ssimAll))
            }
        }
    }
}
