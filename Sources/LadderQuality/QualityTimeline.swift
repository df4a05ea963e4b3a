import Foundation
import MediaCore

/// One rung's measured pictures in time: what `transcode --quality` writes to `quality.csv` and
/// plots in `quality.html`, so a dip (a scene cut, a keyframe starved by the VBV, a fade) shows
/// where it happened rather than vanishing into the rung's average.
public struct QualityTimeline: Sendable, Equatable {
    public struct Sample: Sendable, Equatable {
        /// Presentation time of the picture, seconds from the job's start.
        public var seconds: Double
        public var psnrY: Double
        public var psnrYUV: Double
        public var ssimY: Double
        public var ssimAll: Double

        public init(seconds: Double, psnrY: Double, psnrYUV: Double, ssimY: Double, ssimAll: Double) {
            self.seconds = seconds
            self.psnrY = psnrY
            self.psnrYUV = psnrYUV
            self.ssimY = ssimY
            self.ssimAll = ssimAll
        }

        /// SSIM All in decibels, −10·log10(1 − SSIM), as FFmpeg prints it.
        public var ssimDecibels: Double { PictureQuality.decibels(ssim: ssimAll) }
    }

    public var level: Int
    public var width: Int
    public var height: Int
    public var bitRate: Int
    public var samples: [Sample]

    /// Pictures kept per rung: at one in four, about 50 minutes of 30 fps, a few megabytes; past
    /// it the rung's averages go on and the timeline stops (the page says so).
    public static let maximumSamples = 100_000

    public init(level: Int, width: Int, height: Int, bitRate: Int, samples: [Sample] = []) {
        self.level = level
        self.width = width
        self.height = height
        self.bitRate = bitRate
        self.samples = samples
    }

    public var label: String { "L\(level) \(width)x\(height) \(LadderReportPage.rateLabel(bitRate))" }

    /// Every sample of every rung, one line each, in time order within a rung.
    public static func csv(_ timelines: [QualityTimeline]) -> String {
        var text = "level,width,height,seconds,psnr_y,psnr_yuv,ssim_y,ssim_all\n"
        for timeline in timelines {
            for sample in timeline.samples {
                text += "\(timeline.level),\(timeline.width),\(timeline.height),\(String(format: "%.3f", sample.seconds)),"
                    + "\(String(format: "%.3f", sample.psnrY)),\(String(format: "%.3f", sample.psnrYUV)),"
                    + "\(String(format: "%.6f", sample.ssimY)),\(String(format: "%.6f", sample.ssimAll))\n"
            }
        }
        return text
    }

    /// The samples in at most `count` equal spans of time: each span's mean and its worst picture.
    func buckets(_ count: Int, from start: Double, to end: Double,
                 figure: (Sample) -> Double) -> [(seconds: Double, mean: Double, worst: Double)] {
        guard !samples.isEmpty, count > 0 else { return [] }
        let span = max(end - start, 1e-9) / Double(count)
        var sums = [Double](repeating: 0, count: count), counts = [Int](repeating: 0, count: count)
        var worst = [Double](repeating: .infinity, count: count)
        for sample in samples {
            let value = figure(sample)
            guard value.isFinite else { continue }
            let index = min(count - 1, max(0, Int((sample.seconds - start) / span)))
            sums[index] += value
            counts[index] += 1
            worst[index] = min(worst[index], value)
        }
        // A loop with typed locals: the same as one `compactMap` over a tuple expression, which
        // took the type checker five seconds of every build.
        var result: [(seconds: Double, mean: Double, worst: Double)] = []
        for index in 0..<count where counts[index] > 0 {
            let seconds: Double = start + (Double(index) + 0.5) * span
            let mean: Double = sums[index] / Double(counts[index])
            result.append((seconds: seconds, mean: mean, worst: worst[index]))
        }
        return result
    }
}

/// `quality.html`: each measured rung's PSNR Y and SSIM (dB) against time, one line per rung
/// (the mean of each of up to 400 spans of time, and a thin line for each span's worst picture;
/// broken where no picture was measured), inline SVG with no script, like the ladder study's page.
public enum QualityTimelinePage {
    static let spans = 400

    public static func render(input: String, sampleInterval: Int, _ timelines: [QualityTimeline]) -> String {
        let measured = timelines.filter { !$0.samples.isEmpty }
        var html = LadderReportPage.pageHead(title: "Quality over time: \(input)") + """
        <h1>Quality over time</h1>
        <p>Source <code>\(LadderReportPage.escape(input))</code>. Each encoded rung decoded again and compared with the source scaled to its size with Lanczos; one picture in \(sampleInterval) measured.</p>

        """
        guard !measured.isEmpty else { return html + "<p>No rung was measured (every rung passed through).</p>\n</body></html>\n" }
        let start = measured.compactMap { $0.samples.first?.seconds }.min() ?? 0
        let end = measured.compactMap { $0.samples.last?.seconds }.max() ?? 1
        html += chart(measured, from: start, to: end, label: "PSNR Y (dB)") { $0.psnrY }
        html += chart(measured, from: start, to: end, label: "SSIM (dB)") { $0.ssimDecibels }
        html += "<p class=\"note\">Thick: the mean of each span of time; thin: the span's worst picture; a break: no picture measured there (from one in four on, every other GOP is measured). Every measured picture is in <code>quality.csv</code>.</p>\n"
        html += "<h2>Worst pictures</h2>\n<table><tr><th>rung</th><th>pictures measured</th><th>worst PSNR Y</th><th>at (s)</th><th>worst SSIM</th><th>at (s)</th></tr>\n"
        for timeline in measured {
            let worstPSNR = timeline.samples.min { $0.psnrY < $1.psnrY }!
            let worstSSIM = timeline.samples.min { $0.ssimAll < $1.ssimAll }!
            html += "<tr><td>\(LadderReportPage.escape(timeline.label))</td><td>\(timeline.samples.count)\(timeline.samples.count >= QualityTimeline.maximumSamples ? " (timeline full: later pictures only in the averages)" : "")</td>"
                + "<td>\(LadderReportPage.format(worstPSNR.psnrY, 2))</td><td>\(LadderReportPage.format(worstPSNR.seconds, 2))</td>"
                + "<td>\(LadderReportPage.format(worstSSIM.ssimAll, 4))</td><td>\(LadderReportPage.format(worstSSIM.seconds, 2))</td></tr>\n"
        }
        return html + "</table>\n</body></html>\n"
    }

    private static func chart(_ timelines: [QualityTimeline], from start: Double, to end: Double, label: String,
                              figure: (QualityTimeline.Sample) -> Double) -> String {
        let series = timelines.map { (timeline: $0, points: $0.buckets(spans, from: start, to: end, figure: figure)) }
        let values = series.flatMap { $0.points.flatMap { [$0.mean, $0.worst] } }.filter { $0.isFinite && $0 < 99 }
        guard let low = values.min(), let high = values.max() else { return "" }
        let width = 900.0, height = 360.0, left = 60.0, right = 170.0, top = 20.0, bottom = 45.0
        let qLow = floor(low - 0.5), qHigh = ceil(high + 0.5)
        let duration = max(end - start, 1e-9)
        func x(_ seconds: Double) -> Double { left + (seconds - start) / duration * (width - left - right) }
        func y(_ value: Double) -> Double { top + (qHigh - min(value, qHigh)) / (qHigh - qLow) * (height - top - bottom) }
        let format = LadderReportPage.format
        var svg = "<h2>\(LadderReportPage.escape(label)) over time</h2>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"\(Int(width))\" height=\"\(Int(height))\" viewBox=\"0 0 \(Int(width)) \(Int(height))\" role=\"img\">\n"
        svg += "<rect x=\"\(left)\" y=\"\(top)\" width=\"\(width - left - right)\" height=\"\(height - top - bottom)\" fill=\"none\" stroke=\"#999\"/>\n"
        // About ten time ticks at a round step.
        let rawStep = duration / 10
        let magnitude = pow(10, floor(log10(max(rawStep, 1e-3))))
        let timeStep = [1.0, 2.0, 5.0, 10.0].map { $0 * magnitude }.first { $0 >= rawStep } ?? rawStep
        var tick = (start / timeStep).rounded(.up) * timeStep
        while tick <= end + 1e-9 {
            svg += "<line x1=\"\(format(x(tick), 1))\" y1=\"\(top)\" x2=\"\(format(x(tick), 1))\" y2=\"\(height - bottom)\" stroke=\"#eee\"/>"
            svg += "<text x=\"\(format(x(tick), 1))\" y=\"\(height - bottom + 16)\" text-anchor=\"middle\">\(format(tick, timeStep < 1 ? 1 : 0))</text>\n"
            tick += timeStep
        }
        svg += LadderReportPage.valueAxis(from: qLow, to: qHigh, frame: (left, right, top, bottom, width, height), y: y,
                                          xTitle: "media time (s)", yTitle: label)
        for (index, entry) in series.enumerated() {
            let color = LadderReportPage.palette[index % LadderReportPage.palette.count]
            // Time with no measured picture (the GOPs sampling skips) is a break in the line, not
            // a straight segment across it.
            let gaps = zip(entry.points, entry.points.dropFirst()).map { $1.seconds - $0.seconds }.sorted()
            let breakAfter = max(3 * (gaps.isEmpty ? 0 : gaps[gaps.count / 2]), 1.5 * duration / Double(spans))
            func path(_ value: (Double, Double, Double) -> Double) -> String {
                var previous: Double?
                return entry.points.map { point in
                    defer { previous = point.seconds }
                    let command = previous.map { point.seconds - $0 > breakAfter } ?? true ? "M" : "L"
                    return "\(command)\(format(x(point.seconds), 1)),\(format(y(value(point.seconds, point.mean, point.worst)), 1))"
                }.joined(separator: " ")
            }
            svg += "<path d=\"\(path { _, _, worst in worst })\" fill=\"none\" stroke=\"\(color)\" stroke-width=\"0.8\" stroke-opacity=\"0.6\"/>\n"
            svg += "<path d=\"\(path { _, mean, _ in mean })\" fill=\"none\" stroke=\"\(color)\" stroke-width=\"2\"><title>\(LadderReportPage.escape(entry.timeline.label))</title></path>\n"
            let legendY = top + 16 + Double(index) * 18
            svg += "<line x1=\"\(width - right + 12)\" y1=\"\(legendY - 4)\" x2=\"\(width - right + 32)\" y2=\"\(legendY - 4)\" stroke=\"\(color)\" stroke-width=\"3\"/><text x=\"\(width - right + 38)\" y=\"\(legendY)\">\(LadderReportPage.escape(entry.timeline.label))</text>\n"
        }
        return svg + "</svg>\n"
    }
}
