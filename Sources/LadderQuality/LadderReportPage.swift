import Foundation

/// `report.html`: one self-contained page (inline SVG and CSS, no script, nothing fetched) with
/// the rate–quality curves per size, their convex hull, and where the provisioned and suggested
/// rungs sit, then the same figures as tables.
public enum LadderReportPage {
    public static func render(_ study: LadderStudy) -> String {
        let sizes = Dictionary(grouping: study.grid, by: \.size).sorted { pixels($0.key) > pixels($1.key) }
        var html = pageHead(title: "Ladder study: \(study.input)") + """
        <h1>Ladder study</h1>
        <p>Source <code>\(escape(study.input))</code>, \(study.sourceWidth)x\(study.sourceHeight)\(study.sourcePixelShape.map { " with \($0) pixels, shown as \(study.sourceDisplayWidth ?? study.sourceWidth)x\(study.sourceHeight)" } ?? ""); \(study.windows) window(s), \(format(study.windowSeconds, 1)) s encoded per point with x264 <code>\(escape(study.preset))</code>.
        Quality: \(escape(study.measurement)).</p>

        """
        if let bd = study.bdRate {
            html += "<p><strong>Suggested against provisioned ladder, BD-rate:</strong> \(percent(bd.metric)) by \(escape(study.metric)), \(percent(bd.psnrYUV)) by PSNR YUV, \(percent(bd.ssimDecibels)) by SSIM (dB). Negative: the suggested ladder needs that much less bit rate for the same quality.</p>\n"
        }
        html += chart(study, sizes: sizes, figure: \.quality, label: study.metric)
        html += chart(study, sizes: sizes, figure: \.ssimDecibels, label: "SSIM (dB)")
        html += "<p class=\"note\">x: video bit rate the encoder produced (log scale). Lines: one per size. Thick grey: the convex hull, the best any size reaches. Squares: provisioned rungs. Diamonds: suggested rungs.</p>\n"
        html += table(title: "Suggested ladder", study.suggested)
        if !study.provisioned.isEmpty { html += table(title: "Provisioned ladder", study.provisioned) }
        html += table(title: "Convex hull", study.hull)
        html += table(title: "Every encode", study.grid.sorted { (pixels($0.size), $0.targetBitRate) > (pixels($1.size), $1.targetBitRate) })
        html += "<p class=\"note\">VMAF is not in Debian 12's FFmpeg; PSNR and SSIM are measured with FFmpeg's definitions. CPU for the whole study: \(format(study.cpuSeconds, 1)) s.</p>\n</body></html>\n"
        return html
    }

    /// The start of a self-contained report page, up to `<body>`: the style both reports share.
    static func pageHead(title: String) -> String {
        """
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8"><title>\(escape(title))</title>
        <style>
        body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; max-width: 1100px; }
        table { border-collapse: collapse; margin: 1em 0; } td, th { padding: 2px 10px; border-bottom: 1px solid #ddd; text-align: right; }
        th { background: #f4f4f4; } .note { color: #666; } svg text { font: 12px system-ui, sans-serif; }
        </style></head><body>

        """
    }

    static let palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"]

    private static func chart(_ study: LadderStudy, sizes: [(key: String, value: [RateQualityPoint])],
                              figure: (RateQualityPoint) -> Double, label: String) -> String {
        let everything = study.grid + study.provisioned + study.suggested
        guard let minimumRate = everything.map(\.bitRate).filter({ $0 > 0 }).min(),
              let maximumRate = everything.map(\.bitRate).max() else { return "" }
        let values = everything.map(figure).filter { $0.isFinite && $0 < 99 }
        guard let low = values.min(), let high = values.max() else { return "" }
        let width = 900.0, height = 420.0, left = 60.0, right = 150.0, top = 20.0, bottom = 45.0
        let logLow = log10(Double(minimumRate) * 0.9), logHigh = log10(Double(maximumRate) * 1.1)
        let qLow = floor(low - 0.5), qHigh = ceil(high + 0.5)
        func x(_ rate: Int) -> Double { left + (log10(Double(max(rate, 1))) - logLow) / (logHigh - logLow) * (width - left - right) }
        func y(_ value: Double) -> Double { top + (qHigh - value) / (qHigh - qLow) * (height - top - bottom) }
        func polyline(_ points: [RateQualityPoint]) -> String {
            points.sorted { $0.bitRate < $1.bitRate }.map { "\(format(x($0.bitRate), 1)),\(format(y(figure($0)), 1))" }.joined(separator: " ")
        }
        var svg = "<h2>\(escape(label)) against bit rate</h2>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"\(Int(width))\" height=\"\(Int(height))\" viewBox=\"0 0 \(Int(width)) \(Int(height))\" role=\"img\">\n"
        svg += "<rect x=\"\(left)\" y=\"\(top)\" width=\"\(width - left - right)\" height=\"\(height - top - bottom)\" fill=\"none\" stroke=\"#999\"/>\n"
        // Rate ticks at 1-2-5 steps; quality ticks every whole step that fits about eight.
        var tick = pow(10, floor(logLow))
        while log10(tick) <= logHigh {
            for multiple in [1.0, 2.0, 5.0] where log10(tick * multiple) >= logLow && log10(tick * multiple) <= logHigh {
                let rate = Int(tick * multiple), px = x(rate)
                svg += "<line x1=\"\(format(px, 1))\" y1=\"\(top)\" x2=\"\(format(px, 1))\" y2=\"\(height - bottom)\" stroke=\"#eee\"/>"
                svg += "<text x=\"\(format(px, 1))\" y=\"\(height - bottom + 16)\" text-anchor=\"middle\">\(rateLabel(rate))</text>\n"
            }
            tick *= 10
        }
        svg += valueAxis(from: qLow, to: qHigh, frame: (left, right, top, bottom, width, height), y: y,
                         xTitle: "video bit rate (bit/s)", yTitle: label)
        svg += "<polyline points=\"\(polyline(RateQuality.convexHull(study.grid.map { var p = $0; p.quality = figure($0); return p })))\" fill=\"none\" stroke=\"#bbb\" stroke-width=\"7\" stroke-linejoin=\"round\"/>\n"
        for (index, size) in sizes.enumerated() {
            let color = palette[index % palette.count]
            svg += "<polyline points=\"\(polyline(size.value))\" fill=\"none\" stroke=\"\(color)\" stroke-width=\"2\"/>"
            for point in size.value {
                svg += "<circle cx=\"\(format(x(point.bitRate), 1))\" cy=\"\(format(y(figure(point)), 1))\" r=\"3\" fill=\"\(color)\"><title>\(point.size) \(rateLabel(point.bitRate)): \(format(figure(point), 2))</title></circle>"
            }
            let legendY = top + 16 + Double(index) * 18
            svg += "\n<line x1=\"\(width - right + 12)\" y1=\"\(legendY - 4)\" x2=\"\(width - right + 32)\" y2=\"\(legendY - 4)\" stroke=\"\(color)\" stroke-width=\"3\"/><text x=\"\(width - right + 38)\" y=\"\(legendY)\">\(size.key)</text>\n"
        }
        for point in study.provisioned {
            svg += "<rect x=\"\(format(x(point.bitRate) - 6, 1))\" y=\"\(format(y(figure(point)) - 6, 1))\" width=\"12\" height=\"12\" fill=\"none\" stroke=\"#000\" stroke-width=\"2\"><title>provisioned \(point.size) \(rateLabel(point.targetBitRate)): \(format(figure(point), 2))</title></rect>\n"
        }
        for point in study.suggested {
            let cx = x(point.bitRate), cy = y(figure(point))
            svg += "<polygon points=\"\(format(cx, 1)),\(format(cy - 8, 1)) \(format(cx + 8, 1)),\(format(cy, 1)) \(format(cx, 1)),\(format(cy + 8, 1)) \(format(cx - 8, 1)),\(format(cy, 1))\" fill=\"#000\" fill-opacity=\"0.7\"><title>suggested \(point.size) \(rateLabel(point.targetBitRate)): \(format(figure(point), 2))</title></polygon>\n"
        }
        let legendBase = top + 16 + Double(sizes.count) * 18 + 10
        svg += "<rect x=\"\(width - right + 16)\" y=\"\(legendBase - 10)\" width=\"10\" height=\"10\" fill=\"none\" stroke=\"#000\" stroke-width=\"2\"/><text x=\"\(width - right + 38)\" y=\"\(legendBase)\">provisioned</text>\n"
        svg += "<polygon points=\"\(width - right + 21),\(legendBase + 8) \(width - right + 27),\(legendBase + 14) \(width - right + 21),\(legendBase + 20) \(width - right + 15),\(legendBase + 14)\" fill=\"#000\"/><text x=\"\(width - right + 38)\" y=\"\(legendBase + 18)\">suggested</text>\n"
        svg += "<line x1=\"\(width - right + 12)\" y1=\"\(legendBase + 32)\" x2=\"\(width - right + 32)\" y2=\"\(legendBase + 32)\" stroke=\"#bbb\" stroke-width=\"7\"/><text x=\"\(width - right + 38)\" y=\"\(legendBase + 36)\">convex hull</text>\n"
        return svg + "</svg>\n"
    }

    /// A chart's quality axis: grid lines and labels at whole steps from `low` to `high` (about
    /// eight), and both axis titles.
    static func valueAxis(from low: Double, to high: Double,
                          frame: (left: Double, right: Double, top: Double, bottom: Double, width: Double, height: Double),
                          y: (Double) -> Double, xTitle: String, yTitle: String) -> String {
        var svg = ""
        let step = max(1, ((high - low) / 8).rounded())
        var value = low
        while value <= high {
            svg += "<line x1=\"\(frame.left)\" y1=\"\(format(y(value), 1))\" x2=\"\(frame.width - frame.right)\" y2=\"\(format(y(value), 1))\" stroke=\"#eee\"/>"
            svg += "<text x=\"\(frame.left - 6)\" y=\"\(format(y(value) + 4, 1))\" text-anchor=\"end\">\(format(value, 0))</text>\n"
            value += step
        }
        svg += "<text x=\"\(format((frame.left + frame.width - frame.right) / 2, 0))\" y=\"\(frame.height - 8)\" text-anchor=\"middle\">\(escape(xTitle))</text>"
        svg += "<text transform=\"translate(16 \(format((frame.top + frame.height - frame.bottom) / 2, 0))) rotate(-90)\" text-anchor=\"middle\">\(escape(yTitle))</text>\n"
        return svg
    }

    private static func table(title: String, _ points: [RateQualityPoint]) -> String {
        var html = "<h2>\(escape(title))</h2>\n<table><tr><th>size</th><th>target</th><th>produced</th><th>PSNR Y</th><th>PSNR YUV</th><th>SSIM</th><th>SSIM dB</th></tr>\n"
        for point in points {
            html += "<tr><td>\(point.size)</td><td>\(rateLabel(point.targetBitRate))</td><td>\(rateLabel(point.bitRate))</td><td>\(format(point.psnrY, 2))</td><td>\(format(point.psnrYUV, 2))</td><td>\(format(point.ssimAll, 4))</td><td>\(format(point.ssimDecibels, 2))</td></tr>\n"
        }
        return html + "</table>\n"
    }

    static func rateLabel(_ rate: Int) -> String {
        rate >= 1_000_000 ? "\(format(Double(rate) / 1e6, rate % 1_000_000 == 0 ? 0 : 2))M" : "\(Int((Double(rate) / 1000).rounded()))k"
    }

    static func format(_ value: Double, _ digits: Int) -> String { String(format: "%.\(digits)f", value) }

    static func percent(_ value: Double?) -> String { value.map { String(format: "%+.1f %%", $0 * 100) } ?? "n/a" }

    static func pixels(_ size: String) -> Int {
        let parts = size.split(separator: "x").compactMap { Int($0) }
        return parts.count == 2 ? parts[0] * parts[1] : 0
    }

    static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
    }
}
