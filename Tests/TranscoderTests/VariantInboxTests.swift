import FFmpegBridge
import Foundation
import MediaCore
import Testing
import TestSupport
@testable import Transcoder

/// A variant's inbox while its queue is behind: pictures are what it is bounded and measured in;
/// audio, which comes more often, has room of its own and does not count as lag.
@Suite struct VariantInboxTests {
    @Test func audioHasItsOwnRoomAndDoesNotCountAsPicturesBehind() throws {
        let video = try #require(try MediaInput(url: fixture("720p30-h264-aac.mp4")).bestVideoStream)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("inbox-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let variant = Variant(streamGuid: "live/inbox_1", level: 1, width: 1280, height: 720, bitRate: 2_000_000)
        let pipeline = VariantPipeline(variant: variant, work: .passthrough(try video.parameters.copy(), timeBase: video.timeBase),
                                       output: VariantOutput(paths: .init(mp4: nil, hlsDirectory: directory), audio: nil, frameRate: 30),
                                       policy: .dropUntilKeyframe, inboxCapacity: 2)
        let timeBase = Rational(1, 90000)
        pipeline.suspendProcessingForTesting()
        // A second of AAC (48 packets) would have filled a shared inbox many times over.
        let audioRoom = VariantPipeline.audioPacketsPerPicture * 2
        for index in 0..<audioRoom {
            let packet = try Packet(bytes: [0x21, 0x10, UInt8(index)], timeBase: Rational(1, 48000))
            pipeline.submit(.audio(packet))
        }
        #expect(pipeline.queuedFrames == 0, "audio counted as pictures behind")
        // Both picture slots are still free; the third picture finds the inbox full and is dropped.
        for index in 0..<3 {
            let packet = try Packet(bytes: [0, 0, 0, 1, 0x41, UInt8(index)], timeBase: timeBase)
            packet.pts = Int64(index) * 3000
            pipeline.submit(.packet(packet, .none))
        }
        #expect(pipeline.queuedFrames == 2)
        #expect(pipeline.statistics.dropped == 1)
        #expect(pipeline.statistics.framesIn == 2)
        // Audio past its own room is turned away without touching the pictures' count.
        pipeline.submit(.audio(try Packet(bytes: [0x21, 0x10, 0xFF], timeBase: Rational(1, 48000))))
        #expect(pipeline.queuedFrames == 2 && pipeline.statistics.dropped == 1)

        pipeline.resumeProcessingForTesting()
        let group = DispatchGroup()
        pipeline.finish(group: group)
        #expect(group.wait(timeout: .now() + 10) == .success)
        #expect(pipeline.queuedFrames == 0)
    }
}
