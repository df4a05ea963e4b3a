import Foundation
@testable import LadderQuality
import Testing

@Suite struct QualityTimelineTests {
    /// `count` pictures over `seconds`, steady at `psnr` but for one bad picture at `dipAt`.
    static func timeline(level: Int, height: Int, count: Int, seconds: Double, psnr: Double, dipAt: Double) -> QualityTimeline {
        let samples = (0..<count).map { index -> QualityTimeline.Sample in
            let time = Double(index) * seconds / Double(count)
            let dip = abs(time - dipAt) < seconds / Double(count) / 2
            return QualityTimeline.Sample(seconds: time, psnrY: dip ? 20 : psnr, psnrYUV: dip ? 19 : psnr - 1,
                                          ssimY: dip ? 0.5 : 0.98, ssimAll: dip ? 0.45 : 0.975)
        }
        return QualityTimeline(level: level, width: height * 16 / 9, height: height, bitRate: 1_000_000 / level, samples: samples)
    }

    @Test func thePageShowsEveryRungOverTimeWithItsWorstPictureAndStaysSmall() {
        let timelines = [Self.timeline(level: 2, height: 480, count: 3000, seconds: 100, psnr: 42, dipAt: 50),
                         Self.timeline(level: 3, height: 360, count: 3000, seconds: 100, psnr: 40, dipAt: 75)]
        let page = QualityTimelinePage.render(input: "clip <1>.mp4", sampleInterval: 4, timelines)
        #expect(page.contains("clip &lt;1&gt;.mp4") && !page.contains("clip <1>"))
        #expect(!page.contains("<script") && !page.contains("https://"), "self-contained")
        let lines = page.components(separatedBy: "<path d=\"").dropFirst()
        #expect(lines.count == 8, "two charts, a mean and a worst line for each rung")
        for line in lines {
            let points = line.prefix { $0 != "\"" }.split(separator: " ")
            #expect(points.count <= QualityTimelinePage.spans, "3000 pictures drawn as at most \(QualityTimelinePage.spans) spans")
            #expect(points.filter { $0.hasPrefix("M") }.count == 1, "pictures all along: one unbroken line")
        }
        // The worst table finds each rung's bad picture and when it was.
        #expect(page.contains("<td>20.00</td><td>50.00</td>"), "L2's dip at 50 s")
        #expect(page.contains("<td>20.00</td><td>75.00</td>"), "L3's dip at 75 s")
        // The dip survives the averaging as its span's worst.
        let buckets = timelines[0].buckets(QualityTimelinePage.spans, from: 0, to: 100) { $0.psnrY }
        #expect(buckets.map(\.worst).min() == 20)
        let dipSpan = buckets.map(\.mean).min() ?? 0
        #expect(dipSpan > 38.8 && dipSpan < 39.3, "the bad picture among its span's 7 or 8: \(dipSpan)")
    }

    @Test func timeWithNoMeasuredPictureBreaksTheLine() {
        // Every other 2 s GOP measured, as `--quality-every 4` does: 0–2 s, 4–6 s, 8–10 s.
        var timeline = Self.timeline(level: 2, height: 480, count: 300, seconds: 10, psnr: 42, dipAt: -1)
        timeline.samples.removeAll { Int($0.seconds / 2) % 2 == 1 }
        let page = QualityTimelinePage.render(input: "x", sampleInterval: 4, [timeline])
        let mean = page.components(separatedBy: "<path d=\"").dropFirst().dropFirst().first?.prefix { $0 != "\"" } ?? ""
        #expect(mean.split(separator: " ").filter { $0.hasPrefix("M") }.count == 3, "three measured stretches: \(mean.prefix(200))")
    }

    @Test func theCSVHasEveryPictureOfEveryRung() {
        let timelines = [Self.timeline(level: 2, height: 480, count: 5, seconds: 1, psnr: 42, dipAt: 0.4),
                         Self.timeline(level: 3, height: 360, count: 3, seconds: 1, psnr: 40, dipAt: 9)]
        let lines = QualityTimeline.csv(timelines).split(separator: "\n")
        #expect(lines.count == 1 + 5 + 3)
        #expect(lines[0] == "level,width,height,seconds,psnr_y,psnr_yuv,ssim_y,ssim_all")
        #expect(lines[3] == "2,853,480,0.400,20.000,19.000,0.500000,0.450000")
        #expect(lines[8] == "3,640,360,0.667,40.000,39.000,0.980000,0.975000")
    }

    @Test func aLadderWithNothingMeasuredSaysSo() {
        let page = QualityTimelinePage.render(input: "x", sampleInterval: 1, [QualityTimeline(level: 1, width: 1280, height: 720, bitRate: 1)])
        #expect(page.contains("No rung was measured") && !page.contains("<svg"))
    }
}
