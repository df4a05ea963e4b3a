import DequeModule
import Foundation

/// How an encoder thread is scheduled against the node's other threads.
public struct EncoderPriority: Sendable, Hashable {
    /// Added to the thread's nice value (0 to 19). Each step is about 10 % less CPU share against a
    /// busy thread at the node's own nice: 4 gives the ingest and network threads about 2.5 times
    /// an encoder's share when both want the CPU.
    public var niceIncrement: Int
    /// `SCHED_BATCH`: the scheduler treats the thread as CPU-bound and does not let it preempt
    /// others when it wakes.
    public var batch: Bool

    public init(niceIncrement: Int, batch: Bool) {
        self.niceIncrement = min(19, max(0, niceIncrement))
        self.batch = batch
    }

    /// The process's own scheduling: what offline transcodes use.
    public static let normal = EncoderPriority(niceIncrement: 0, batch: false)
    /// A live node's encoders: behind ingest and sending, so a picture's way in and out is never
    /// queued behind x264.
    public static let background = EncoderPriority(niceIncrement: 4, batch: true)
}

/// A serial queue on a thread of its own: one per encoded rung. It is a thread rather than a
/// Dispatch queue so that its scheduling can be lowered for good. A pool thread's nice value
/// cannot be raised back without privileges once lowered, and the next queue to run there would
/// inherit it. x264's own worker threads, made on this thread, inherit its scheduling.
///
/// `async` and the suspension calls may come from any thread; the jobs run in order on this one.
final class EncoderThread: @unchecked Sendable {
    // @unchecked: the queue and flags are only touched under `condition`.
    private let condition = NSCondition()
    private var jobs = Deque<() -> Void>()
    private var suspensions = 0
    private var closed = false

    init(name: String, priority: EncoderPriority) {
        // The thread holds the worker until `close()` lets it finish: jobs already queued still run.
        let thread = Thread { [self] in run(priority) }
        thread.name = name
        // x264 and swscale work on this thread's stack: the size Linux gives a main thread.
        thread.stackSize = 8 << 20
        thread.start()
    }

    func async(_ job: @escaping () -> Void) {
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    /// Holds the jobs not yet started until `resume()` (tests hold a rung to see its inbox fill).
    func suspend() {
        condition.lock()
        suspensions += 1
        condition.unlock()
    }

    func resume() {
        condition.lock()
        suspensions = max(0, suspensions - 1)
        condition.signal()
        condition.unlock()
    }

    /// The thread ends once the jobs already queued have run (even if suspended).
    func close() {
        condition.lock()
        closed = true
        condition.signal()
        condition.unlock()
    }

    private func run(_ priority: EncoderPriority) {
        Self.apply(priority)
        while true {
            condition.lock()
            while !closed, jobs.isEmpty || suspensions > 0 { condition.wait() }
            guard let job = jobs.popFirst() else {
                condition.unlock()
                return
            }
            condition.unlock()
            job()
        }
    }

    /// Linux's `SCHED_BATCH` (glibc declares it only under `_GNU_SOURCE`, which Swift does not see).
    static let schedBatch: Int32 = 3

    /// Lowers the calling thread's scheduling. On Linux `who = 0` in both calls is the calling
    /// thread, not the process. Neither needs a privilege: a thread may always lower its own
    /// priority.
    static func apply(_ priority: EncoderPriority) {
        if priority.batch {
            var parameters = sched_param()
            parameters.sched_priority = 0
            _ = sched_setscheduler(0, schedBatch, &parameters)
        }
        if priority.niceIncrement > 0 {
            errno = 0
            let current = getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)
            if errno == 0 {
                _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, min(19, current + Int32(priority.niceIncrement)))
            }
        }
    }
}
