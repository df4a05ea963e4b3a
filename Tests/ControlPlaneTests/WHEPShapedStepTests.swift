import Foundation
import Testing
import TestSupport

/// One Chromium viewer over WHEP while `tc htb` steps its link (the node's UDP port inside a
/// namespace of the test's own): wide, 1.3 Mbit/s, 650 kbit/s, wide. Chromium's own getStats
/// says what it decoded; the node's job view says where it put the viewer.
@Suite(.serialized) struct WHEPShapedStepTests {
    struct Sample {
        var time: Double
        var width: Int
        var frames: Int
        var freezes: Double
        var pictureLossIndications: Int
    }

    @Test func chromiumFollowsAStepDownAndBackUp() throws {
        let namespace = try NetworkNamespace()
        try namespace.addNetwork()
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("whep-step-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        // The rungs the steps fall between (ShapedLinkTests' ladder): about 1.7, 0.95 and 0.4 Mbit/s with audio.
        let provision = folder.appendingPathComponent("provision.json")
        try Data(ShapedLinkTests.stepLadder.utf8).write(to: provision)
        let node = try ServeProcess(dataDirectory: folder.appendingPathComponent("data"),
                                    arguments: ["--provision", provision.path, "--publish-loop", fixture("720p30-h264-aac.mp4")],
                                    environment: ServeTests.credentials, launcher: namespace.launcher)
        defer { node.stop() }
        let webrtcPort = try #require(node.output.firstMatch(of: /media on UDP (\d+)/).flatMap { Int($0.output.1) })
        let ready = node.waitFor(timeout: 40) {
            let playlist = try? node.http("GET", "/hls/live/stream1/stream1_1/index.m3u8")
            return playlist?.status == 200 && (playlist?.body.components(separatedBy: "#EXTINF").count ?? 0) >= 2
        }
        try #require(ready, "the ladder never ran: \(node.log.suffix(2000))")
        // Media leaves the node from its UDP port: that is the viewer's link.
        let link = try namespace.shape(matching: [["ip", "protocol", "17", "0xff", "match", "ip", "sport", "\(webrtcPort)", "0xffff"]],
                                       kilobits: 100_000, queuePackets: 100)

        let statsFile = folder.appendingPathComponent("chromium.jsonl")
        FileManager.default.createFile(atPath: statsFile.path, contents: nil)
        let chromium = Process()
        chromium.executableURL = URL(fileURLWithPath: namespace.launcher[0])
        let script = fixturesDirectory.deletingLastPathComponent().appendingPathComponent("Tests/Peers/chromium-whep-check.py").path
        chromium.arguments = Array(namespace.launcher.dropFirst()) + ["/usr/bin/python3", script, node.httpBase + "/play/live/stream1_1", "100", "0"]
        chromium.standardOutput = try FileHandle(forWritingTo: statsFile)
        chromium.standardError = FileHandle.nullDevice
        try chromium.runDeliveringSignals()
        defer { stopProcess(chromium, signal: SIGTERM, grace: 5) }

        func samples() -> [Sample] {
            ((try? String(contentsOf: statsFile, encoding: .utf8)) ?? "").split(separator: "\n").compactMap { line in
                guard let row = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], let time = row["t"] as? Double else { return nil }
                return Sample(time: time, width: row["frameWidth"] as? Int ?? 0, frames: row["framesDecoded"] as? Int ?? 0,
                              freezes: row["totalFreezesDuration"] as? Double ?? 0, pictureLossIndications: row["pliCount"] as? Int ?? 0)
            }
        }
        /// Seconds until Chromium decodes pictures of `width` (nil: not within `timeout`).
        func seconds(until condition: @escaping (Int) -> Bool, timeout: Double) -> Double? {
            let start = Date()
            let from = samples().count
            let met = waitUntil(timeout: timeout, every: 0.25) { samples().dropFirst(from).contains { condition($0.width) } }
            return met ? Date().timeIntervalSince(start) : nil
        }

        let top = seconds(until: { $0 == 1280 }, timeout: 30)
        try #require(top != nil, "Chromium never showed the top: \(((try? String(contentsOf: statsFile, encoding: .utf8)) ?? "").prefix(1500)) \(node.log.suffix(3000))")
        Thread.sleep(forTimeInterval: 5)
        let freezesBefore = samples().last?.freezes ?? 0
        try namespace.setRate(link, kilobits: 1300)
        let down = seconds(until: { $0 > 0 && $0 < 1280 }, timeout: 12)
        Thread.sleep(forTimeInterval: max(0, 12 - (down ?? 12)))
        let freezesAt650 = samples().last?.freezes ?? 0
        try namespace.setRate(link, kilobits: 650)
        let lowest = seconds(until: { $0 == 640 }, timeout: 15)
        Thread.sleep(forTimeInterval: max(0, 12 - (lowest ?? 15)))
        let freezesAtWide = samples().last?.freezes ?? 0
        try namespace.setRate(link, kilobits: 100_000)
        let opened = samples().count
        let up = seconds(until: { $0 == 1280 }, timeout: 35)
        // The first move up: the first picture wider than the lowest rung after the link opened.
        let firstUp = samples().dropFirst(opened).first { $0.width > 640 }.map { $0.time - (samples().dropFirst(opened).first?.time ?? $0.time) }
        let all = samples()
        let freezes = (all.last?.freezes ?? 0) - freezesBefore
        let summary = "down \(down.map { String(format: "%.1f", $0) } ?? "never") s, to 360p \(lowest.map { String(format: "%.1f", $0) } ?? "never") s, "
            + "frozen at 1.3 Mbit/s \(String(format: "%.1f", freezesAt650 - freezesBefore)) s, at 650 kbit/s \(String(format: "%.1f", freezesAtWide - freezesAt650)) s, "
            + "first up \(firstUp.map { String(format: "%.1f", $0) } ?? "never") s, to the top \(up.map { String(format: "%.1f", $0) } ?? "never") s, frozen \(String(format: "%.2f", freezes)) s; widths "
            + all.map { "\($0.width)" }.joined(separator: " ")
        print("WHEP step: \(summary)")
        let moves = node.log.split(separator: "\n").filter { $0.contains("moves to another level") || $0.contains("skips") || $0.contains("WebRTC viewer") }
        print("WHEP step, the node's moves:\n" + moves.suffix(30).joined(separator: "\n"))
        // The issue's goals: down decided within 2 s of a drop, up within 15 s of the recovery.
        // A move lands at the target's next aligned IDR (2 s grid), and the picture reaches
        // Chromium's decoder a moment later: 2.5 s more than the decision is allowed.
        #expect(down != nil && down! <= 4.5, "\(summary)")
        #expect(lowest != nil && lowest! <= 4.5, "\(summary)")
        #expect(firstUp != nil && firstUp! <= 17.5, "\(summary)")
        #expect(up != nil, "\(summary)")
        // A WebRTC viewer moved down gets nothing more of the old rung, and the picture holds
        // until the target's IDR: up to a keyframe interval (2 s), plus the IDR's way through the
        // narrowed link and the decoder, 3 s a drop at most. Moves up cost nothing (measured:
        // 0.0 s since a move up no longer waits a keyframe interval for an IDR already gone by).
        #expect(freezes <= 6, "\(summary)")
        // Pictures kept coming throughout: the decoded count never stood still for long.
        let stalls = zip(all, all.dropFirst()).filter { $1.frames == $0.frames && $1.time > (top ?? 0) }.count
        #expect(stalls <= 8, "half-seconds without a new picture: \(stalls); \(summary)")
    }
}
