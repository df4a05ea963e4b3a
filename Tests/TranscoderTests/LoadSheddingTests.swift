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
                return RungLoad(rung: rung, fromBottom: fromBottom, queued: queued[rung] ?? 0, dropped: dropped[rung] ?? 0)
            }
        }
    }

    @Test func theLowestRungOfEveryJobGoesBeforeAnySecondLowestAndTheTopNever() {
        var policy = SheddingPolicy()
        // Both second-lowest rungs behind: whichever rung lags, one rung goes per settle period, lowest first.
        let behind = [RungID(job: "live/a", level: 2): 20, RungID(job: "live/b", level: 2): 20]
        var shed: [RungID] = []
        var now = 0.0
        while now < 30 {
            if case let .shed(rung) = policy.observe(now: now, loads: loads(queued: behind), cpuLoad: 1) { shed.append(rung) }
            now += 0.25
        }
        #expect(shed == [RungID(job: "live/a", level: 3), RungID(job: "live/b", level: 3),
                         RungID(job: "live/a", level: 2), RungID(job: "live/b", level: 2)])
        // A top offered by mistake (an encoded level 1) is still never shed.
        var topOnly = SheddingPolicy()
        let top = RungLoad(rung: RungID(job: "live/c", level: 1), fromBottom: 0, queued: 50, dropped: 0)
        #expect(topOnly.observe(now: 0, loads: [top], cpuLoad: 1) == nil)
        #expect(topOnly.observe(now: 5, loads: [top], cpuLoad: 1) == nil)
    }

    @Test func aDropShedsAtOnceButAQueueMustStayLongEnough() {
        var policy = SheddingPolicy()
        let rung = RungID(job: "live/b", level: 2)
        #expect(policy.observe(now: 0, loads: loads(), cpuLoad: 0.5) == nil)
        #expect(policy.observe(now: 0.25, loads: loads(dropped: [rung: 3]), cpuLoad: 0.9) == .shed(RungID(job: "live/a", level: 3)))

        var patient = SheddingPolicy()
        let queued = loads(queued: [rung: 10])
        #expect(patient.observe(now: 0, loads: queued, cpuLoad: 1) == nil)
        #expect(patient.observe(now: 0.5, loads: queued, cpuLoad: 1) == nil)
        // A queue that drains in time is not an overload.
        #expect(patient.observe(now: 0.75, loads: loads(), cpuLoad: 1) == nil)
        #expect(patient.observe(now: 1.5, loads: queued, cpuLoad: 1) == nil)
        #expect(patient.observe(now: 2.5, loads: queued, cpuLoad: 1) == .shed(RungID(job: "live/a", level: 3)))
    }

    @Test func aRungComesBackAfterCalmWithRoomLastShedFirst() {
        var policy = SheddingPolicy()
        let rung = RungID(job: "live/a", level: 2)
        _ = policy.observe(now: 0, loads: loads(), cpuLoad: nil)
        #expect(policy.observe(now: 1, loads: loads(dropped: [rung: 1]), cpuLoad: 1) == .shed(RungID(job: "live/a", level: 3)))
        #expect(policy.observe(now: 3, loads: loads(dropped: [rung: 2]), cpuLoad: 1) == .shed(RungID(job: "live/b", level: 3)))
        // Calm, but the CPU is still busy: nothing comes back.
        var now = 3.25
        while now < 30 {
            #expect(policy.observe(now: now, loads: loads(dropped: [rung: 2]), cpuLoad: 0.9) == nil)
            now += 0.25
        }
        // Room: after the calm period counted from the last pressure, the rung shed last returns first.
        var restored: [RungID] = []
        while now < 80 {
            if case let .restore(rung) = policy.observe(now: now, loads: loads(dropped: [rung: 2]), cpuLoad: 0.5) { restored.append(rung) }
            now += 0.25
        }
        #expect(restored == [RungID(job: "live/b", level: 3), RungID(job: "live/a", level: 3)])
        #expect(policy.shed.isEmpty)
    }

    @Test func aRungShedAgainSoonAfterItsReturnWaitsLongerNextTime() {
        var policy = SheddingPolicy()
        let rung = RungID(job: "live/a", level: 2)
        var drops = 0
        func drop() -> [RungLoad] {
            drops += 1
            return loads(dropped: [rung: drops])
        }
        _ = policy.observe(now: 0, loads: loads(), cpuLoad: nil)
        #expect(policy.observe(now: 1, loads: drop(), cpuLoad: 1) == .shed(RungID(job: "live/a", level: 3)))
        func calmUntilRestore(from start: Double) -> Double? {
            var now = start
            while now < start + 400 {
                if case .restore = policy.observe(now: now, loads: loads(dropped: [rung: drops]), cpuLoad: 0.3) { return now - start }
                now += 0.25
            }
            return nil
        }
        let first = try! #require(calmUntilRestore(from: 1.25))
        // Back and immediately too much again: the next return needs twice the calm.
        let back = 1.25 + first
        #expect(policy.observe(now: back + 3, loads: drop(), cpuLoad: 1) == .shed(RungID(job: "live/a", level: 3)))
        let second = try! #require(calmUntilRestore(from: back + 3.25))
        #expect(second >= 2 * policy.calmToRestore - 0.5, "first \(first) s, then \(second) s")
    }

    @Test func rungsOfEndedJobsLeaveTheBooks() {
        var policy = SheddingPolicy()
        _ = policy.observe(now: 0, loads: loads(), cpuLoad: nil)
        #expect(policy.observe(now: 1, loads: loads(dropped: [RungID(job: "live/b", level: 2): 1]), cpuLoad: 1) != nil)
        #expect(policy.shed == [RungID(job: "live/a", level: 3)])
        let onlyB = loads().filter { $0.rung.job == "live/b" }
        _ = policy.observe(now: 2, loads: onlyB, cpuLoad: 1)
        #expect(policy.shed.isEmpty)
    }
}

@Suite struct LoadSheddingEngineTests {
    /// The bundled clip as a publisher's access units (Annex B, 90 kHz), in decode order.
    static func accessUnits() throws -> (sps: [UInt8], pps: [UInt8], units: [(bytes: [UInt8], ticks: Int64, key: Bool)]) {
        let input = try MediaInput(url: fixture("720p30-h264-aac.mp4"))
        let video = try #require(input.bestVideoStream)
        let sets = H264.parameterSets(fromExtradata: video.parameters.extradata)
        var units: [(bytes: [UInt8], ticks: Int64, key: Bool)] = []
        while case let .packet(packet) = try input.read() {
            guard packet.streamIndex == video.index, let nals = H264.lengthPrefixedUnits(packet.bytes) else { continue }
            units.append((H264.annexB(nals.map(Array.init)), video.timeBase.rescale(packet.pts, to: Rational(1, 90000)), packet.isKeyframe))
        }
        return (try #require(sets.sps.first), try #require(sets.pps.first), units)
    }

    @Test func aShedRungStopsOnASegmentBoundaryAndReturnsOnTheGridWithADiscontinuity() throws {
        let ladder = try ProvisionParser.parse(try Data(contentsOf: fixturesDirectory.appendingPathComponent("provisions/sm2-3-level.json")))
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("shed-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let shedder = LoadShedder(policy: SheddingPolicy(), cores: 2, runsTimer: false)
        // The clip: 120 frames at 30 fps, an IDR every 60; the top passes through, so the grid follows it.
        let job = LiveLadderJob(ladder: ladder, hlsDirectory: directory, options: TranscodeOptions(), grace: 5, hlsWindow: 100,
                                coreBudget: CoreBudget(cores: 2), loadShedder: shedder)
        job.start()
        defer {
            job.stop()
            job.waitUntilEnded(timeout: 30)
        }
        let (sps, pps, units) = try Self.accessUnits()
        let source = try LiveSource(url: "test", sps: sps, pps: pps, frameRate: 30, audio: nil)
        #expect(job.attach(source, publisher: "test"))
        let lowest = ladder.variants.map(\.level).max()!
        // Push at a pace the encoders keep up with: the test is about shedding, not overload.
        func push(_ range: Range<Int>) {
            for index in range {
                let unit = units[index % units.count]
                let loop = Int64(index / units.count) * (units.last!.ticks + 3000)
                source.pushVideo(annexB: unit.bytes, ticks: unit.ticks + loop, isKeyframe: unit.key)
                _ = waitUntil(timeout: 10, every: 0.01) {
                    let variants = job.status.variants
                    guard let top = variants.first(where: \.passthrough), top.framesIn > index else { return false }
                    return variants.allSatisfy { $0.passthrough || $0.framesOut + 1 >= $0.framesIn }
                }
            }
        }
        push(0..<75)
        // The shedder offers the rungs below the top, bottom first.
        let offered = job.rungLoads.sorted { $0.fromBottom < $1.fromBottom }.map(\.rung.level)
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
        let playlist = try String(contentsOf: directory.appendingPathComponent(LiveLadderJob.variantPlaylistPath(ladder: ladder, level: lowest)), encoding: .utf8)
        #expect(playlist.contains("#EXT-X-DISCONTINUITY"), "\(playlist)")
        // No segment spans the gap: every one is at most a keyframe interval.
        let durations = playlist.split(separator: "\n").filter { $0.hasPrefix("#EXTINF:") }
            .compactMap { Double($0.dropFirst(8).split(separator: ",").first ?? "") }
        #expect(!durations.isEmpty && durations.allSatisfy { $0 <= 2.05 }, "\(durations)")
        #expect(job.events.contains { $0.kind == "rungShed" } && job.events.contains { $0.kind == "rungRestored" })
    }
}
