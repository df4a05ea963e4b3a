import FFmpegBridge
import Foundation
import MediaCore
import Synchronization
import Testing
import TestSupport
@testable import Transcoder

/// A variant's inbox while its queue is behind: pictures are what it is bounded and measured in;
/// audio, which comes more often, has room of its own and does not count as lag.
@Suite struct VariantInboxTests {
    /// A passed-through variant with room for two pictures, writing HLS into `directory`.
    func passthroughPipeline(directory: URL, priority: EncoderPriority = .normal) throws -> VariantPipeline {
        let video = try #require(try MediaInput(url: fixture("720p30-h264-aac.mp4")).bestVideoStream)
        let variant = Variant(streamGuid: "live/inbox_1", level: 1, width: 1280, height: 720, bitRate: 2_000_000)
        return VariantPipeline(variant: variant, work: .passthrough(try video.parameters.copy(), timeBase: video.timeBase),
                               output: VariantOutput(paths: .init(mp4: nil, hlsDirectory: directory), audio: nil, frameRate: 30, clock: .system),
                               policy: .dropUntilKeyframe, inboxCapacity: 2, priority: priority)
    }

    /// A passed-through top encodes nothing: its queue (HLS, and its players' pictures) keeps the
    /// node's own scheduling when the encoders run in the background; an encoded rung's does not.
    @Test func aPassedThroughTopDoesNotRunAtTheEncodersBackgroundPriority() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("inbox-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let caller = try EncoderThreadTests.ownScheduling()
        let pipeline = try passthroughPipeline(directory: directory, priority: .background)
        let queue = try EncoderThreadTests.scheduling(on: pipeline.runOnQueueForTesting)
        #expect(queue.nice == caller.nice && queue.policy == caller.policy, "the top's queue runs at nice \(queue.nice), policy \(queue.policy)")
        drain(pipeline)
        let encoded = VariantPipeline.Work.encode(H264EncoderSettings(width: 640, height: 360, bitRate: 500_000, timeBase: Rational(1, 90000),
                                                                      frameRate: Rational(30, 1), preset: "veryfast", profile: "high", threads: 1))
        #expect(VariantPipeline.queuePriority(for: encoded, encoders: .background) == .background)
    }

    /// Records the scheduling of the thread each picture reaches the players' stream on.
    final class SchedulingSink: MediaSink, @unchecked Sendable {
        // @unchecked: `seen` is a Mutex.
        let seen = Mutex<[(nice: Int, policy: Int)]>([])
        func setFormats(video: VideoFormat?, audio: AudioFormat?) {}
        func writeVideo(_ nalUnits: [[UInt8]], time: MediaTime, isKeyframe: Bool) {
            if let scheduling = try? EncoderThreadTests.ownScheduling() { seen.withLock { $0.append(scheduling) } }
        }
        func writeAudio(_ frame: [UInt8], time: MediaTime) {}
        func end(reason: String) {}
    }

    /// An encoded rung whose encoder runs in the background hands its pictures to the players
    /// (and HLS) on a thread at the node's own scheduling, in order, every one of them.
    @Test func anEncodedRungHandsItsPicturesToPlayersOffTheEncodersPriority() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("inbox-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let caller = try EncoderThreadTests.ownScheduling()
        let input = try MediaInput(url: fixture("720p30-h264-aac.mp4"))
        let video = try #require(input.bestVideoStream)
        let decoder = try VideoDecoder(stream: video, threads: 1)
        let sink = SchedulingSink()
        let variant = Variant(streamGuid: "live/inbox_2", level: 2, width: 320, height: 180, bitRate: 200_000)
        let settings = H264EncoderSettings(width: 320, height: 180, bitRate: 200_000, timeBase: video.timeBase, frameRate: Rational(30, 1),
                                           preset: "ultrafast", profile: "high", threads: 1)
        let pipeline = VariantPipeline(variant: variant, work: .encode(settings),
                                       output: VariantOutput(paths: .init(mp4: nil, hlsDirectory: directory, hlsWindow: 6, sink: sink),
                                                             audio: nil, frameRate: 30, clock: .system),
                                       policy: .block, inboxCapacity: 4, priority: .background)
        var submitted = 0
        while submitted < 45, case let .packet(packet) = try input.read() {
            guard packet.streamIndex == video.index else { continue }
            try decoder.send(packet)
            while submitted < 45 {
                let frame = try Frame()
                guard case .frame = try decoder.receive(into: frame) else { break }
                pipeline.submit(.frame(frame, KeyframeGrid.Decision(isKeyframe: submitted % 30 == 0, startsSegment: submitted % 30 == 0)))
                submitted += 1
            }
        }
        drain(pipeline)
        #expect(submitted == 45)
        #expect(pipeline.statistics.failure == nil)
        let seen = sink.seen.withLock { $0 }
        #expect(seen.count == submitted, "\(seen.count) of \(submitted) pictures reached the sink")
        #expect(seen.allSatisfy { $0.nice == caller.nice && $0.policy == caller.policy }, "\(Set(seen.map { "\($0.nice)/\($0.policy)" }))")
        #expect(pipeline.statistics.framesOut == submitted)
    }

    func picture(_ index: Int) throws -> Packet {
        let packet = try Packet(bytes: [0, 0, 0, 1, 0x41, UInt8(index)], timeBase: Rational(1, 90000))
        packet.pts = Int64(index) * 3000
        return packet
    }

    func drain(_ pipeline: VariantPipeline) {
        let group = DispatchGroup()
        pipeline.finish(group: group)
        #expect(group.wait(timeout: .now() + 10) == .success)
    }

    @Test func audioHasItsOwnRoomAndDoesNotCountAsPicturesBehind() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("inbox-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let pipeline = try passthroughPipeline(directory: directory)
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
            pipeline.submit(.packet(try picture(index), .none))
        }
        #expect(pipeline.queuedFrames == 2)
        #expect(pipeline.statistics.dropped == 1)
        #expect(pipeline.statistics.framesIn == 2)
        // Audio past its own room is turned away without touching the pictures' count.
        pipeline.submit(.audio(try Packet(bytes: [0x21, 0x10, 0xFF], timeBase: Rational(1, 48000))))
        #expect(pipeline.queuedFrames == 2 && pipeline.statistics.dropped == 1)
        #expect(pipeline.statistics.droppedAudio == 1)

        pipeline.resumeProcessingForTesting()
        drain(pipeline)
        #expect(pipeline.queuedFrames == 0)
    }

    /// The shedder asks for the fewest pictures queued since it last looked: behind all through
    /// an interval is lag, a depth that comes and goes is not.
    @Test func theLeastDepthSinceTheLastLookIsWhatTheShedderSees() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("inbox-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let pipeline = try passthroughPipeline(directory: directory)
        pipeline.suspendProcessingForTesting()
        #expect(pipeline.takeLeastQueuedFrames() == 0)
        pipeline.submit(.packet(try picture(0), .none))
        pipeline.submit(.packet(try picture(1), .none))
        // The interval began empty: two pictures now do not make it an interval behind.
        #expect(pipeline.takeLeastQueuedFrames() == 0)
        // Two pictures from start to end of this one.
        #expect(pipeline.takeLeastQueuedFrames() == 2)
        // The queue catches up and another picture arrives: the interval saw the inbox empty.
        pipeline.resumeProcessingForTesting()
        #expect(waitUntil(timeout: 10, every: 0.01) { pipeline.queuedFrames == 0 })
        pipeline.suspendProcessingForTesting()
        pipeline.submit(.packet(try picture(2), .none))
        #expect(pipeline.queuedFrames == 1)
        #expect(pipeline.takeLeastQueuedFrames() == 0)
        #expect(pipeline.takeLeastQueuedFrames() == 1)
        pipeline.resumeProcessingForTesting()
        drain(pipeline)
    }
}
