import Foundation

extension Process {
    /// `run()` with the spawning thread's signal mask emptied for the spawn alone.
    ///
    /// A child inherits that mask, and Swift's tasks and Dispatch's queues run on worker threads
    /// that block nearly every signal. ffmpeg started from one never saw `interrupt()` or SIGTERM:
    /// each stop waited out its grace and ended in SIGKILL, without the TEARDOWN a stopped
    /// publisher sends. The node and the test runner both ignore SIGPIPE, and the node handles
    /// SIGINT and SIGTERM through its own sources, so a signal delivered in that window is harmless.
    public func runDeliveringSignals() throws {
        var empty = sigset_t()
        var previous = sigset_t()
        sigemptyset(&empty)
        pthread_sigmask(SIG_SETMASK, &empty, &previous)
        defer { pthread_sigmask(SIG_SETMASK, &previous, nil) }
        try run()
    }
}
