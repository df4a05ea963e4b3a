import Foundation
import MediaCore

/// What a ladder publishes about its variants, made by one piece of code for file and live jobs:
/// the bandwidth hints (`abr.json`, and each live variant's SDP) and the HLS master playlist,
/// which carries the same figures as BANDWIDTH and AVERAGE-BANDWIDTH.
enum LadderHints {
    /// What a variant's output has measured so far.
    struct Measurement {
        var codecs: String
        var averageBitRate: Int
        var peakBitRate: Int
    }

    /// - Parameters:
    ///   - passthroughLevel: the level whose pictures are the source's own, if any.
    ///   - measurements: by level; a missing one or a zero average (no segment yet) makes the
    ///     variant's declared bit rate stand in, so hints exist from a live job's first second.
    static func make(ladder: Ladder, frameRate: Double, keyframeInterval: Double, passthroughLevel: Int?,
                     measurements: [Int: Measurement]) -> BandwidthHints {
        let variants = ladder.variants.map { variant -> BandwidthHints.VariantHint in
            let codecs = measurements[variant.level]?.codecs ?? ""
            let measured = measurements[variant.level].flatMap { $0.averageBitRate > 0 ? $0 : nil }
            return BandwidthHints.VariantHint(
                streamGuid: variant.streamGuid, abrLevel: variant.level, width: variant.width, height: variant.height,
                frameRate: (frameRate * 1000).rounded() / 1000, codecs: codecs.isEmpty ? EncoderChoices.announcedCodecs(profile: variant.profile) : codecs,
                declaredBitRate: variant.bitRate, averageBitRate: measured?.averageBitRate ?? variant.bitRate,
                // A peak below the average would only be a short stream's artefact.
                peakBitRate: measured.map { max($0.peakBitRate, $0.averageBitRate) } ?? variant.bitRate,
                passthrough: variant.level == passthroughLevel)
        }
        return BandwidthHints(streamGuid: ladder.streamGuid, keyframeInterval: keyframeInterval, variants: variants)
    }


    /// Listed by level, not by measured peak, so the top leads even when a passed-through source is lean.
    static func masterPlaylist(_ hints: BandwidthHints, ladder: Ladder) -> HLSMasterPlaylist {
        HLSMasterPlaylist(entries: hints.variants.map {
            HLSMasterPlaylist.Entry(uri: HLSLayout(ladderGuid: ladder.streamGuid).variantPlaylist(level: $0.abrLevel), bandwidth: $0.peakBitRate,
                                    averageBandwidth: $0.averageBitRate, width: $0.width, height: $0.height, frameRate: $0.frameRate,
                                    codecs: $0.codecs)
        })
    }

    /// Writes both files, each aside and renamed, so readers never see half of one; `durable`
    /// syncs them to disk first (offline output; a live job rewrites them as measurements change).
    static func write(_ hints: BandwidthHints, ladder: Ladder, master: URL, hintsFile: URL, durable: Bool) throws {
        try ReplacingFile.write(masterPlaylist(hints, ladder: ladder).render(), to: master, durable: durable)
        try JSONOutput.write(hints, to: hintsFile, durable: durable)
    }
}
