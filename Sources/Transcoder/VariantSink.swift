import Foundation
import MediaCore

/// Where a live variant's media goes besides HLS: the node's RTSP stream for `<guid>_<level>`
/// (and from there to players and an origin). Called on the variant's queue, in order.
public protocol VariantSink: AnyObject, Sendable {
    /// The variant's video format, before its first picture and whenever it changes.
    func variantFormat(sps: [UInt8], pps: [UInt8], frameRate: Double, audio: (sampleRate: Int, channels: Int, config: [UInt8])?)
    /// One picture as NAL units, at `time` on the job's timeline.
    func variantVideo(_ nalUnits: [[UInt8]], time: MediaTime, isKeyframe: Bool)
    /// One AAC access unit at `time` on the job's timeline.
    func variantAudio(_ frame: [UInt8], time: MediaTime)
    /// The ladder's current bandwidth hints for this variant (declared, measured, thresholds), for SDP.
    /// Called from the job's thread whenever measurements change.
    func variantHints(_ hint: BandwidthHints.VariantHint, keyframeInterval: Double)
    /// The job ended; no more media.
    func variantEnded()
}
