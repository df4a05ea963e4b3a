import Foundation

/// CPU time in seconds, of the calling thread (what one rung's queue work costs, apart from every
/// other thread of the process) or of the whole process.
public enum CPUClock {
    public static func thread() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    /// CPU time of the whole process so far (every thread, user and system).
    public static func process() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }
}
