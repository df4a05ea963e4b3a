import Foundation
import Synchronization

/// The node's last ten minutes, sampled every two seconds from what it already keeps (job views,
/// switch events, the process's own CPU and memory), for the status page's charts. Fixed in size:
/// the oldest sample goes as each new one comes.
public final class NodeHistory: Sendable {
    /// One rung at one moment.
    public struct Rung: Codable, Sendable, Equatable {
        public var level: Int
        public var bitRate: Int
        public var fps: Double
        public var players: Int
        public var latencyP50Ms: Double?
        public var latencyP99Ms: Double?
    }

    /// One job at one moment; `switches` counts players' moves between its rungs since the last sample.
    public struct Job: Codable, Sendable, Equatable {
        public var streamGuid: String
        public var rungs: [Rung]
        public var switches: Int
    }

    public struct Sample: Codable, Sendable, Equatable {
        /// Seconds since 1970.
        public var time: Double
        /// Cores the node's process used since the last sample (nil for the first).
        public var cpuCores: Double?
        public var residentBytes: Int?
        public var jobs: [Job]
    }

    public static let interval = 2.0
    public static let capacity = 300

    private struct State {
        var samples: [Sample] = []
        var switchesSinceSample: [String: Int] = [:]
        var lastCPU: (time: Double, seconds: Double)?
    }
    private let state = Mutex(State())

    public init() {}

    /// A player of `ladder` moved between rungs.
    public func noteSwitch(ladder: String) {
        state.withLock { $0.switchesSinceSample[ladder, default: 0] += 1 }
    }

    /// Takes a sample from the job views and the process's usage (`cpuSeconds` used so far).
    public func record(time: Double, views: [ControlPlane.JobView], usage: ProcessUsage?) {
        state.withLock { state in
            var cpu: Double?
            if let usage {
                if let last = state.lastCPU, time > last.time {
                    cpu = max(0, usage.cpuSeconds - last.seconds) / (time - last.time)
                }
                state.lastCPU = (time, usage.cpuSeconds)
            }
            let jobs = views.map { view in
                Job(streamGuid: view.streamGuid,
                    rungs: view.variants.map {
                        Rung(level: $0.abrLevel, bitRate: $0.averageBitRate, fps: $0.fps, players: $0.players,
                             latencyP50Ms: $0.latencyP50Ms, latencyP99Ms: $0.latencyP99Ms)
                    },
                    switches: state.switchesSinceSample[view.streamGuid] ?? 0)
            }
            state.switchesSinceSample = [:]
            state.samples.append(Sample(time: time, cpuCores: cpu.map { ($0 * 1000).rounded() / 1000 },
                                        residentBytes: usage?.residentBytes, jobs: jobs))
            if state.samples.count > Self.capacity { state.samples.removeFirst(state.samples.count - Self.capacity) }
        }
    }

    /// What `/v1/history` answers: the samples, oldest first, and how far apart they are taken.
    public struct Window: Codable, Sendable {
        public var interval: Double
        public var samples: [Sample]
    }

    public var window: Window { window(since: nil) }

    /// The samples taken after `since` (seconds since 1970), or all: a page that has the rest
    /// asks only for what is new, so a node with many jobs does not send ten minutes every 2 s.
    public func window(since: Double?) -> Window {
        let samples = state.withLock { state in
            guard let since else { return state.samples }
            return Array(state.samples.drop { $0.time <= since })
        }
        return Window(interval: Self.interval, samples: samples)
    }
}

/// The process's own CPU time and resident memory, from `/proc/self` (Linux).
public struct ProcessUsage: Sendable, Equatable {
    public var cpuSeconds: Double
    public var residentBytes: Int

    public init(cpuSeconds: Double, residentBytes: Int) {
        self.cpuSeconds = cpuSeconds
        self.residentBytes = residentBytes
    }

    /// Reads `/proc/self/stat` (utime and stime, fields 14 and 15) and `/proc/self/statm`
    /// (resident pages); nil where they cannot be read.
    public static func current() -> ProcessUsage? {
        guard let stat = try? String(contentsOfFile: "/proc/self/stat", encoding: .utf8),
              let statm = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return nil }
        return parse(stat: stat, statm: statm, ticksPerSecond: Double(sysconf(Int32(_SC_CLK_TCK))), pageSize: Int(sysconf(Int32(_SC_PAGESIZE))))
    }

    /// The command name (field 2) is in parentheses and may hold spaces: fields are counted after its last `)`.
    public static func parse(stat: String, statm: String, ticksPerSecond: Double, pageSize: Int) -> ProcessUsage? {
        guard let close = stat.lastIndex(of: ")"), ticksPerSecond > 0 else { return nil }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // After the name: state is field 3, so utime (14) and stime (15) are at offsets 11 and 12.
        let resident = statm.split(separator: " ")
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]),
              resident.count > 1, let pages = Int(resident[1]) else { return nil }
        return ProcessUsage(cpuSeconds: (user + system) / ticksPerSecond, residentBytes: pages * pageSize)
    }
}
