import Dispatch
import Foundation
import Synchronization

/// One encoded rung of one job, as the shedder ranks it.
public struct RungID: Hashable, Sendable, CustomStringConvertible {
    public var job: String
    public var level: Int

    public init(job: String, level: Int) {
        self.job = job
        self.level = level
    }

    public var description: String { "\(job) level \(level)" }
}

/// What one sample of the node's encoders saw, for one rung that may be shed.
public struct RungLoad: Sendable, Equatable {
    public var rung: RungID
    /// Rungs from the bottom of its ladder: 0 is the job's lowest rung.
    public var fromBottom: Int
    /// The fewest pictures its inbox held since the last sample (the one being encoded counts).
    public var leastQueued: Int
    /// Frames it dropped so far (its encoder fell a whole inbox behind).
    public var dropped: Int

    public init(rung: RungID, fromBottom: Int, leastQueued: Int, dropped: Int) {
        self.rung = rung
        self.fromBottom = fromBottom
        self.leastQueued = leastQueued
        self.dropped = dropped
    }
}

/// When the node cannot encode everything in real time, which rungs stop, and when they come back.
///
/// A value driven by the caller's clock (`observe(now:...)`), so it is tested without sleeping.
/// A sample is under pressure when an encoder is behind: a rung's inbox held
/// `queuedFramesForPressure` pictures or more (100 ms at 30 fps) all through the interval since the
/// last sample, or a rung dropped frames since then. The least depth over the interval, not the
/// depth at the sample: at 80 % of the machine, a dozen rungs' inboxes flicker to 3 pictures and
/// back all the time (a keyframe, the kernel's time slices), and a sampled depth shed rungs that
/// were keeping up. When most samples (`pressuredShare`) of a whole `pressureWindow` are under
/// pressure, one rung is shed, the lowest of the node (the bottom rung of every job before any
/// job's second-lowest), and the next decision waits for a fresh window. A moment of pressure (a
/// job starting, a burst) sheds nothing. After `calmToRestore` seconds without any pressure, and
/// with the machine's CPU under `restoreBelowLoad`, the rung shed last comes back; a rung shed
/// again within a minute of its return doubles the calm needed next time, so a node at its limit
/// does not oscillate. The top (level 1) is never shed.
public struct SheddingPolicy: Sendable {
    public var queuedFramesForPressure = 3
    public var pressureWindow = 2.0
    public var pressuredShare = 0.75
    public var calmToRestore = 15.0
    public var maximumCalmToRestore = 300.0
    /// Restoring needs the machine's CPU use (fraction of all cores) under this.
    public var restoreBelowLoad = 0.85

    public enum Change: Sendable, Equatable {
        case shed(RungID)
        case restore(RungID)
    }

    /// Rungs shed now, in the order they were shed.
    public private(set) var shed: [RungID] = []
    private var samples: [(time: Double, pressured: Bool)] = []
    /// The first sample of the current decision window (reset by every change).
    private var windowStart: Double?
    private var calmSince: Double?
    private var lastDropped: [RungID: Int] = [:]
    private var calmNeeded: Double?
    private var restoredAt: [RungID: Double] = [:]

    public init() {}

    /// One sample. `loads` covers every rung that may be shed (shed or not); `cpuLoad` is the
    /// machine's CPU use as a fraction of its cores, when known.
    public mutating func observe(now: Double, loads: [RungLoad], cpuLoad: Double?) -> Change? {
        let known = Set(loads.map(\.rung))
        // Rungs of ended jobs leave the books.
        shed.removeAll { !known.contains($0) }
        lastDropped = lastDropped.filter { known.contains($0.key) }
        restoredAt = restoredAt.filter { known.contains($0.key) }

        var pressured = false
        for load in loads where !shed.contains(load.rung) {
            if load.dropped > (lastDropped[load.rung] ?? load.dropped) || load.leastQueued >= queuedFramesForPressure { pressured = true }
        }
        for load in loads { lastDropped[load.rung] = load.dropped }

        if windowStart == nil { windowStart = now }
        samples.append((now, pressured))
        samples.removeAll { $0.time <= now - pressureWindow }
        if pressured {
            calmSince = nil
        } else if calmSince == nil {
            calmSince = now
        }

        if now - windowStart! >= pressureWindow,
           Double(samples.filter(\.pressured).count) >= pressuredShare * Double(samples.count) {
            let candidates = loads.filter { !shed.contains($0.rung) && $0.rung.level > 1 }
                .sorted { ($0.fromBottom, -$0.rung.level, $0.rung.job) < ($1.fromBottom, -$1.rung.level, $1.rung.job) }
            guard let victim = candidates.first?.rung else { return nil }
            shed.append(victim)
            if let restored = restoredAt.removeValue(forKey: victim), now - restored < 60 {
                calmNeeded = min(maximumCalmToRestore, 2 * (calmNeeded ?? calmToRestore))
            }
            startWindow(at: now)
            return .shed(victim)
        }

        guard !pressured, let last = shed.last, let calm = calmSince, now - calm >= (calmNeeded ?? calmToRestore),
              now - windowStart! >= pressureWindow, (cpuLoad ?? 0) < restoreBelowLoad else { return nil }
        shed.removeLast()
        restoredAt[last] = now
        calmSince = now
        startWindow(at: now)
        return .restore(last)
    }

    private mutating func startWindow(at now: Double) {
        samples.removeAll()
        windowStart = now
    }
}

/// A job whose lower rungs the node may shed.
public protocol SheddableJob: AnyObject, Sendable {
    /// Every rung that may be shed, with what its inbox held since the last call and what it
    /// dropped; each call starts a new interval.
    func sampleRungLoads() -> [RungLoad]
    func setShed(_ shed: Bool, level: Int)
}

/// The node's shedder: samples every registered job's encoders four times a second and applies
/// `SheddingPolicy`'s decisions. One per process (`node`); tests drive their own with `sample(now:)`.
public final class LoadShedder: Sendable {
    private struct State {
        var policy: SheddingPolicy
        var jobs: [ObjectIdentifier: any SheddableJob] = [:]
        var timer: DispatchSourceTimer?
        /// The last /proc/stat reading: all jiffies, busy jiffies.
        var lastCPU: (total: Double, busy: Double)?
        /// CPU use smoothed over a few seconds: a quarter-second sample is too noisy to restore on.
        var smoothedLoad: Double?
        var shedTotal = 0
    }

    private let state: Mutex<State>
    private let runsTimer: Bool

    public static let node = LoadShedder(policy: SheddingPolicy())

    /// - Parameter runsTimer: false for a shedder the caller drives with `sample(now:cpuLoad:)`.
    public init(policy: SheddingPolicy, runsTimer: Bool = true) {
        state = Mutex(State(policy: policy))
        self.runsTimer = runsTimer
    }

    /// Rungs shed now, in the order they were shed.
    public var shed: [RungID] { state.withLock { $0.policy.shed } }
    /// Times a rung was shed since the node started.
    public var shedTotal: Int { state.withLock { $0.shedTotal } }

    public func register(_ job: any SheddableJob) {
        state.withLock { state in
            state.jobs[ObjectIdentifier(job)] = job
            guard runsTimer, state.timer == nil else { return }
            let timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "abr.load-shedder", qos: .userInitiated))
            timer.schedule(deadline: .now() + 0.25, repeating: 0.25, leeway: .milliseconds(20))
            timer.setEventHandler { [weak self] in self?.sample(now: ProcessInfo.processInfo.systemUptime, cpuLoad: nil) }
            state.timer = timer
            timer.resume()
        }
    }

    /// A job ended: its rungs leave the books (a shed one is not restored into a finished job).
    public func unregister(_ job: any SheddableJob) {
        state.withLock { _ = $0.jobs.removeValue(forKey: ObjectIdentifier(job)) }
    }

    /// One sample; `cpuLoad` nil measures the machine's CPU since the last sample.
    public func sample(now: Double, cpuLoad: Double?) {
        let jobs = state.withLock { Array($0.jobs.values) }
        // Outside the lock: reading a job's statistics takes the job's own locks.
        var loads: [RungLoad] = []
        var owners: [RungID: any SheddableJob] = [:]
        for job in jobs {
            for load in job.sampleRungLoads() {
                loads.append(load)
                owners[load.rung] = job
            }
        }
        let change: SheddingPolicy.Change? = state.withLock { state in
            if let load = cpuLoad ?? Self.machineLoad(last: &state.lastCPU) {
                state.smoothedLoad = state.smoothedLoad.map { 0.9 * $0 + 0.1 * load } ?? load
            }
            let change = state.policy.observe(now: now, loads: loads, cpuLoad: state.smoothedLoad)
            if case .shed = change { state.shedTotal += 1 }
            return change
        }
        guard let change else { return }
        switch change {
        case let .shed(rung): owners[rung]?.setShed(true, level: rung.level)
        case let .restore(rung): owners[rung]?.setShed(false, level: rung.level)
        }
    }

    /// The machine's CPU use since the last call, as a fraction of all cores (from /proc/stat):
    /// room to restore a rung is room on the machine, whoever else runs on it.
    private static func machineLoad(last: inout (total: Double, busy: Double)?) -> Double? {
        guard let text = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
              let line = text.split(separator: "\n", maxSplits: 1).first, line.hasPrefix("cpu ") else { return nil }
        let fields = line.split(separator: " ").dropFirst().compactMap { Double($0) }
        guard fields.count >= 5 else { return nil }
        let total = fields.reduce(0, +)
        let busy = total - fields[3] - fields[4]
        defer { last = (total, busy) }
        guard let last, total - last.total > 0 else { return nil }
        return (busy - last.busy) / (total - last.total)
    }
}
