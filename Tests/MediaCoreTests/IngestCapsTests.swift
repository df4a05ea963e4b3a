import Foundation
import MediaCore
import Testing

/// The NAL-unit and access-unit caps every ingest shares, applied before anything grows: one
/// 8 MiB RTMP message of 1-byte NAL units took the node from 76 MiB to over 17 GB, and 8.7 MB of
/// MPEG-TS full of filler units added 616 MiB over SRT.
@Suite struct IngestCapsTests {
    @Test func splittersStopPastTheCap() {
        let annexB = [UInt8]((0..<2000).flatMap { _ in [0, 0, 1, 0x0C] })
        #expect(H264.annexBUnits(annexB, maximumUnits: 1024) == nil)
        #expect(H264.annexBUnits(annexB, maximumUnits: 2000)?.count == 2000)
        let prefixed = [UInt8]((0..<2000).flatMap { _ in [0, 0, 0, 1, 0x0C] })
        #expect(H264.lengthPrefixedUnits(prefixed, maximumUnits: 1024) == nil)
        #expect(H264.lengthPrefixedUnitCount(prefixed) == 2000)
        #expect(H264.lengthPrefixedUnitCount([0, 0, 0, 9, 1]) == nil)
    }

    @Test func anAccessUnitOfTooManyNALUnitsIsDroppedWhole() {
        var streams = ElementaryStreams()
        let sps: [UInt8] = [0x67, 0x42, 0xC0, 0x1E, 0xDA, 0x02, 0x80, 0xBF, 0xE5, 0x84, 0x00, 0x00, 0x03, 0x00, 0x04, 0x00, 0x00, 0x03, 0x00, 0xF0, 0x3C, 0x58, 0xBA, 0x80]
        let pps: [UInt8] = [0x68, 0xCE, 0x3C, 0x80]
        let first = streams.video(annexB: H264.annexB([sps, pps, [0x65, 0x88, 0x84]]), pts: 0, isKeyframe: true)
        #expect(first.contains { if case .video = $0 { true } else { false } }, "a normal access unit goes through")
        let flood = H264.annexB([[0x65, 0x88, 0x84]] + Array(repeating: [0x0C], count: 1100))
        #expect(streams.video(annexB: flood, pts: 3000, isKeyframe: false).isEmpty)
        #expect(streams.droppedAccessUnits == 1)
    }

    // MARK: The TS guard

    @Test func anEncodersTransportStreamPassesTheGuard() throws {
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../Fixtures/resolution-change.ts").standardized))
        var guardian = TransportStreamGuard()
        // In SRT's message sizes (7 packets), as a publisher sends them.
        for start in stride(from: 0, to: bytes.count, by: 1316) {
            try guardian.inspect(bytes[start..<min(start + 1316, bytes.count)])
        }
    }

    @Test func fillerUnitsInOnePESAreStoppedBeforeTheDemuxer() {
        var guardian = TransportStreamGuard()
        let filler = [UInt8]((0..<1100).flatMap { _ in [0, 0, 1, 0x0C] })
        let stream = TS.program(videoPID: 0x100) + TS.pes(pid: 0x100, streamID: 0xE0, payload: [0, 0, 1, 0x65, 0x88] + filler)
        #expect(throws: TransportStreamGuard.Violation.tooManyNALUnits(pid: 0x100, limit: 1024)) { try guardian.inspect(stream) }
    }

    /// Slices that never start a picture (first_mb_in_slice ≠ 0) keep libavcodec's parser
    /// gathering across PES packets: the guard counts across them too, on a PID the PMT names
    /// H.264 even when its PES says it is audio.
    @Test func slicesThatNeverStartAPictureAreCountedAcrossPESPackets() {
        var limits = TransportStreamGuard.Limits()
        limits.maximumAccessUnitBytes = 64 * 1024
        var guardian = TransportStreamGuard(limits: limits)
        var stream = TS.program(videoPID: 0x101)
        for _ in 0..<40 {
            stream += TS.pes(pid: 0x101, streamID: 0xC0, payload: [0, 0, 1, 0x41, 0x40] + [UInt8](repeating: 0x55, count: 2000))
        }
        #expect(throws: TransportStreamGuard.Violation.accessUnitTooLarge(pid: 0x101, limit: 64 * 1024)) { try guardian.inspect(stream) }
        // The same bytes with pictures that start (first bit set) pass.
        var pictures = TS.program(videoPID: 0x101)
        for _ in 0..<40 {
            pictures += TS.pes(pid: 0x101, streamID: 0xE0, payload: [0, 0, 1, 0x41, 0xC0] + [UInt8](repeating: 0x55, count: 2000))
        }
        var fresh = TransportStreamGuard(limits: limits)
        #expect(throws: Never.self) { try fresh.inspect(pictures) }
    }
}

/// Minimal MPEG-TS packets for the guard's tests (CRCs are not checked by it, so left zero).
enum TS {
    static func packets(pid: UInt16, payload: [UInt8], unitStart: Bool) -> [UInt8] {
        var out: [UInt8] = []
        var rest = payload[...]
        var first = unitStart
        var counter: UInt8 = 0
        repeat {
            let take = min(184, rest.count)
            var packet: [UInt8] = [0x47, UInt8(pid >> 8) | (first ? 0x40 : 0), UInt8(pid & 0xFF)]
            if take < 184 {
                // Adaptation field stuffing to fill the packet.
                let stuffing = 184 - take - 1
                packet.append(0x30 | counter)
                packet.append(UInt8(stuffing))
                if stuffing > 0 { packet += [0x00] + [UInt8](repeating: 0xFF, count: stuffing - 1) }
            } else {
                packet.append(0x10 | counter)
            }
            packet += rest.prefix(take)
            rest = rest.dropFirst(take)
            out += packet
            first = false
            counter = (counter + 1) & 0x0F
        } while !rest.isEmpty
        return out
    }

    static func section(_ body: [UInt8]) -> [UInt8] {
        let length = body.count - 1 + 4  // after the length field: the rest of the body and the CRC
        return [0x00] + [body[0], 0xB0 | UInt8(length >> 8), UInt8(length & 0xFF)] + body.dropFirst() + [0, 0, 0, 0]
    }

    /// A PAT naming PMT PID 0x1000 and that PMT naming one H.264 PID.
    static func program(videoPID: UInt16) -> [UInt8] {
        let pat = section([0x00, 0x00, 0x01, 0xC1, 0x00, 0x00, 0x00, 0x01, 0xF0, 0x00])
        let pmt = section([0x02, 0x00, 0x01, 0xC1, 0x00, 0x00, 0xE1, 0x00, 0xF0, 0x00,
                           0x1B, 0xE0 | UInt8(videoPID >> 8), UInt8(videoPID & 0xFF), 0xF0, 0x00])
        return packets(pid: 0, payload: pat, unitStart: true) + packets(pid: 0x1000, payload: pmt, unitStart: true)
    }

    static func pes(pid: UInt16, streamID: UInt8, payload: [UInt8]) -> [UInt8] {
        let header: [UInt8] = [0, 0, 1, streamID, 0, 0, 0x80, 0x80, 5, 0x21, 0, 1, 0, 1]
        return packets(pid: pid, payload: header + payload, unitStart: true)
    }
}
