import DequeModule
import MediaCore
import Dispatch
import FFmpegBridge
import Synchronization

/// When each live picture arrived from the publisher, keyed by its presentation time on the
/// job's timeline, so every variant can measure the latency it adds (arrival → sent).
/// Thread-safe: the ingest records, variant queues look up.
final class ArrivalTimes: Sendable {
    private let state = Mutex<(times: [Int64: UInt64], order: Deque<Int64>)>(([:], []))
    /// About ten seconds of pictures at 60 fps.
    static let capacity = 600

    /// - Parameter timelineTicks: presentation time in 90 kHz ticks on the output timeline.
    func record(timelineTicks: Int64, arrival: UInt64) {
        state.withLock { state in
            if state.times.updateValue(arrival, forKey: timelineTicks) == nil { state.order.append(timelineTicks) }
            if state.order.count > Self.capacity {
                state.times.removeValue(forKey: state.order.removeFirst())
            }
        }
    }

    func arrival(timelineTicks: Int64) -> UInt64? {
        state.withLock { $0.times[timelineTicks] }
    }

    static let timeBase = Rational(1, 90000)
}

/// The last samples of a variant's added latency, for p50/p99.
struct LatencySamples: Sendable {
    private var samples: [Double] = []
    private var next = 0
    static let capacity = 1000

    mutating func add(_ seconds: Double) {
        if samples.count < Self.capacity {
            samples.append(seconds)
        } else {
            samples[next] = seconds
            next = (next + 1) % Self.capacity
        }
    }

    /// Percentiles in milliseconds, nil before any sample.
    var percentiles: (p50: Double, p99: Double)? {
        guard !samples.isEmpty else { return nil }
        let sorted = samples.sorted()
        func at(_ fraction: Double) -> Double {
            (sorted[Swift.min(sorted.count - 1, Int((Double(sorted.count - 1) * fraction).rounded()))] * 10000).rounded() / 10
        }
        return (at(0.5), at(0.99))
    }
}
