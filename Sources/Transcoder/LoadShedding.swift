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
    /// Frames waiting in its inbox.
    public var queued: Int
    /// Frames it dropped so far (its encoder fell a whole inbox behind).
    public var dropped: Int

    public init(rung: RungID, fromBottom: Int, queued: Int, dropped: Int) {
        self.rung = rung
        self.fromBottom = fromBottom
        self.queued = queued
        self.dropped = dropped
    }
}

/// When the node cannot encode everything in real time, which rungs stop, and when they come back.
///
/// A value driven by the caller's clock (`observe(now:...)`), so it is tested without sleeping.
/// Pressure is an encoder falling behind: a rung's inbox holding `queuedFramesForPressure` frames
/// or more, or any new drop. Sustained pressure sheds one rung, the lowest of the node (the
/// bottom rung of every job before any job's second-lowest), then waits `settle` seconds for the
/// effect before shedding another. After `calmToRestore` seconds without pressure, and with CPU
/// to spare, the rung shed last comes back; a rung that had to be shed again soon after its
/// return doubles the calm needed next time, so an overloaded node does not oscillate.
/// The top (level 1) is never shed.
public struct SheddingPolicy: Sendable {
    public var queuedFramesForPressure = 8
    public var pressureToShed = 1.0
    public var settle = 1.0
    public var calmToRestore = 15.0
    public var maximumCalmToRestore = 300.0
    /// Restoring needs the node's CPU use (fraction of all cores) under this.
    public var restoreBelowLoad = 0.75

    public enum Change: Sendable, Equatable {
        case shed(RungID)
        case restore(RungID)
    }

    /// Rungs shed now, in the order they were shed.
    public private(set) var shed: [RungID] = []
    private var pressureSince: Double?
    private var calmSince: Double?
    private var lastChange = -Double.infinity
    private var lastDropped: [RungID: Int] = [:]
    private var calmNeeded: Double?
    private var restoredAt: [RungID: Double] = [:]

    public init() {}

    /// One sample. `loads` covers every rung that may be shed (shed or not); `cpuLoad` is the
    /// node's CPU use as a fraction of its cores since the last sample, when known.
    public mutating func observe(now: Double, loads: [RungLoad], cpuLoad: Double?) -> Change? {
        let known = Set(loads.map(\.rung))
        // Rungs of ended jobs leave the books.
        shed.removeAll { !known.contains($0) }
        lastDropped = lastDropped.filter { known.contains($0.key) }
        restoredAt = restoredAt.filter { known.contains($0.key) }

        var dropped = false
        var behind = false
        for load in loads where !shed.contains(load.rung) {
            if load.dropped > (lastDropped[load.rung] ?? load.dropped) { dropped = true }
            if load.queued >= queuedFramesForPressure { behind = true }
        }
        for load in loads { lastDropped[load.rung] = load.dropped }

        guard dropped || behind else {
            pressureSince = nil
            if calmSince == nil { calmSince = now }
            guard let last = shed.last, now - calmSince! >= (calmNeeded ?? calmToRestore), now - lastChange >= settle,
                  (cpuLoad ?? 0) < restoreBelowLoad else { return nil }
            shed.removeLast()
            restoredAt[last] = now
            calmSince = now
            lastChange = now
            return .restore(last)
        }
        calmSince = nil
        if pressureSince == nil { pressureSince = now }
        // A drop is already lost output: act on it at once; a queue may still drain by itself.
        guard dropped || now - pressureSince! >= pressureToShed, now - lastChange >= settle else { return nil }
        let candidates = loads.filter { !shed.contains($0.rung) && $0.rung.level > 1 }
            .sorted { ($0.fromBottom, -$0.rung.level, $0.rung.job) < ($1.fromBottom, -$1.rung.level, $1.rung.job) }
        guard let victim = candidates.first?.rung else { return nil }
        shed.append(victim)
        if let restored = restoredAt.removeValue(forKey: victim), now - restored < 60 {
            calmNeeded = min(maximumCalmToRestore, 2 * (calmNeeded ?? calmToRestore))
        }
        pressureSince = nil
        lastChange = now
        return .shed(victim)
    }
}

/// A job whose lower rungs the node may shed.
public protocol SheddableJob: AnyObject, Sendable {
    /// Every rung that may be shed, with what its encoder holds and dropped.
    var rungLoads: [RungLoad] { get }
    func setShed(_ shed: Bool, level: Int)
}

/// The node's shedder: samples every registered job's encoders four times a second and applies
/// `SheddingPolicy`'s decisions. One per process (`node`); tests drive their own with `sample(now:)`.
public final class LoadShedder: Sendable {
    private struct State {
        var policy: SheddingPolicy
        var jobs: [ObjectIdentifier: any SheddableJob] = [:]
        var timer: DispatchSourceTimer?
        var lastCPU: (wall: Double, cpu: Double)?
        /// CPU use smoothed over a few seconds: a quarter-second sample is too noisy to restore on.
        var smoothedLoad: Double?
        var shedTotal = 0
    }

    private let state: Mutex<State>
    private let cores: Int
    private let runsTimer: Bool
    private let onChange: (@Sendable (SheddingPolicy.Change) -> Void)?

    public static let node = LoadShedder(policy: SheddingPolicy(), cores: ProcessInfo.processInfo.activeProcessorCount)

    /// - Parameter runsTimer: false for a shedder the caller drives with `sample(now:cpuLoad:)`.
    public init(policy: SheddingPolicy, cores: Int, runsTimer: Bool = true, onChange: (@Sendable (SheddingPolicy.Change) -> Void)? = nil) {
        state = Mutex(State(policy: policy))
        self.cores = max(1, cores)
        self.runsTimer = runsTimer
        self.onChange = onChange
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

    /// One sample; `cpuLoad` nil measures this process's CPU since the last sample.
    public func sample(now: Double, cpuLoad: Double?) {
        let jobs = state.withLock { Array($0.jobs.values) }
        // Outside the lock: reading a job's statistics takes the job's own locks.
        let loads = jobs.flatMap(\.rungLoads)
        let owners = Dictionary(jobs.flatMap { job in job.rungLoads.map { ($0.rung, job) } }, uniquingKeysWith: { first, _ in first })
        let change: SheddingPolicy.Change? = state.withLock { state in
            if let load = cpuLoad ?? Self.processLoad(now: now, cores: cores, last: &state.lastCPU) {
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
        onChange?(change)
    }

    /// CPU this process used since the last call, as a fraction of all cores.
    private static func processLoad(now: Double, cores: Int, last: inout (wall: Double, cpu: Double)?) -> Double? {
        var spec = timespec()
        guard clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &spec) == 0 else { return nil }
        let cpu = Double(spec.tv_sec) + Double(spec.tv_nsec) / 1e9
        defer { last = (now, cpu) }
        guard let last, now - last.wall > 0.05 else { return nil }
        return (cpu - last.cpu) / (now - last.wall) / Double(cores)
    }
}
