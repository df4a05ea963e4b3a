import FFmpegBridge
import Foundation
import MediaCore
import Testing
import TestSupport
@testable import Transcoder

/// What a publisher can make the node hold or allocate: the ingest queue in bytes, and the
/// decoder's picture size (also when an in-band SPS announces a larger one).
@Suite struct IngestLimitsTests {
    @Test func theLiveIngestQueueIsBoundedInBytesNotOnlyInPackets() throws {
        // The bundled 720p clip's parameter sets, as a publisher would announce them.
        let video = try #require(try MediaInput(url: fixture("720p30-h264-aac.mp4")).bestVideoStream)
        let sets = H264.parameterSets(fromExtradata: video.parameters.extradata)
        let (sps, pps) = (try #require(sets.sps.first), try #require(sets.pps.first))
        let format = try #require(VideoFormat(sps: sps, pps: pps, frameRate: 30))
        let source = try LiveSource(url: "test", video: format, audio: nil)
        // 200 access units of 1 MB each (a tenth of the packet cap), nobody reading.
        let unit = [[0x65] + [UInt8](repeating: 0x55, count: 1024 * 1024)]
        for index in 0..<200 { source.pushVideo(nalUnits: unit, time: MediaTime(ticks: Int64(index) * 3000, timeBase: LiveSource.videoTimeBase), isKeyframe: true) }
        var held = 0
        var bytes = 0
        source.end()
        while case let .packet(packet) = try source.read() {
            held += 1
            bytes += packet.size
        }
        #expect(bytes <= LiveSource.capacityBytes, "held \(bytes) bytes")
        #expect(held < 200)
        #expect(source.droppedFrames == 200 - held)
    }

    @Test func aDepacketizedAccessUnitBecomesAnAnnexBPacketAndSplitsBackInPlace() throws {
        let units: [[UInt8]] = [[0x09, 0xf0], [0x65, 0x88, 0x84], [0x41]]
        let packet = try Packet(annexBUnits: units, timeBase: Rational(1, 90000))
        #expect(packet.bytes == [0, 0, 0, 1, 0x09, 0xf0, 0, 0, 0, 1, 0x65, 0x88, 0x84, 0, 0, 0, 1, 0x41])
        #expect(packet.withBytes { H264.accessUnitNALUnits($0)?.map(Array.init) } == units)
        #expect(try Packet(annexBUnits: [], timeBase: Rational(1, 90000)).withBytes { $0.count } == 0)
    }

    @Test func theDecoderRefusesPicturesLargerThanItsLimit() throws {
        let input = try MediaInput(url: fixture("720p30-h264-aac.mp4"))
        let video = try #require(input.bestVideoStream)
        // libavcodec checks the size it is opened with, and every SPS it meets later.
        #expect(throws: FFmpegError.self) { _ = try VideoDecoder(stream: video, threads: 1, maximumPixels: 640 * 360) }
        let frame = try Frame()
        // The same stream with room for it decodes.
        let roomy = try VideoDecoder(stream: video, threads: 1, maximumPixels: 1280 * 720)
        let again = try MediaInput(url: fixture("720p30-h264-aac.mp4"))
        var ok = 0
        while case let .packet(packet) = try again.read(), ok == 0 {
            guard packet.streamIndex == video.index else { continue }
            try roomy.send(packet)
            while case .frame = try roomy.receive(into: frame) { ok += 1 }
        }
        #expect(ok > 0)
    }

    @Test func aLiveJobDecodesAtMostFourTimesItsTopsArea() throws {
        let ladder = try ProvisionParser.parse(try Data(contentsOf: fixturesDirectory.appendingPathComponent("provisions/sm2-3-level.json")))
        let job = LiveLadderJob(ladder: ladder, hlsDirectory: FileManager.default.temporaryDirectory.appendingPathComponent("unused"),
                                options: TranscodeOptions(), sinks: [:])
        #expect(job.maximumDecodedPixels == 4 * 1280 * 720)
    }
}
