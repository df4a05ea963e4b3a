import Foundation
import Synchronization
import Testing
@testable import Transcoder

/// Encoder threads: serial, and scheduled behind the node's ingest and network threads for good.
@Suite struct EncoderThreadTests {
    /// The calling thread's nice value and scheduling policy, from /proc (fields 19 and 41 of
    /// `stat`, counted after the command name's closing parenthesis).
    static func ownScheduling() throws -> (nice: Int, policy: Int) {
        let stat = try String(contentsOfFile: "/proc/thread-self/stat", encoding: .utf8)
        let fields = stat[stat.index(after: try #require(stat.lastIndex(of: ")")))...].split(separator: " ")
        // After ")" the fields start at 3 (state): field n is at index n − 3.
        return (Int(fields[19 - 3]) ?? -100, Int(fields[41 - 3]) ?? -1)
    }

    static func schedulingOnWorker(_ priority: EncoderPriority) throws -> (nice: Int, policy: Int) {
        let worker = EncoderThread(name: "test.encoder", priority: priority)
        defer { worker.close() }
        return try scheduling(on: worker.async)
    }

    /// The scheduling of the thread `run` runs a job on.
    static func scheduling(on run: (@escaping () -> Void) -> Void) throws -> (nice: Int, policy: Int) {
        let seen = Mutex<(Int, Int)?>(nil)
        let done = DispatchSemaphore(value: 0)
        run {
            seen.withLock { $0 = try? Self.ownScheduling() }
            done.signal()
        }
        #expect(done.wait(timeout: .now() + 10) == .success)
        let result = try #require(seen.withLock { $0 })
        return (result.0, result.1)
    }

    @Test func aBackgroundEncoderRunsNicerAndBatchWhileTheCallerKeepsItsOwn() throws {
        let caller = try Self.ownScheduling()
        let background = try Self.schedulingOnWorker(.background)
        #expect(background.nice == min(19, caller.nice + EncoderPriority.background.niceIncrement))
        #expect(background.policy == Int(EncoderThread.schedBatch))
        #expect(try Self.ownScheduling() == caller, "only the encoder's thread changed")
        let normal = try Self.schedulingOnWorker(.normal)
        #expect(normal.nice == caller.nice && normal.policy == caller.policy)
    }

    @Test func jobsRunInOrderAndWaitWhileSuspended() throws {
        let worker = EncoderThread(name: "test.order", priority: .normal)
        let order = Mutex<[Int]>([])
        let done = DispatchSemaphore(value: 0)
        worker.suspend()
        for index in 0..<100 { worker.async { order.withLock { $0.append(index) } } }
        worker.async { done.signal() }
        #expect(done.wait(timeout: .now() + 0.3) == .timedOut, "a suspended worker starts nothing")
        #expect(order.withLock { $0.isEmpty })
        worker.resume()
        #expect(done.wait(timeout: .now() + 10) == .success)
        #expect(order.withLock { $0 } == Array(0..<100))
        // Closing lets queued jobs finish, then the thread ends.
        worker.async { order.withLock { $0.append(100) } }
        worker.close()
        let deadline = Date().addingTimeInterval(10)
        while order.withLock({ $0.count }) < 101, Date() < deadline { usleep(1000) }
        #expect(order.withLock { $0.last } == 100)
    }
}
