import Foundation
import TestSupport
import Testing

/// The CLI as operators and scripts use it: exit codes, messages, output layout.
@Suite(.serialized) struct CommandLineTests {
    @Test func transcodeWritesTheDocumentedLayoutAndSummary() throws {
        let output = temporaryDirectory("cli")
        defer { try? FileManager.default.removeItem(at: output) }
        let result = try runProcess(workerExecutable, ["transcode", "--provision", fixture("provisions/sm1-meta.json"),
                                                       "--input", fixture("720p30-h264-aac.mp4"), "--output", output.path])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("live/stream1_3"))
        #expect(result.stdout.contains("passthrough"))
        let files = Set(try FileManager.default.contentsOfDirectory(atPath: output.path))
        #expect(files == ["stream1_1.mp4", "stream1_2.mp4", "stream1_3.mp4", "hls", "abr.json", "report.json"])
        for level in 1...3 {
            let folder = output.appendingPathComponent("hls/stream1_\(level)").path
            let names = try FileManager.default.contentsOfDirectory(atPath: folder)
            #expect(names.contains("index.m3u8") && names.contains("init.mp4") && names.contains("segment_00000.m4s"))
        }
    }

    @Test(arguments: ["truncated.mp4", "not-media.mp4"])
    func corruptedInputExitsThreeWithAMessage(_ name: String) throws {
        let output = temporaryDirectory("cli-bad")
        defer { try? FileManager.default.removeItem(at: output) }
        let result = try runProcess(workerExecutable, ["transcode", "--provision", fixture("provisions/sm2-3-level.json"),
                                                       "--input", fixture(name), "--output", output.path, "--quiet"])
        #expect(result.status == 3)
        #expect(result.stderr.contains("error: cannot open input") && result.stderr.contains(name))
        #expect(try FileManager.default.contentsOfDirectory(atPath: output.path).isEmpty)
    }

    @Test func invalidProvisionExitsTwoNamingTheJSONPath() throws {
        let result = try runProcess(workerExecutable, ["validate", fixture("provisions/invalid/width-odd.json")])
        #expect(result.status == 2)
        #expect(result.stderr.contains("provision.streams[1].videoParams.videoWidth: must be even (got 853)"))

        let transcode = try runProcess(workerExecutable, ["transcode", "--provision", fixture("provisions/invalid/level-gap.json"),
                                                          "--input", fixture("720p30-h264-aac.mp4"), "--output", "/tmp/never"])
        #expect(transcode.status == 2)
        #expect(transcode.stderr.contains("abrLevel"))
        #expect(!FileManager.default.fileExists(atPath: "/tmp/never"))
    }

    @Test(arguments: [
        ["transcode", "--provision", "x.json", "--input", "y.mp4", "--output", "z", "--top", "sideways"],
        ["transcode", "--provision", "x.json", "--input", "y.mp4", "--output", "z", "--preset", "warp"],
        ["transcode", "--provision", "x.json", "--input", "y.mp4", "--output", "z", "--keyframe-interval", "0"],
        ["transcode", "--provision", "x.json", "--input", "y.mp4", "--output", "z", "--scaler", "nearest"],
        ["transcode", "--provision", "x.json", "--input", "y.mp4", "--output", "z", "--quality", "--quality-every", "0"],
        ["serve", "--encoder-nice", "20"],
        ["transcode", "--input", "y.mp4"],
        ["validate", "/no/such/provision.json"],
        ["frobnicate"],
    ])
    func badArgumentsExitTwo(_ arguments: [String]) throws {
        let result = try runProcess(workerExecutable, arguments)
        #expect(result.status == 2, "\(arguments): \(result.stderr)")
        #expect(!result.stderr.isEmpty)
    }

    @Test func interruptStopsTheRunAndRemovesPartialOutput() throws {
        let output = temporaryDirectory("cli-int")
        defer { try? FileManager.default.removeItem(at: output) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: workerExecutable)
        // veryslow keeps the job running long enough to be interrupted mid-way.
        process.arguments = ["transcode", "--provision", fixture("provisions/sm2-3-level.json"), "--input", fixture("720p30-h264-aac.mp4"),
                             "--output", output.path, "--top", "encode", "--preset", "veryslow", "--quiet"]
        process.standardError = FileHandle.nullDevice
        try process.runDeliveringSignals()
        // Wait until the job has written into its staging folder, then interrupt it.
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline, (try? FileManager.default.contentsOfDirectory(atPath: output.path))?.isEmpty != false {
            Thread.sleep(forTimeInterval: 0.05)
        }
        Thread.sleep(forTimeInterval: 0.3)
        kill(process.processIdentifier, SIGINT)
        #expect(waitForExit(process, timeout: 60), "the worker did not stop after SIGINT")
        #expect(process.terminationReason == .exit)
        #expect(process.terminationStatus == 1)
        #expect(try FileManager.default.contentsOfDirectory(atPath: output.path).isEmpty)
    }

    @Test func validatePrintsTheNormalisedLadder() throws {
        let result = try runProcess(workerExecutable, ["validate", fixture("provisions/sm2-4-level.json")])
        #expect(result.status == 0)
        let lines = result.stdout.split(separator: "\n")
        #expect(lines.first == "stream live/room1/show: 4 variants")
        #expect(lines.filter { $0.hasPrefix("1 ") || $0.hasPrefix("4 ") }.count == 2)
        #expect(result.stdout.contains("426x240"))
    }

    /// `simulate` replays traces through the switching policy against a transcode's real segments.
    @Test func simulateReplaysTracesAgainstATranscodesSegments() throws {
        let output = temporaryDirectory("simulate")
        defer { try? FileManager.default.removeItem(at: output) }
        let made = try runProcess(workerExecutable, ["transcode", "--provision", fixture("provisions/sm2-3-level.json"),
                                                     "--input", fixture("720p30-h264-aac.mp4"), "--output", output.path])
        try #require(made.status == 0, "\(made.stderr)")
        let traces = fixture("traces/hsdpa-3g")
        let result = try runProcess(workerExecutable, ["simulate", output.path, "--trace", traces + "/report.2010-09-13_1003CEST.json",
                                                       "--trace", traces + "/report.2010-12-21_1200CET.json", "--json"])
        #expect(result.status == 0, "\(result.stderr)")
        let rows = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [[String: Any]])
        #expect(rows.count == 2)
        for row in rows {
            #expect(row["seconds"] as? Double == 120)
            #expect((row["deliveredKbps"] as? Int ?? 0) > 0 && (row["oracleKbps"] as? Int ?? 0) > 0)
            #expect((row["maximumLagSeconds"] as? Double ?? 99) <= 2.5)
        }
        #expect(result.stderr.contains("simulate: trace 2/2"), "a progress line")

        let table = try runProcess(workerExecutable, ["simulate", output.path, "--trace", traces + "/report.2010-09-13_1003CEST.json", "--level", "1"])
        #expect(table.status == 0 && table.stdout.contains("delivered/oracle median"), "\(table.stdout)")

        let missing = try runProcess(workerExecutable, ["simulate", output.appendingPathComponent("nothing").path])
        #expect(missing.status == 3 && missing.stderr.contains("abr.json"), "\(missing.stderr)")
        let badLevel = try runProcess(workerExecutable, ["simulate", output.path, "--level", "9", "--trace", traces])
        #expect(badLevel.status == 2 && badLevel.stderr.contains("--level 9"), "\(badLevel.stderr)")
    }
}
