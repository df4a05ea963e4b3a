import Foundation
import MediaCore
import RTSPServer
import TestSupport
import Testing

/// Live HLS that outlives what happens to the node: a restart, and a disk that fills up.
@Suite(.serialized) struct LiveHLSDurabilityTests {
    static func playlist(_ url: URL) throws -> (sequence: Int, segments: [String], text: String) {
        let text = try String(contentsOf: url, encoding: .utf8)
        let sequence = text.split(separator: "\n").first { $0.hasPrefix("#EXT-X-MEDIA-SEQUENCE:") }
            .flatMap { Int($0.dropFirst("#EXT-X-MEDIA-SEQUENCE:".count)) } ?? -1
        return (sequence, text.split(separator: "\n").filter { $0.hasSuffix(".m4s") }.map(String.init), text)
    }

    /// A new job in the same folder (here: the node restarted) carries the media sequence and
    /// segment names on, so a player or cache never sees them go back or get reused.
    @Test func numberingCarriesOnAcrossARestart() throws {
        let data = FileManager.default.temporaryDirectory.appendingPathComponent("abr-restart-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: data) }
        var first: (sequence: Int, segments: [String], text: String)
        do {
            let node = try LiveTestNode(grace: 1, dataDirectory: data)
            let publisher = try FFmpegPublisher(url: node.publishURL("live/stream1_1"), transport: "tcp", seconds: 7)
            #expect(waitForExit(publisher.process, timeout: 40), "\(publisher.errorText)")
            first = try Self.playlist(node.hls("stream1_3/index.m3u8"))
        }
        try #require(first.segments.count >= 2, "first run wrote \(first.segments)")
        let node = try LiveTestNode(grace: 1, dataDirectory: data)
        let publisher = try FFmpegPublisher(url: node.publishURL("live/stream1_1"), transport: "tcp", seconds: 6)
        #expect(waitForExit(publisher.process, timeout: 40), "\(publisher.errorText)")
        let deadline = Date().addingTimeInterval(10)
        var second = try Self.playlist(node.hls("stream1_3/index.m3u8"))
        while second.segments.isEmpty || second.segments == first.segments, Date() < deadline {
            Thread.sleep(forTimeInterval: 0.2)
            second = try Self.playlist(node.hls("stream1_3/index.m3u8"))
        }
        #expect(second.sequence >= first.sequence + first.segments.count, "media sequence went from \(first.sequence) to \(second.sequence)")
        #expect(Set(second.segments).isDisjoint(with: first.segments), "segment names reused: \(second.segments) after \(first.segments)")
        #expect(second.text.contains("#EXT-X-DISCONTINUITY\n"), "the restart must be marked")
        #expect(second.text.contains("init_1.mp4"))
        for name in second.segments { #expect(FileManager.default.fileExists(atPath: node.hls("stream1_3/\(name)").path)) }
        for name in first.segments { #expect(!FileManager.default.fileExists(atPath: node.hls("stream1_3/\(name)").path), "\(name) left behind") }
    }

    /// A full disk costs segments, not the job: writes that fail are counted and skipped, and
    /// HLS carries on (after a discontinuity) once there is room again.
    @Test func aFullDiskSkipsSegmentsAndTheJobCarriesOn() throws {
        let data = FileManager.default.temporaryDirectory.appendingPathComponent("abr-full-\(UUID().uuidString.prefix(8))")
        let mountPoint = data.appendingPathComponent("hls/live/stream1")
        try FileManager.default.createDirectory(at: mountPoint, withIntermediateDirectories: true)
        // Room for the playlists and init segments, not for a 2 s segment of the top.
        let mounted = try runProcess("mount", ["-t", "tmpfs", "-o", "size=160k", "tmpfs", mountPoint.path])
        try #require(mounted.status == 0, "this test needs to mount a tmpfs (root): \(mounted.stderr)")
        defer {
            _ = try? runProcess("umount", ["-l", mountPoint.path])
            try? FileManager.default.removeItem(at: data)
        }
        let node = try LiveTestNode(grace: 5, dataDirectory: data)
        let publisher = try FFmpegPublisher(url: node.publishURL("live/stream1_1"), transport: "tcp", seconds: 16)
        let job = try #require(node.node.job("live/stream1"))
        var deadline = Date().addingTimeInterval(20)
        while (job.status.variants.first?.segmentWriteFailures ?? 0) < 2, Date() < deadline { Thread.sleep(forTimeInterval: 0.2) }
        let failing = job.status
        #expect((failing.variants.first?.segmentWriteFailures ?? 0) >= 2, "\(failing.variants.map(\.segmentWriteFailures))")
        #expect(failing.state == .running)
        #expect(node.waitUntilPlayable(["live/stream1_3"]), "RTSP output goes on: \(publisher.errorText)")

        let grown = try runProcess("mount", ["-o", "remount,size=64m", mountPoint.path])
        try #require(grown.status == 0, "\(grown.stderr)")
        let failuresThen = failing.variants.first?.segmentWriteFailures ?? 0
        deadline = Date().addingTimeInterval(15)
        // No top segment fitted yet, so its playlist may not exist.
        var top = (try? Self.playlist(node.hls("stream1_1/index.m3u8"))) ?? (sequence: -1, segments: [], text: "")
        while top.segments.count < 2, Date() < deadline {
            Thread.sleep(forTimeInterval: 0.2)
            top = (try? Self.playlist(node.hls("stream1_1/index.m3u8"))) ?? (sequence: -1, segments: [], text: "")
        }
        #expect(top.segments.count >= 2, "the top's playlist did not carry on: \(top.text)")
        #expect(job.status.state == .running)
        #expect((job.status.variants.first?.segmentWriteFailures ?? 0) <= failuresThen + 1, "writes kept failing after the disk had room")
        for name in top.segments { #expect((try? Data(contentsOf: node.hls("stream1_1/\(name)")).count) ?? 0 > 0) }
        publisher.stop()
    }
}
