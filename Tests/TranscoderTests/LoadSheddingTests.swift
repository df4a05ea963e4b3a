import FFmpegBridge
import Foundation
import MediaCore
import Testing
import TestSupport
@testable import Transcoder

/// Overload: which rungs the node stops encoding, when they come back, and what a shed rung's
/// outputs look like. The policy runs on a clock the tests move; the engine test feeds a live job
/// from the bundled clip without a network.
@Suite struct LoadSheddingPolicyTests {
    /// Two jobs with levels 2 and 3 encoded (the top passed through, so not offered).
    func loads(queued: [RungID: Int] = [:], dropped: [RungID: Int] = [:]) -> [RungLoad] {
        ["live/a", "live/b"].flatMap { job in
            [(3, 0), (2, 1)].map { level, fromBottom in
                let rung = RungID(job: job, level: level)
                return RungLoad(rung: rung, fromBottom: fromBottom, leastQueued: queued[rung] ?? 0, dropped: dropped[rung] ?? 0)
            }
        }
    }

    /// Samples every quarter second from `start` to `end`; the changes with their times.
    func run(_ policy: inout SheddingPolicy, from start: Double, to end: Double, cpuLoad: Double = 1, untilChange: Bool = false,
             loads: (Double) -> [RungLoad]) -> [(time: Double, change: SheddingPolicy.Change)] {
        var changes: [(time: Double, change: SheddingPolicy.Change)] = []
        var now = start
        while now < end {
            if let change = policy.observe(now: now, loads: loads(now), cpuLoad: cpuLoad) {
                changes.append((now, change))
                if untilChange { break }
            }
            now += 0.25
        }
        return changes
    }

    @Test func theLowestRungOfEveryJobGoesBeforeAnySecondLowestAndTheTopNever() {
        var policy = SheddingPolicy()
        // Both second-lowest rungs behind: whichever rung lags, one rung goes per window, lowest first.
        let behind = [RungID(job: "live/a", level: 2): 20, RungID(job: "live/b", level: 2): 20]
        let changes = run(&policy, from: 0, to: 30) { _ in loads(queued: behind) }
        #expect(changes.map(\.change) == [.shed(RungID(job: "live/a", level: 3)), .shed(RungID(job: "live/b", level: 3)),
                                          .shed(RungID(job: "live/a", level: 2)), .shed(RungID(job: "live/b", level: 2))])
        #expect(changes.map(\.time) == [2, 4, 6, 8])
        // A top offered by mistake (an encoded level 1) is still never shed.
        var topOnly = SheddingPolicy()
        let top = RungLoad(rung: RungID(job: "live/c", level: 1), fromBottom: 0, leastQueued: 50, dropped: 0)
        #expect(run(&topOnly, from: 0, to: 10) { _ in [top] }.isEmpty)
    }

    @Test func onlyPressureThroughMostOfAWindowSheds() {
        let rung = RungID(job: "live/b", level: 2)
        // A job starting: drops and a full inbox for a second, then it keeps up.
        var starting = SheddingPolicy()
        #expect(run(&starting, from: 0, to: 20) { now in now < 1 ? loads(queued: [rung: 32], dropped: [rung: Int(now * 100)]) : loads() }.isEmpty)
        // Behind three samples of four: shed after one window.
        var mostly = SheddingPolicy()
        let flicker = run(&mostly, from: 0, to: 2.1) { now in Int(now * 4) % 4 == 3 ? loads() : loads(queued: [rung: 5]) }
        #expect(flicker.map(\.change) == [.shed(RungID(job: "live/a", level: 3))])
        // Behind every other sample: it copes, nothing is shed.
        var half = SheddingPolicy()
        #expect(run(&half, from: 0, to: 20) { now in Int(now * 4) % 2 == 0 ? loads(queued: [rung: 5]) : loads() }.isEmpty)
        // Queued frames under the threshold are normal pipelining.
        var pipelining = SheddingPolicy()
        #expect(run(&pipelining, from: 0, to: 20) { _ in loads(queued: [rung: 2]) }.isEmpty)
    }

    @Test func aRungComesBackAfterCalmWithRoomLastShedFirst() {
        var policy = SheddingPolicy()
        let rung = RungID(job: "live/a", level: 2)
        let shed = run(&policy, from: 0, to: 4.1) { _ in loads(queued: [rung: 10]) }
        #expect(shed.map(\.change) == [.shed(RungID(job: "live/a", level: 3)), .shed(RungID(job: "live/b", level: 3))])
        // Calm, but the machine is busy: nothing comes back.
        #expect(run(&policy, from: 4.25, to: 40, cpuLoad: 0.9) { _ in loads() }.isEmpty)
        // Room: after the calm period, the rung shed last returns first, then the other after another calm period.
        let restored = run(&policy, from: 40, to: 80, cpuLoad: 0.5) { _ in loads() }
        #expect(restored.map(\.change) == [.restore(RungID(job: "live/b", level: 3)), .restore(RungID(job: "live/a", level: 3))])
        #expect(restored.count == 2 && restored[1].time - restored[0].time >= policy.calmToRestore)
        #expect(policy.shed.isEmpty)
    }

    @Test func aRungShedAgainSoonAfterItsReturnWaitsLongerNextTime() {
        var policy = SheddingPolicy()
        let rung = RungID(job: "live/a", level: 2)
        _ = run(&policy, from: 0, to: 2.1) { _ in loads(queued: [rung: 10]) }
        let firstReturn = run(&policy, from: 2.25, to: 60, cpuLoad: 0.3, untilChange: true) { _ in loads() }
        let returned = try! #require(firstReturn.first?.time)
        // Back and at once too much again: shed again, and the next return needs twice the calm.
        let again = run(&policy, from: returned + 0.25, to: returned + 2.5, untilChange: true) { _ in loads(queued: [rung: 10]) }
        let shedAgain = try! #require(again.first?.time)
        let secondReturn = run(&policy, from: shedAgain + 0.25, to: shedAgain + 200, cpuLoad: 0.3, untilChange: true) { _ in loads() }
        let back = try! #require(secondReturn.first?.time)
        #expect(back - shedAgain >= 2 * policy.calmToRestore, "first calm \(returned - 2) s, then \(back - shedAgain) s")
    }

    @Test func rungsOfEndedJobsLeaveTheBooks() {
        var policy = SheddingPolicy()
        let changes = run(&policy, from: 0, to: 2.1) { _ in loads(queued: [RungID(job: "live/b", level: 2): 9]) }
        #expect(changes.count == 1 && policy.shed == [RungID(job: "live/a", level: 3)])
        let onlyB = loads().filter { $0.rung.job == "live/b" }
        _ = policy.observe(now: 3, loads: onlyB, cpuLoad: 1)
        #expect(policy.shed.isEmpty)
    }
}

@Suite struct LoadSheddingEngineTests {
    /// The bundled clip as a publisher's access units (NAL units, 90 kHz), in decode order.
    static func accessUnits() throws -> (sps: [UInt8], pps: [UInt8], units: [(nalUnits: [[UInt8]], ticks: Int64, key: Bool)]) {
        let input = try MediaInput(url: fixture("720p30-h264-aac.mp4"))
        let video = try #require(input.bestVideoStream)
        let sets = H264.parameterSets(fromExtradata: video.parameters.extradata)
        var units: [(nalUnits: [[UInt8]], ticks: Int64, key: Bool)] = []
        while case let .packet(packet) = try input.read() {
            guard packet.streamIndex == video.index, let nals = H264.lengthPrefixedUnits(packet.bytes) else { continue }
            units.append((nals.map(Array.init), video.timeBase.rescale(packet.pts, to: Rational(1, 90000)), packet.isKeyframe))
        }
        return (try #require(sets.sps.first), try #require(sets.pps.first), units)
    }

    @Test func aShedRungStopsOnASegmentBoundaryAndReturnsOnTheGridWithADiscontinuity() throws {
        let ladder = try ProvisionParser.parse(try Data(contentsOf: fixturesDirectory.appendingPathComponent("provisions/sm2-3-level.json")))
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("shed-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let shedder = LoadShedder(policy: SheddingPolicy(), runsTimer: false)
        // The clip: 120 frames at 30 fps, an IDR every 60; the top passes through, so the grid follows it.
        let job = LiveLadderJob(ladder: ladder, hlsDirectory: directory, options: TranscodeOptions(), grace: 5, hlsWindow: 100,
                                coreBudget: CoreBudget(cores: 2), loadShedder: shedder)
        job.start()
        defer {
            job.stop()
            job.waitUntilEnded(timeout: 30)
        }
        let (sps, pps, units) = try Self.accessUnits()
        let source = try LiveSource(url: "test", video: try #require(VideoFormat(sps: sps, pps: pps, frameRate: 30)), audio: nil)
        #expect(job.attach(source, publisher: "test"))
        let lowest = ladder.variants.map(\.level).max()!
        // Push at a pace the encoders keep up with: the test is about shedding, not overload.
        func push(_ range: Range<Int>) {
            for index in range {
                let unit = units[index % units.count]
                let loop = Int64(index / units.count) * (units.last!.ticks + 3000)
                source.pushVideo(nalUnits: unit.nalUnits, time: MediaTime(ticks: unit.ticks + loop, timeBase: LiveSource.videoTimeBase), isKeyframe: unit.key)
                _ = waitUntil(timeout: 10, every: 0.01) {
                    let variants = job.status.variants
                    guard let top = variants.first(where: \.passthrough), top.framesIn > index else { return false }
                    // Every encoded rung has taken this picture (encoded, shed or dropped) and kept
                    // up: the top gets it before the decoder runs, so its count alone was a race.
                    return variants.allSatisfy {
                        $0.passthrough || ($0.framesIn + $0.shedFrames + $0.droppedFrames > index && $0.framesOut + 1 >= $0.framesIn)
                    }
                }
            }
        }
        push(0..<75)
        // The shedder offers the rungs below the top, bottom first.
        let offered = job.sampleRungLoads().sorted { $0.fromBottom < $1.fromBottom }.map(\.rung.level)
        #expect(offered == ladder.variants.map(\.level).filter { $0 > 1 }.sorted(by: >))

        job.setShed(true, level: lowest)
        push(75..<150)
        let during = try #require(job.status.variants.first { $0.abrLevel == lowest })
        #expect(during.shed)
        #expect(during.shedFrames >= 70, "\(during.shedFrames) frames shed")
        let sibling = try #require(job.status.variants.first { $0.abrLevel == lowest - 1 })
        #expect(sibling.framesOut >= 140 && !sibling.shed, "the next rung goes on: \(sibling.framesOut) frames")

        job.setShed(false, level: lowest)
        push(150..<240)
        let after = try #require(job.status.variants.first { $0.abrLevel == lowest })
        #expect(!after.shed)
        // Restored at frame 150, back at the next grid IDR (frame 180): 30 more frames shed, 60 encoded.
        #expect(after.shedFrames == during.shedFrames + 30, "\(during.shedFrames) → \(after.shedFrames)")
        #expect(after.framesOut >= during.framesOut + 58, "back on the grid: \(during.framesOut) → \(after.framesOut)")
        job.stop()
        #expect(job.waitUntilEnded(timeout: 30))
        let playlist = try String(contentsOf: directory.appendingPathComponent(HLSLayout(ladderGuid: ladder.streamGuid).variantPlaylist(level: lowest)), encoding: .utf8)
        #expect(playlist.contains("#EXT-X-DISCONTINUITY"), "\(playlist)")
        // No segment spans the gap: every one is at most a keyframe interval.
        let durations = playlist.split(separator: "\n").filter { $0.hasPrefix("#EXTINF:") }
            .compactMap { Double($0.dropFirst(8).split(separator: ",").first ?? "") }
        #expect(!durations.isEmpty && durations.allSatisfy { $0 <= 2.05 }, "\(durations)")
        #expect(job.events.contains { $0.kind == "rungShed" } && job.events.contains { $0.kind == "rungRestored" })
    }
}
