import ControlPlane
import Testing

/// The status page's ten minutes: bounded, and the node's CPU as cores between samples.
@Suite struct NodeHistoryTests {
    @Test func keepsTenMinutesAndTurnsCPUSecondsIntoCores() {
        let history = NodeHistory()
        for index in 0..<(NodeHistory.capacity + 20) {
            let time = Double(index) * NodeHistory.interval
            // 1.5 cores busy: 3 CPU seconds every 2 s.
            history.record(time: time, views: [], usage: ProcessUsage(cpuSeconds: time * 1.5, residentBytes: 100 << 20))
        }
        let samples = history.window.samples
        #expect(samples.count == NodeHistory.capacity)
        #expect(samples.first?.time == 20 * NodeHistory.interval, "the oldest go first")
        #expect(samples.allSatisfy { $0.cpuCores == 1.5 && $0.residentBytes == 100 << 20 })
        #expect(Double(NodeHistory.capacity) * NodeHistory.interval == 600)
        let since = samples[samples.count - 3].time
        #expect(history.window(since: since).samples.map(\.time) == samples.suffix(2).map(\.time), "only what is newer")
    }

    /// `/proc/self/stat` with a command name holding spaces and a parenthesis.
    @Test func readsProcStatPastTheCommandName() throws {
        let stat = "4242 (abr worker) x) S 1 4242 4242 0 -1 4194560 9000 0 0 0 250 50 0 0 20 0 12 0 100 900000000 30000"
        let usage = try #require(ProcessUsage.parse(stat: stat, statm: "225000 30000 2000 1 0 40000 0", ticksPerSecond: 100, pageSize: 4096))
        #expect(usage.cpuSeconds == 3.0)
        #expect(usage.residentBytes == 30000 * 4096)
        #expect(ProcessUsage.parse(stat: "4242 (short", statm: "1 2", ticksPerSecond: 100, pageSize: 4096) == nil)
        #expect(ProcessUsage.current() != nil, "Linux has /proc/self")
    }
}
