import CPlaneScaler
import FFmpegBridge
import Foundation
import MediaCore
import Testing
import TestSupport

/// The ladder's own bicubic (CPlaneScaler): every SIMD kernel gives the portable kernel's bytes,
/// nothing is written past a row's width, and on real pictures it gives what swscale's bicubic
/// gives, to within rounding.
@Suite struct PlaneScalerTests {
    /// A plane of `width` × `height` in rows of `stride` bytes, from a fixed seed: smooth ramps,
    /// hard edges and noise, so that every tap of every filter matters.
    static func plane(width: Int, height: Int, stride: Int, seed: UInt64) -> [UInt8] {
        var state = seed
        var bytes = [UInt8](repeating: 0, count: stride * height)
        for y in 0..<height {
            for x in 0..<width {
                state = state &* 6364136223846793005 &+ 1442695040888963407
                let noise = Int(state >> 59)
                let ramp = (x * 255) / max(width, 1)
                let edge = ((x / 7 + y / 5) % 2) * 96
                bytes[y * stride + x] = UInt8(clamping: (ramp + edge + noise) % 256)
            }
        }
        return bytes
    }

    /// Runs one kernel; the bytes past each output row's width are a sentinel the kernel must leave.
    static func scale(_ source: [UInt8], from: (Int, Int, stride: Int), to: (Int, Int), kernel: abr_plane_scaler_kernel)
        throws -> (pixels: [UInt8], kernel: abr_plane_scaler_kernel, untouched: Bool) {
        let scaler = try #require(abr_plane_scaler_create(Int32(from.0), Int32(from.1), Int32(to.0), Int32(to.1), kernel))
        defer { abr_plane_scaler_free(scaler) }
        let stride = to.0 + 40
        var out = [UInt8](repeating: 0xA5, count: stride * to.1)
        source.withUnsafeBufferPointer { input in
            out.withUnsafeMutableBufferPointer { output in
                abr_plane_scaler_run(scaler, input.baseAddress, from.stride, output.baseAddress, stride)
            }
        }
        var pixels: [UInt8] = []
        var untouched = true
        for y in 0..<to.1 {
            pixels += out[(y * stride)..<(y * stride + to.0)]
            untouched = untouched && out[(y * stride + to.0)..<((y + 1) * stride)].allSatisfy { $0 == 0xA5 }
        }
        return (pixels, abr_plane_scaler_kernel_in_use(scaler), untouched)
    }

    @Test(arguments: [
        (1280, 720, 854, 480), (1280, 720, 640, 360), (640, 360, 427, 240), (1920, 1080, 426, 240),
        (853, 479, 301, 171), (37, 23, 16, 9), (16, 9, 37, 23), (1280, 720, 1280, 360), (1920, 1080, 64, 36),
        (5, 3, 1, 1), (1, 1, 33, 17), (1279, 719, 1280, 720),
    ])
    func everyKernelGivesThePortableKernelsBytes(sourceWidth: Int, sourceHeight: Int, width: Int, height: Int) throws {
        let stride = sourceWidth + 13
        let source = Self.plane(width: sourceWidth, height: sourceHeight, stride: stride, seed: UInt64(sourceWidth * 31 + width))
        let portable = try Self.scale(source, from: (sourceWidth, sourceHeight, stride), to: (width, height), kernel: ABR_PLANE_SCALER_PORTABLE)
        #expect(portable.kernel == ABR_PLANE_SCALER_PORTABLE)
        #expect(portable.untouched, "the portable kernel wrote past a row")
        for widest in [ABR_PLANE_SCALER_AVX2, ABR_PLANE_SCALER_AVX512] {
            let simd = try Self.scale(source, from: (sourceWidth, sourceHeight, stride), to: (width, height), kernel: widest)
            #expect(simd.untouched, "kernel \(simd.kernel.rawValue) wrote past a row")
            let differing = zip(simd.pixels, portable.pixels).filter { $0 != $1 }.count
            #expect(differing == 0, "kernel \(simd.kernel.rawValue): \(differing) of \(portable.pixels.count) pixels differ")
        }
    }

    @Test func aConstantPlaneStaysConstantAtEverySize() throws {
        // The coefficients of every output sum to exactly one, so flat areas keep their level
        // (0.45 rounding: a level never moves by a whole step).
        for level: UInt8 in [0, 16, 128, 235, 255] {
            let source = [UInt8](repeating: level, count: 200 * 120)
            for kernel in [ABR_PLANE_SCALER_PORTABLE, ABR_PLANE_SCALER_AVX512] {
                let out = try Self.scale(source, from: (200, 120, 200), to: (83, 47), kernel: kernel)
                #expect(out.pixels.allSatisfy { $0 == level }, "level \(level) changed")
            }
        }
    }

    @Test func sizesOutOfRangeAreRefused() {
        #expect(abr_plane_scaler_create(0, 720, 640, 360, ABR_PLANE_SCALER_AVX512) == nil)
        #expect(abr_plane_scaler_create(1280, 720, 640, -1, ABR_PLANE_SCALER_AVX512) == nil)
        #expect(abr_plane_scaler_create(1 << 15, 720, 640, 360, ABR_PLANE_SCALER_AVX512) == nil)
    }

    @Test func onRealPicturesTheLaddersScalerGivesSwscalesBicubic() throws {
        let input = try MediaInput(url: fixture("720p30-h264-aac.mp4"))
        let video = try #require(input.bestVideoStream)
        let decoder = try VideoDecoder(stream: video, threads: 1)
        let frame = try Frame()
        let sizes = [(854, 480), (640, 360), (853, 479), (426, 240)]
        let ours = try sizes.map { try Scaler(width: $0.0, height: $0.1) }
        let swscale = try sizes.map { try Scaler(width: $0.0, height: $0.1, algorithm: .swscaleBicubic) }
        var pictures = 0
        var squaredError = [UInt64](repeating: 0, count: sizes.count)
        var signedDifference = [Int](repeating: 0, count: sizes.count)
        var samples = [Int](repeating: 0, count: sizes.count)
        while pictures < 8, case let .packet(packet) = try input.read() {
            guard packet.streamIndex == video.index else { continue }
            try decoder.send(packet)
            while pictures < 8, case .frame = try decoder.receive(into: frame) {
                pictures += 1
                for index in sizes.indices {
                    let a = try ours[index].scale(frame)
                    let b = try swscale[index].scale(frame)
                    #expect(ours[index].kernel != "swscale")
                    #expect(swscale[index].kernel == "swscale")
                    let aPlanes = try #require(a.withYUV420Planes { $0 })
                    let bPlanes = try #require(b.withYUV420Planes { $0 })
                    for (planeA, planeB) in zip(aPlanes, bPlanes) {
                        squaredError[index] += PictureQuality.squaredError(planeA, planeB)
                        for y in 0..<planeA.height {
                            for x in 0..<planeA.width {
                                signedDifference[index] += Int(planeA.base[y * planeA.stride + x]) - Int(planeB.base[y * planeB.stride + x])
                            }
                        }
                        samples[index] += planeA.width * planeA.height
                    }
                }
            }
        }
        #expect(pictures == 8)
        for index in sizes.indices {
            let meanSquare = Double(squaredError[index]) / Double(samples[index])
            let psnr = 10 * log10(255 * 255 / max(meanSquare, 1e-9))
            let bias = Double(signedDifference[index]) / Double(samples[index])
            // Rounding apart, the same picture: 58-60 dB from swscale's. On average ours is 0.05 of
            // a level below exactly rounded; swscale's default path is 0.02-0.06 below at 1.5:1 to
            // 2:1, and 0.08 above at 3:1.
            #expect(psnr > 52, "\(sizes[index]): \(psnr) dB from swscale's bicubic")
            #expect(abs(bias) < 0.15, "\(sizes[index]): on average \(bias) of a level from swscale's")
        }
    }
}
