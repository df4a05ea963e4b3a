/// The bandwidth hints published with a ladder (`abr.json`): what an edge or player needs to put
/// each subscriber on the variant its bandwidth can carry.
public struct BandwidthHints: Sendable, Hashable, Codable {
    public struct VariantHint: Sendable, Hashable, Codable {
        public var streamGuid: String
        public var abrLevel: Int
        public var width: Int
        public var height: Int
        public var frameRate: Double
        public var codecs: String
        public var declaredBitRate: Int
        public var averageBitRate: Int
        public var peakBitRate: Int
        public var passthrough: Bool
        /// Move a subscriber up to this variant only when its estimate is above this (bit/s).
        public var upswitchAboveBitRate: Int
        /// Move a subscriber on this variant down when its estimate falls below this (bit/s).
        public var downswitchBelowBitRate: Int

        public init(streamGuid: String, abrLevel: Int, width: Int, height: Int, frameRate: Double, codecs: String,
                    declaredBitRate: Int, averageBitRate: Int, peakBitRate: Int, passthrough: Bool,
                    upswitchAboveBitRate: Int = 0, downswitchBelowBitRate: Int = 0) {
            self.streamGuid = streamGuid
            self.abrLevel = abrLevel
            self.width = width
            self.height = height
            self.frameRate = frameRate
            self.codecs = codecs
            self.declaredBitRate = declaredBitRate
            self.averageBitRate = averageBitRate
            self.peakBitRate = peakBitRate
            self.passthrough = passthrough
            self.upswitchAboveBitRate = upswitchAboveBitRate
            self.downswitchBelowBitRate = downswitchBelowBitRate
        }
    }

    public var streamGuid: String
    /// Seconds between IDRs (the grid interval, or the source's longest GOP when following it).
    public var keyframeInterval: Double
    /// Ordered by `abrLevel` ascending.
    public var variants: [VariantHint]

    /// A subscriber needs 1/0.9 of a variant's rate to move up to it. Players that estimate from
    /// each fragment's download use larger margins for their noisy figure (hls.js climbs when
    /// 0.7 × estimate exceeds a level's rate); those that smooth it use less (Shaka 0.85,
    /// dash.js 0.9), and Red5's edge upgrades at 0.65 of the target's rate. The node's own
    /// estimate is what arrived over seconds of a saturating probe with nothing queued, so it
    /// sits with the smoothers: at 0.7, players on 3G windows sat on the lowest rung for most of
    /// a minute on links that carried the next one with 20–30 % to spare (73 % of the oracle);
    /// at 0.8, a reader on a link carrying 1.1–1.45 Mbit/s waited for 1.385 Mbit/s to take a
    /// 1.108 Mbit/s rung that the oracle held (84 % of it). 200 replays (20 3G windows, two
    /// means, five link models) went from 92.9 to 94.8 % of the oracle on average, their worst
    /// from 58 to 71 %, with avoidable freezes 4.6 → 4.1 s in all, none over 0.98 s.
    public static let upswitchFactor = 0.9
    /// hls.js stays on a level while 0.95 × estimate exceeds its bit rate.
    public static let downswitchFactor = 0.95

    /// Builds the hints and fills in the switch thresholds:
    /// `required = max(declared, measured average)`, forced strictly decreasing with the level number;
    /// `upswitchAbove = ceil(required / 0.9)`, `downswitchBelow = ceil(required / 0.95)`.
    public init(streamGuid: String, keyframeInterval: Double, variants: [VariantHint]) {
        self.streamGuid = streamGuid
        self.keyframeInterval = keyframeInterval
        var sorted = variants.sorted { $0.abrLevel < $1.abrLevel }
        var below = 0
        for index in sorted.indices.reversed() {
            let required = max(sorted[index].declaredBitRate, sorted[index].averageBitRate, below + 1)
            sorted[index].upswitchAboveBitRate = Int((Double(required) / Self.upswitchFactor).rounded(.up))
            sorted[index].downswitchBelowBitRate = Int((Double(required) / Self.downswitchFactor).rounded(.up))
            below = required
        }
        self.variants = sorted
    }
}
