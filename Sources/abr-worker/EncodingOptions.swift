import ArgumentParser
import Dispatch
import FFmpegBridge
import Foundation
import Transcoder

/// The x264 and ladder options `transcode` and `serve` share.
struct EncodingOptions: ParsableArguments {
    @Option(help: "x264 preset.")
    var preset: String = "veryfast"

    @Option(help: "Top variant: auto (pass through when the source matches level 1), passthrough, or encode.")
    var top: String = "auto"

    @Option(help: "Seconds between IDRs on the time grid (and the shortest segment when following source keyframes).")
    var keyframeInterval: Double = 2

    @Option(help: "Scaler for the encoded rungs: \(ScalingAlgorithm.allCases.map(\.rawValue).joined(separator: ", ")).")
    var scaler: String = ScalingAlgorithm.bicubic.rawValue

    func validate() throws {
        guard TopVariantMode(rawValue: top) != nil else {
            throw ValidationError("--top must be one of auto, passthrough, encode (got \(top))")
        }
        guard TranscodeOptions.presets.contains(preset) else {
            throw ValidationError("--preset must be an x264 preset: \(TranscodeOptions.presets.joined(separator: ", ")) (got \(preset))")
        }
        guard ScalingAlgorithm(rawValue: scaler) != nil else {
            throw ValidationError("--scaler must be one of \(ScalingAlgorithm.allCases.map(\.rawValue).joined(separator: ", ")) (got \(scaler))")
        }
        guard keyframeInterval >= 0.5, keyframeInterval <= 20 else {
            throw ValidationError("--keyframe-interval must be 0.5 to 20 seconds (got \(keyframeInterval))")
        }
    }

    func transcodeOptions(threads: Int? = nil) -> TranscodeOptions {
        TranscodeOptions(preset: preset, topMode: TopVariantMode(rawValue: top) ?? .auto, keyframeInterval: keyframeInterval, threads: threads,
                         scaler: ScalingAlgorithm(rawValue: scaler) ?? .bicubic)
    }
}

/// Runs `handler` on SIGINT or SIGTERM instead of dying; the returned sources must be kept alive.
func onTerminationSignal(_ handler: @escaping @Sendable () -> Void) -> [DispatchSourceSignal] {
    [SIGINT, SIGTERM].map { number in
        signal(number, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
        source.setEventHandler(handler: handler)
        source.resume()
        return source
    }
}
