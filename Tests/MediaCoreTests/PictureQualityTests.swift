import Foundation
import MediaCore
import Testing

/// The metric kernels against their definitions. `TranscoderTests` checks them against FFmpeg's
/// own `psnr` and `ssim` filters on real encodes.
@Suite struct PictureQualityTests {
    /// A plane with a stride wider than its width, so row addressing is exercised.
    struct OwnedPlane {
        var bytes: [UInt8]
        let width: Int
        let height: Int
        let stride: Int

        init(width: Int, height: Int, padding: Int = 7, pixel: (Int, Int) -> UInt8) {
            self.width = width
            self.height = height
            self.stride = width + padding
            bytes = [UInt8](repeating: 0xEE, count: stride * height)
            for y in 0..<height {
                for x in 0..<width { bytes[y * stride + x] = pixel(x, y) }
            }
        }

        func withView<R>(_ body: (PlaneView) -> R) -> R {
            bytes.withUnsafeBufferPointer { body(PlaneView(base: $0.baseAddress!, stride: stride, width: width, height: height)) }
        }

        subscript(x: Int, y: Int) -> Int { Int(bytes[y * stride + x]) }
    }

    static func texture(_ x: Int, _ y: Int) -> UInt8 { UInt8((x * 7 + y * 13 + (x * y) % 31) % 256) }

    @Test func squaredErrorAndPSNROfAKnownDifference() {
        let a = OwnedPlane(width: 33, height: 17) { Self.texture($0, $1) }
        let b = OwnedPlane(width: 33, height: 17, padding: 3) { x, y in UInt8(clamping: Int(Self.texture(x, y)) + ((x + y) % 2 == 0 ? 2 : -2)) }
        var expected: UInt64 = 0
        for y in 0..<17 {
            for x in 0..<33 { expected += UInt64((a[x, y] - b[x, y]) * (a[x, y] - b[x, y])) }
        }
        let error = a.withView { va in b.withView { vb in PictureQuality.squaredError(va, vb) } }
        #expect(error == expected)
        // Every difference is ±2 except where clamping at 0 or 255 shortened it.
        #expect(error <= 4 * 33 * 17 && error > 3 * 33 * 17)
        #expect(abs(PictureQuality.psnr(meanSquaredError: 4) - 42.1102) < 0.0001)
        #expect(PictureQuality.psnr(meanSquaredError: 0) == PictureQuality.maximumPSNR)
    }

    /// SSIM by its definition, window by window, with nothing shared with the fast kernel, and
    /// with the constants as x264 and FFmpeg apply them to their sums: the luminance term's C1
    /// ends up divided by 64, the contrast term uses the sample (n − 1) variance.
    static func naiveSSIM(_ a: OwnedPlane, _ b: OwnedPlane) -> Double {
        let c1: Double = 0.01 * 255 * 0.01 * 255 / 64, c2: Double = 0.03 * 255 * 0.03 * 255
        var total = 0.0, windows = 0
        var y = 0
        while y + 8 <= (a.height / 4) * 4 {
            var x = 0
            while x + 8 <= (a.width / 4) * 4 {
                var ma = 0.0, mb = 0.0
                for dy in 0..<8 { for dx in 0..<8 { ma += Double(a[x + dx, y + dy]); mb += Double(b[x + dx, y + dy]) } }
                ma /= 64; mb /= 64
                var va = 0.0, vb = 0.0, cov = 0.0
                for dy in 0..<8 {
                    for dx in 0..<8 {
                        let da = Double(a[x + dx, y + dy]) - ma, db = Double(b[x + dx, y + dy]) - mb
                        va += da * da; vb += db * db; cov += da * db
                    }
                }
                va /= 63; vb /= 63; cov /= 63
                total += (2 * ma * mb + c1) * (2 * cov + c2) / ((ma * ma + mb * mb + c1) * (va + vb + c2))
                windows += 1
                x += 4
            }
            y += 4
        }
        return total / Double(windows)
    }

    @Test func ssimMatchesItsDefinitionWindowByWindow() {
        let a = OwnedPlane(width: 70, height: 45) { Self.texture($0, $1) }
        let b = OwnedPlane(width: 70, height: 45, padding: 1) { x, y in
            UInt8(clamping: Int(Self.texture(x, y)) + (x * 3 + y * 5) % 23 - 11)
        }
        let fast = a.withView { va in b.withView { vb in PictureQuality.ssim(va, vb) } }
        let reference = Self.naiveSSIM(a, b)
        #expect(abs(fast - reference) < 1e-9, "fast \(fast), by definition \(reference)")
        #expect(fast < 0.99 && fast > 0.1)
        let same = a.withView { va in a.withView { PictureQuality.ssim(va, $0) } }
        #expect(abs(same - 1) < 1e-12)
    }

    @Test func accumulatorWeighsPlanesByPixelsLikeFFmpeg() {
        let y = OwnedPlane(width: 16, height: 16) { Self.texture($0, $1) }
        let yOff = OwnedPlane(width: 16, height: 16) { x, yy in Self.texture(x, yy) &+ 1 }
        let u = OwnedPlane(width: 8, height: 8) { _, _ in 128 }
        let uOff = OwnedPlane(width: 8, height: 8) { _, _ in 131 } // MSE 9
        var accumulator = QualityAccumulator()
        y.withView { vy in yOff.withView { vyo in u.withView { vu in uOff.withView { vuo in
            accumulator.add(picture: [vyo, vuo, vu], reference: [vy, vu, vu])
        } } } }
        let summary = try! #require(accumulator.summary)
        let yMSE = Double(y.withView { a in yOff.withView { PictureQuality.squaredError(a, $0) } }) / 256
        #expect(abs(summary.psnrY - PictureQuality.psnr(meanSquaredError: yMSE)) < 0.001)
        #expect(abs(summary.psnrU - PictureQuality.psnr(meanSquaredError: 9)) < 0.001)
        #expect(summary.psnrV == PictureQuality.maximumPSNR)
        // 256 Y, 64 U, 64 V pixels: weights 4/6, 1/6, 1/6.
        let weighted = yMSE * 4 / 6 + 9.0 / 6
        #expect(abs(summary.psnrYUV - PictureQuality.psnr(meanSquaredError: weighted)) < 0.001)
        #expect(summary.pictures == 1)
        #expect(QualityAccumulator().summary == nil)
    }
}
