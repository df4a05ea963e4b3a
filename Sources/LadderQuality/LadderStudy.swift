import Foundation

/// What `abr-worker ladder` found for one source: `ladder.json`, and the data of `report.html`.
public struct LadderStudy: Sendable, Codable {
    public var input: String
    public var sourceWidth: Int
    public var sourceHeight: Int
    /// An anamorphic source's pixel shape ("4:3") and its width as shown; nil for square pixels.
    /// Sizes are then chosen by the shown shape: every rung has square pixels.
    public var sourcePixelShape: String?
    public var sourceDisplayWidth: Int?
    /// Seconds of source encoded at each point, from how many windows.
    public var windowSeconds: Double
    public var windows: Int
    public var preset: String
    /// What `quality` means in every point (e.g. "PSNR Y (dB)").
    public var metric: String
    /// How quality was measured: each encode scaled back to the source's size, against the source.
    public var measurement: String
    public var grid: [RateQualityPoint]
    public var hull: [RateQualityPoint]
    /// The provisioned ladder's rungs, each encoded like the grid (empty without a provision).
    public var provisioned: [RateQualityPoint]
    /// The suggested ladder's rungs, each encoded like the grid.
    public var suggested: [RateQualityPoint]
    /// Bjøntegaard delta rate of the suggested ladder against the provisioned one, by the
    /// ladder's metric (`metric`), by PSNR YUV and by SSIM (dB); nil where the curves share no
    /// quality range.
    public var bdRate: BDRates?
    public var cpuSeconds: Double

    public struct BDRates: Sendable, Codable {
        public var metric: Double?
        public var psnrYUV: Double?
        public var ssimDecibels: Double?

        public init(metric: Double?, psnrYUV: Double?, ssimDecibels: Double?) {
            self.metric = metric
            self.psnrYUV = psnrYUV
            self.ssimDecibels = ssimDecibels
        }
    }

    public init(input: String, sourceWidth: Int, sourceHeight: Int, sourcePixelShape: String? = nil, sourceDisplayWidth: Int? = nil,
                windowSeconds: Double, windows: Int, preset: String, metric: String, measurement: String, grid: [RateQualityPoint], provisioned: [RateQualityPoint],
                suggested: [RateQualityPoint], cpuSeconds: Double) {
        self.input = input
        self.sourceWidth = sourceWidth
        self.sourceHeight = sourceHeight
        self.sourcePixelShape = sourcePixelShape
        self.sourceDisplayWidth = sourceDisplayWidth
        self.windowSeconds = windowSeconds
        self.windows = windows
        self.preset = preset
        self.metric = metric
        self.measurement = measurement
        self.grid = grid
        self.hull = RateQuality.convexHull(grid)
        self.provisioned = provisioned
        self.suggested = suggested
        self.cpuSeconds = cpuSeconds
        if !provisioned.isEmpty, !suggested.isEmpty {
            func bd(_ figure: (RateQualityPoint) -> Double) -> Double? {
                BjontegaardDelta.rate(reference: provisioned.map { (Double($0.bitRate), figure($0)) },
                                      test: suggested.map { (Double($0.bitRate), figure($0)) })
                    .map { ($0 * 10000).rounded() / 10000 }
            }
            bdRate = BDRates(metric: bd(\.quality), psnrYUV: bd(\.psnrYUV), ssimDecibels: bd(\.ssimDecibels))
        }
    }

    /// A Stream Manager 2.0 provision for the suggested ladder, ready to post.
    public func suggestedProvision(streamGuid: String) -> String {
        let streams = suggested.enumerated().map { index, rung in
            "      {\"streamGuid\": \"\(streamGuid)_\(index + 1)\", \"abrLevel\": \(index + 1), \"videoParams\": {\"videoBitRate\": \(rung.targetBitRate), \"videoWidth\": \(rung.width), \"videoHeight\": \(rung.height)}}"
        }
        return """
        [
          {
            "streamGuid": "\(streamGuid)",
            "messageType": "ProvisionCommand",
            "streams": [
        \(streams.joined(separator: ",\n"))
            ]
          }
        ]

        """
    }
}
