import Foundation
import Testing
@testable import MediaCore

struct DecimalTextTests {
    /// The playlists' numbers read as `String(format:)` wrote them before: every segment and part
    /// duration a live rung writes, and the file names.
    @Test func fixedAndPaddedTextMatchPrintf() {
        var generator = SystemRandomNumberGenerator()
        var values: [Double] = [0, 0.001, 0.33333, 0.333333333, 1.0 / 3, 2, 2.002, 1.96667, 6.006, 12345.678901, 0.000004, 0.0000049]
        for _ in 0..<2000 { values.append(Double.random(in: 0..<20, using: &generator)) }
        for value in values {
            for places in [0, 3, 5] {
                let expected = String(format: "%.\(places)f", value)
                let got = DecimalText.fixed(value, places: places)
                // A tie in the last place may round either way; nothing else may differ.
                let close = abs((Double(got) ?? .nan) - (Double(expected) ?? .nan)) <= pow(10, -Double(places)) * 1.0001
                #expect(got == expected || close, "\(value) with \(places) places: \(got) against printf's \(expected)")
                #expect(got.split(separator: ".").last?.count == (places == 0 ? got.count : places), "\(got)")
            }
        }
        #expect(DecimalText.fixed(-1.5, places: 2) == "-1.50")
        #expect(DecimalText.fixed(-0.0000001, places: 3) == "0.000")
        #expect(DecimalText.fixed(.infinity, places: 3) == "inf")
        for value in [0, 7, 42, 99999, 100000, 1234567, -3] {
            #expect(DecimalText.padded(value, width: 5) == String(format: "%05d", value), "\(value)")
        }
        #expect(HLSLayout.partialSegment(42, part: 3) == "part_00042_3.m4s")
        #expect(HLSLayout.mediaSegment(7) == "segment_00007.m4s")
    }
}
