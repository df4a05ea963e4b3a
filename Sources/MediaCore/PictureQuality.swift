import Foundation

/// One 8-bit picture plane, borrowed: `stride` bytes from one row to the next.
public struct PlaneView {
    public var base: UnsafePointer<UInt8>
    public var stride: Int
    public var width: Int
    public var height: Int

    public init(base: UnsafePointer<UInt8>, stride: Int, width: Int, height: Int) {
        self.base = base
        self.stride = stride
        self.width = width
        self.height = height
    }
}

/// PSNR and SSIM of 8-bit planes, with FFmpeg's `psnr` and `ssim` filters' definitions, so a
/// figure here can be checked against `ffmpeg -lavfi psnr/ssim` on the same pictures:
/// - PSNR from the sum of squared differences, peak 255;
/// - SSIM on 8×8 windows stepped by 4 pixels (x264's and FFmpeg's layout: 4×4 block sums, each
///   window the sum of four neighbouring blocks), with C1 = (0.01·255)², C2 = (0.03·255)².
///
/// The loops are written against raw pointers: they run on every measured picture of every rung,
/// and the measurement has to stay a small share of the encode it measures.
public enum PictureQuality {
    /// Sum of squared differences over the plane (the two planes must be the same size).
    public static func squaredError(_ a: PlaneView, _ b: PlaneView) -> UInt64 {
        precondition(a.width == b.width && a.height == b.height, "planes of different sizes")
        var total: UInt64 = 0
        for y in 0..<a.height {
            let rowA = a.base + y * a.stride
            let rowB = b.base + y * b.stride
            var row: UInt32 = 0
            // A row of up to 65,793 pixels cannot overflow 32 bits (255² × 65,793 < 2³²).
            for x in 0..<a.width {
                let difference = Int32(rowA[x]) &- Int32(rowB[x])
                row &+= UInt32(bitPattern: difference &* difference)
            }
            total &+= UInt64(row)
        }
        return total
    }

    /// PSNR in dB of a mean squared error for 8-bit samples; a perfect match is capped at 100 dB,
    /// since infinity cannot be averaged or written as JSON.
    public static func psnr(meanSquaredError: Double) -> Double {
        guard meanSquaredError > 0 else { return maximumPSNR }
        return min(maximumPSNR, 10 * log10(255.0 * 255.0 / meanSquaredError))
    }

    public static let maximumPSNR = 100.0

    /// The mean SSIM of the plane's 8×8 windows (stepped by 4), 1 for identical planes.
    /// Planes smaller than 8×8 have no window and count as identical.
    public static func ssim(_ a: PlaneView, _ b: PlaneView) -> Double {
        precondition(a.width == b.width && a.height == b.height, "planes of different sizes")
        let blocksWide = a.width / 4
        let blocksHigh = a.height / 4
        guard blocksWide >= 2, blocksHigh >= 2 else { return 1 }
        // Two rows of 4×4 block sums (s1, s2, ss, s12), the previous and the current.
        var previous = [BlockSums](repeating: BlockSums(), count: blocksWide)
        var current = [BlockSums](repeating: BlockSums(), count: blocksWide)
        var total = 0.0
        blockRow(a, b, blockRow: 0, into: &previous)
        for row in 1..<blocksHigh {
            blockRow(a, b, blockRow: row, into: &current)
            previous.withUnsafeBufferPointer { upper in
                current.withUnsafeBufferPointer { lower in
                    for x in 0..<(blocksWide - 1) {
                        let s1 = upper[x].s1 + upper[x + 1].s1 + lower[x].s1 + lower[x + 1].s1
                        let s2 = upper[x].s2 + upper[x + 1].s2 + lower[x].s2 + lower[x + 1].s2
                        let ss = upper[x].ss + upper[x + 1].ss + lower[x].ss + lower[x + 1].ss
                        let s12 = upper[x].s12 + upper[x + 1].s12 + lower[x].s12 + lower[x + 1].s12
                        total += windowSSIM(s1: s1, s2: s2, ss: ss, s12: s12)
                    }
                }
            }
            swap(&previous, &current)
        }
        return total / Double((blocksWide - 1) * (blocksHigh - 1))
    }

    struct BlockSums {
        var s1: Int = 0
        var s2: Int = 0
        var ss: Int = 0
        var s12: Int = 0
    }

    /// The 4×4 block sums of one row of blocks. Columns are summed first over the block's four
    /// pixel rows (a loop over contiguous pixels the compiler vectorises), then in fours.
    private static func blockRow(_ a: PlaneView, _ b: PlaneView, blockRow: Int, into sums: inout [BlockSums]) {
        let columns = sums.count * 4
        withUnsafeTemporaryAllocation(of: Int32.self, capacity: columns * 4) { scratch in
            let c1 = scratch.baseAddress!, c2 = c1 + columns, css = c2 + columns, c12 = css + columns
            c1.initialize(repeating: 0, count: columns * 4)
            for dy in 0..<4 {
                let rowA = a.base + (blockRow * 4 + dy) * a.stride
                let rowB = b.base + (blockRow * 4 + dy) * b.stride
                for x in 0..<columns {
                    let pa = Int32(rowA[x])
                    let pb = Int32(rowB[x])
                    c1[x] &+= pa
                    c2[x] &+= pb
                    css[x] &+= pa &* pa &+ pb &* pb
                    c12[x] &+= pa &* pb
                }
            }
            sums.withUnsafeMutableBufferPointer { out in
                for block in 0..<out.count {
                    let x = block * 4
                    out[block] = BlockSums(
                        s1: Int(c1[x] &+ c1[x + 1] &+ c1[x + 2] &+ c1[x + 3]),
                        s2: Int(c2[x] &+ c2[x + 1] &+ c2[x + 2] &+ c2[x + 3]),
                        ss: Int(css[x] &+ css[x + 1] &+ css[x + 2] &+ css[x + 3]),
                        s12: Int(c12[x] &+ c12[x + 1] &+ c12[x + 2] &+ c12[x + 3]))
                }
            }
        }
    }

    private static let c1 = 0.01 * 0.01 * 255 * 255 * 64
    private static let c2 = 0.03 * 0.03 * 255 * 255 * 64 * 63

    /// SSIM of one 8×8 window from its sums (FFmpeg's `ssim_end1`).
    private static func windowSSIM(s1: Int, s2: Int, ss: Int, s12: Int) -> Double {
        let fs1 = Double(s1), fs2 = Double(s2), fss = Double(ss), fs12 = Double(s12)
        let variances = fss * 64 - fs1 * fs1 - fs2 * fs2
        let covariance = fs12 * 64 - fs1 * fs2
        return (2 * fs1 * fs2 + c1) * (2 * covariance + c2) / ((fs1 * fs1 + fs2 * fs2 + c1) * (variances + c2))
    }

    /// SSIM as decibels, `-10·log10(1 − SSIM)`: the scale on which SSIM differences between
    /// encodes are comparable; capped like PSNR for identical pictures.
    public static func decibels(ssim: Double) -> Double {
        guard ssim < 1 else { return maximumPSNR }
        return min(maximumPSNR, -10 * log10(1 - ssim))
    }
}

/// Quality of a rung over a run: per-picture PSNR and SSIM of the three planes of 4:2:0 pictures,
/// summed the way FFmpeg's filters summarise a run.
/// - PSNR per plane from the mean of the pictures' mean squared errors; the YUV figure weighs the
///   planes by their pixel counts (FFmpeg's `average`, 4:1:1 for 4:2:0).
/// - SSIM per picture weighs the planes the same way (FFmpeg's `All`); the run's SSIM is the mean
///   over pictures.
public struct QualityAccumulator: Sendable, Equatable {
    public private(set) var pictures = 0
    private var meanSquaredErrorSums = [0.0, 0.0, 0.0]
    private var weightedMeanSquaredErrorSum = 0.0
    private var ssimYSum = 0.0
    private var ssimAllSum = 0.0
    public private(set) var worstPSNR = PictureQuality.maximumPSNR

    public init() {}

    /// One picture's own figures, as `add` measured them.
    public struct PictureFigures: Sendable, Equatable {
        public var psnrY: Double
        /// Pixel-weighted over the three planes (FFmpeg's `average`).
        public var psnrYUV: Double
        public var ssimY: Double
        public var ssimAll: Double
    }

    /// Adds one picture's planes (Y, U, V), each measured against the same plane of the reference;
    /// returns that picture's own figures (for a timeline).
    @discardableResult
    public mutating func add(picture: [PlaneView], reference: [PlaneView]) -> PictureFigures {
        precondition(picture.count == 3 && reference.count == 3, "three planes each")
        let pixels = picture.map { Double($0.width * $0.height) }
        let totalPixels = pixels.reduce(0, +)
        var weightedMSE = 0.0
        var ssimAll = 0.0
        var lumaMSE = 0.0, ssimY = 0.0
        for plane in 0..<3 {
            let mse = Double(PictureQuality.squaredError(picture[plane], reference[plane])) / max(1, pixels[plane])
            meanSquaredErrorSums[plane] += mse
            weightedMSE += mse * pixels[plane] / totalPixels
            let ssim = PictureQuality.ssim(picture[plane], reference[plane])
            if plane == 0 {
                ssimYSum += ssim
                lumaMSE = mse
                ssimY = ssim
            }
            ssimAll += ssim * pixels[plane] / totalPixels
        }
        weightedMeanSquaredErrorSum += weightedMSE
        ssimAllSum += ssimAll
        let psnrYUV = PictureQuality.psnr(meanSquaredError: weightedMSE)
        worstPSNR = min(worstPSNR, psnrYUV)
        pictures += 1
        return PictureFigures(psnrY: PictureQuality.psnr(meanSquaredError: lumaMSE), psnrYUV: psnrYUV, ssimY: ssimY, ssimAll: ssimAll)
    }

    public var summary: QualitySummary? {
        guard pictures > 0 else { return nil }
        let count = Double(pictures)
        func rounded(_ value: Double) -> Double { (value * 1000).rounded() / 1000 }
        func roundedSSIM(_ value: Double) -> Double { (value * 1_000_000).rounded() / 1_000_000 }
        return QualitySummary(
            pictures: pictures,
            psnrY: rounded(PictureQuality.psnr(meanSquaredError: meanSquaredErrorSums[0] / count)),
            psnrU: rounded(PictureQuality.psnr(meanSquaredError: meanSquaredErrorSums[1] / count)),
            psnrV: rounded(PictureQuality.psnr(meanSquaredError: meanSquaredErrorSums[2] / count)),
            psnrYUV: rounded(PictureQuality.psnr(meanSquaredError: weightedMeanSquaredErrorSum / count)),
            psnrWorst: rounded(worstPSNR),
            ssimY: roundedSSIM(ssimYSum / count),
            ssimAll: roundedSSIM(ssimAllSum / count),
            ssimAllDecibels: rounded(PictureQuality.decibels(ssim: ssimAllSum / count)))
    }
}

/// A rung's (or an encode's) measured quality, as `report.json` and the ladder tool write it.
public struct QualitySummary: Sendable, Codable, Equatable {
    /// Pictures measured (every `n`th picture when sampling).
    public var pictures: Int
    public var psnrY: Double
    public var psnrU: Double
    public var psnrV: Double
    /// The three planes' mean squared errors weighed by pixel count (FFmpeg's psnr `average`).
    public var psnrYUV: Double
    /// The worst single picture's YUV PSNR.
    public var psnrWorst: Double
    public var ssimY: Double
    /// The planes' SSIM weighed by pixel count (FFmpeg's ssim `All`).
    public var ssimAll: Double
    public var ssimAllDecibels: Double

    public init(pictures: Int, psnrY: Double, psnrU: Double, psnrV: Double, psnrYUV: Double, psnrWorst: Double,
                ssimY: Double, ssimAll: Double, ssimAllDecibels: Double) {
        self.pictures = pictures
        self.psnrY = psnrY
        self.psnrU = psnrU
        self.psnrV = psnrV
        self.psnrYUV = psnrYUV
        self.psnrWorst = psnrWorst
        self.ssimY = ssimY
        self.ssimAll = ssimAll
        self.ssimAllDecibels = ssimAllDecibels
    }
}
