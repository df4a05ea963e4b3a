import Dispatch
import FFmpegBridge
import Foundation
import LadderQuality
import MediaCore
import Synchronization

/// Encodes short windows of one source at many (size, rate) points, the way the node encodes a
/// rung (its scaler, x264 with the node's live settings, IDRs on the same grid), and measures each
/// encode as a viewer on a display of the source's size sees it: decoded, scaled back up with
/// Lanczos, compared with the source. Per-title encoding's convex hull is drawn from these points.
public final class LadderExplorer {
    public struct Options: Sendable {
        public var preset: String
        /// Windows spread evenly over the source, and the seconds of each.
        public var windows: Int
        public var windowSeconds: Double
        public var keyframeInterval: Double
        /// Measure every `n`th picture of each encode.
        public var qualitySampleInterval: Int

        public init(preset: String = "veryfast", windows: Int = 3, windowSeconds: Double = 2, keyframeInterval: Double = 2,
                    qualitySampleInterval: Int = 2) {
            self.preset = preset
            self.windows = max(1, windows)
            self.windowSeconds = windowSeconds
            self.keyframeInterval = keyframeInterval
            self.qualitySampleInterval = max(1, qualitySampleInterval)
        }
    }

    /// One encode to make: a size and a rate asked of x264.
    public struct Point: Sendable, Hashable {
        public var width: Int
        public var height: Int
        public var bitRate: Int

        public init(width: Int, height: Int, bitRate: Int) {
            self.width = width
            self.height = height
            self.bitRate = bitRate
        }
    }

    public let input: String
    public let options: Options
    public private(set) var sourceWidth = 0
    public private(set) var sourceHeight = 0
    /// The shape of the source's stored pixels. Rungs are encoded with square pixels, so a size
    /// takes the shape the source is shown in: a 1440x1080 source with 4:3 pixels is a 16:9
    /// picture, whose 720p rung is 1280x720, not 960x720.
    public private(set) var sourceSampleAspect = Rational(1, 1)
    public var isAnamorphic: Bool { sourceSampleAspect.numerator != sourceSampleAspect.denominator }
    /// The source's width as shown (its stored width stretched by the pixel shape).
    public var sourceDisplayWidth: Int {
        Int((Double(sourceWidth) * sourceSampleAspect.doubleValue).rounded())
    }
    public private(set) var frameRate = 30.0
    /// The windows' pictures, 8-bit 4:2:0 at the source's size: the encodes' input and reference.
    private var windows: [[Frame]] = []

    public init(input: String, options: Options = Options()) {
        self.input = input
        self.options = options
    }

    public var windowCount: Int { windows.count }
    public var secondsPerPoint: Double { Double(windows.reduce(0) { $0 + $1.count }) / frameRate }

    /// Decodes the source once and keeps the windows' pictures.
    public func loadWindows() throws(TranscodeError) {
        let source: MediaInput
        do {
            source = try MediaInput(url: input)
        } catch {
            throw .badInput("cannot open input \(input): \(error.message)")
        }
        guard let video = source.bestVideoStream, video.width > 0, video.height > 0 else {
            throw .badInput("input \(input) has no decodable video stream")
        }
        sourceWidth = video.width
        sourceHeight = video.height
        sourceSampleAspect = video.sampleAspectRatio
        frameRate = LadderJob.plausibleFrameRate(video.frameRate)
        let framesPerWindow = max(1, Int((options.windowSeconds * frameRate).rounded()))
        // Window starts in pictures, spread over the source (its length from the container, or
        // the first window alone when unknown).
        let totalFrames = video.frameCount > 0 ? video.frameCount : Int(source.duration * frameRate)
        let starts: [Int]
        if totalFrames <= framesPerWindow * options.windows || options.windows == 1 {
            starts = (0..<min(options.windows, max(1, totalFrames / framesPerWindow))).map { $0 * framesPerWindow }
        } else {
            let spacing = Double(totalFrames - framesPerWindow) / Double(options.windows - 1)
            starts = (0..<options.windows).map { Int((Double($0) * spacing).rounded()) }
        }
        let decoder: VideoDecoder
        let converter: Scaler
        let decoded: Frame
        do {
            decoder = try VideoDecoder(stream: video, threads: 2)
            converter = try Scaler(width: video.width, height: video.height, algorithm: .lanczos)
            decoded = try Frame()
        } catch {
            throw .badInput("input \(input): cannot decode \(video.codecName): \(error.message)")
        }
        var collected = [[Frame]](repeating: [], count: starts.count)
        var pictureIndex = 0
        let lastNeeded = (starts.last ?? 0) + framesPerWindow
        func keep(_ frame: Frame) throws(FFmpegError) {
            defer { pictureIndex += 1 }
            guard let window = starts.lastIndex(where: { $0 <= pictureIndex }), pictureIndex < starts[window] + framesPerWindow else { return }
            // Keep a 4:2:0 copy of the source's own size: other layouts go through the reference scaler.
            let picture = frame.isYUV420 && frame.width == sourceWidth && frame.height == sourceHeight
                ? try frame.reference() : try converter.scale(frame).reference()
            collected[window].append(picture)
        }
        do {
            reading: while pictureIndex < lastNeeded {
                switch try source.read() {
                case let .packet(packet):
                    guard packet.streamIndex == video.index else { continue }
                    do { try decoder.send(packet) } catch { continue }
                case .endOfInput:
                    try decoder.send(nil)
                    while case let .frame(frame) = try decoder.receive(into: decoded) { try keep(frame) }
                    break reading
                case .idle:
                    continue
                }
                while case let .frame(frame) = try decoder.receive(into: decoded) { try keep(frame) }
            }
        } catch {
            throw .badInput("input \(input): \(error.message) after \(pictureIndex) pictures")
        }
        windows = collected.filter { !$0.isEmpty }
        guard !windows.isEmpty else { throw .badInput("input \(input): no picture could be decoded") }
    }

    /// Encodes every point (in parallel, one x264 thread each) and measures it.
    /// `progress` is called from worker threads with (points done, points in all).
    public func measure(_ points: [Point], progress: (@Sendable (Int, Int) -> Void)? = nil) throws(TranscodeError) -> [RateQualityPoint] {
        let results = Mutex([Int: Result<RateQualityPoint, TranscodeError>]())
        let done = Atomic(0)
        let windows = self.windows
        let source = SourceShape(width: sourceWidth, height: sourceHeight, frameRate: frameRate)
        let options = self.options
        DispatchQueue.concurrentPerform(iterations: points.count) { index in
            let outcome: Result<RateQualityPoint, TranscodeError>
            do throws(FFmpegError) {
                outcome = .success(try Self.encode(points[index], windows: windows, source: source, options: options))
            } catch {
                outcome = .failure(.failed("encoding \(points[index].width)x\(points[index].height) at \(points[index].bitRate) bit/s: \(error.message)"))
            }
            results.withLock { $0[index] = outcome }
            let finished = done.add(1, ordering: .relaxed).newValue
            progress?(finished, points.count)
        }
        return try results.withLock { all throws(TranscodeError) in
            try points.indices.map { index throws(TranscodeError) in try all[index]!.get() }
        }
    }

    /// What the encodes need to know of the source; shared by the worker threads.
    struct SourceShape: Sendable {
        var width: Int
        var height: Int
        var frameRate: Double
    }

    private static func encode(_ point: Point, windows: [[Frame]], source: SourceShape, options: Options) throws(FFmpegError) -> RateQualityPoint {
        let frameRate = source.frameRate
        let timeBase = Rational(1, 90_000)
        let ticksPerFrame = Int64((90_000 / frameRate).rounded())
        var bytes = 0
        var frames = 0
        var accumulator = QualityAccumulator()
        let keyframeEvery = max(1, Int((options.keyframeInterval * frameRate).rounded()))
        for window in windows {
            let scaler = try Scaler(width: point.width, height: point.height)
            let upscaler = try Scaler(width: source.width, height: source.height, algorithm: .lanczos)
            let encoder = try H264Encoder(settings: H264EncoderSettings(
                width: point.width, height: point.height, bitRate: point.bitRate, timeBase: timeBase,
                frameRate: Rational(framesPerSecond: frameRate), preset: options.preset, threads: 1))
            let decoder = try VideoDecoder(parameters: try encoder.parameters(), timeBase: timeBase, threads: 1, lowDelay: true)
            let decoded = try Frame()
            func drain() throws(FFmpegError) {
                while case let .packet(packet) = try encoder.receive() {
                    bytes += packet.size
                    try decoder.send(packet)
                    while case let .frame(picture) = try decoder.receive(into: decoded) {
                        let index = Int(picture.pts / ticksPerFrame)
                        guard index % options.qualitySampleInterval == 0, window.indices.contains(index) else { continue }
                        let shown = try upscaler.scale(picture)
                        _ = shown.withYUV420Planes { planes in
                            window[index].withYUV420Planes { reference in accumulator.add(picture: planes, reference: reference) }
                        }
                    }
                }
            }
            for (index, original) in window.enumerated() {
                let picture = try scaler.scale(original)
                picture.pts = Int64(index) * ticksPerFrame
                picture.forceKeyframe = index % keyframeEvery == 0
                try encoder.send(picture)
                try drain()
            }
            try encoder.send(nil)
            try drain()
            frames += window.count
        }
        let summary = accumulator.summary
        let seconds = Double(frames) / frameRate
        return RateQualityPoint(
            width: point.width, height: point.height, targetBitRate: point.bitRate,
            bitRate: seconds > 0 ? Int((Double(bytes * 8) / seconds).rounded()) : 0,
            quality: summary?.psnrY ?? 0, psnrY: summary?.psnrY ?? 0, psnrYUV: summary?.psnrYUV ?? 0, ssimAll: summary?.ssimAll ?? 0,
            ssimDecibels: summary?.ssimAllDecibels ?? 0)
    }

    /// The usual ladder sizes by their short side ("720p"), the sides a grid tries by default.
    public static let commonShortSides = [2160, 1440, 1080, 720, 540, 432, 360, 288, 234, 180, 144]

    public struct Size: Sendable, Hashable {
        public var width: Int
        public var height: Int

        public init(width: Int, height: Int) {
            self.width = width
            self.height = height
        }
    }

    /// The width of a square-pixel picture `height` tall with the source's shown shape, even
    /// (4:2:0 needs it).
    public func width(forHeight height: Int) -> Int {
        guard sourceHeight > 0 else { return height * 16 / 9 }
        return max(2, Int((Double(height) * Double(sourceDisplayWidth) / Double(sourceHeight) / 2).rounded()) * 2)
    }

    /// The height of a square-pixel picture `width` wide with the source's shown shape, even.
    public func height(forWidth width: Int) -> Int {
        guard sourceDisplayWidth > 0 else { return width * 9 / 16 }
        return max(2, Int((Double(width) * Double(sourceHeight) / Double(sourceDisplayWidth) / 2).rounded()) * 2)
    }

    /// The sizes a grid tries by default, largest first: the usual ladder sizes up to the
    /// source's, named by the short side as ladders are (a portrait 720x1280 source gets
    /// 720x1280, 540x960, …, not 406x720), and the source's own size, whatever it is (a 640x480
    /// source is tried at 640x480: at high rates the native size is the one to beat). Shapes
    /// are the shown ones: an anamorphic source's own size is its height at its shown width.
    public func defaultSizes() -> [Size] {
        let portrait = sourceHeight > sourceDisplayWidth
        let shortSide = min(sourceDisplayWidth, sourceHeight)
        var sizes = Self.commonShortSides.filter { $0 <= shortSide }.map { side in
            portrait ? Size(width: side, height: height(forWidth: side)) : Size(width: width(forHeight: side), height: side)
        }
        let native = isAnamorphic
            ? Size(width: width(forHeight: sourceHeight), height: sourceHeight / 2 * 2)
            : Size(width: sourceWidth / 2 * 2, height: sourceHeight / 2 * 2)
        if native.width >= 2, native.height >= 2, !sizes.contains(native) { sizes.append(native) }
        return sizes.sorted { $0.width * $0.height > $1.width * $1.height }
    }

    /// The grid: each size at rates spaced evenly in log rate over the range, without the points
    /// no ladder would use (under 0.01 or over 0.4 bits per pixel: a large size starved, or a
    /// small one given more than it can spend).
    public func grid(sizes: [Size], minimumBitRate: Int, maximumBitRate: Int, ratesPerSize: Int) -> [Point] {
        let rates = RateQuality.spacedRates(count: ratesPerSize, minimum: minimumBitRate, maximum: maximumBitRate)
        return sizes.flatMap { size -> [Point] in
            let width = size.width, height = size.height
            let pixelsPerSecond = Double(width * height) * frameRate
            let usable = rates.filter { Double($0) >= 0.01 * pixelsPerSecond && Double($0) <= 0.4 * pixelsPerSecond }
            // Every size keeps at least two points, so it has a curve.
            let kept = usable.count >= 2 ? usable : Array(rates.sorted { abs(log(Double($0) / (0.1 * pixelsPerSecond))) < abs(log(Double($1) / (0.1 * pixelsPerSecond))) }.prefix(2)).sorted()
            return kept.map { Point(width: width, height: height, bitRate: $0) }
        }
    }
}
