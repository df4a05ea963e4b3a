/// A live job's lifecycle as a value: `waitingForPublisher → running ⇄ interrupted → ended`
/// (or `failed`). Times are seconds on the caller's monotonic clock, so every transition,
/// grace expiry included, is tested by moving a number rather than by sleeping.
///
/// The job's thread asks `next(now:)` what to do; publishers `offerPublisher()`; the session's
/// end reports `publisherLeft(now:)`.
public struct LiveJobLifecycle: Sendable, Equatable {
    public enum State: String, Sendable, Codable {
        case waitingForPublisher, running, interrupted, ended, failed
    }

    public enum Step: Sendable, Equatable {
        /// Run a publisher's session; `resuming` when the job was interrupted (same encoders, timeline carries on).
        case run(resuming: Bool)
        /// Finish every output and end.
        case finish(reason: String)
        /// Nothing to do until a publisher arrives, `stop()`, or the deadline (the end of grace).
        case wait(until: Double?)
    }

    public let grace: Double
    public private(set) var state: State = .waitingForPublisher
    /// When an interrupted job ends if its publisher has not come back.
    public private(set) var graceDeadline: Double?
    public private(set) var stopRequested = false
    /// A publisher was accepted and its session has not started yet.
    public private(set) var publisherPending = false

    public init(grace: Double) {
        self.grace = grace
    }

    public var acceptsPublisher: Bool {
        (state == .waitingForPublisher || state == .interrupted) && !publisherPending && !stopRequested
    }

    public var isFinished: Bool { state == .ended || state == .failed }

    /// A publisher wants to start or resume the job; false when it has one or is ending.
    public mutating func offerPublisher() -> Bool {
        guard acceptsPublisher else { return false }
        publisherPending = true
        return true
    }

    public mutating func stop() {
        stopRequested = true
    }

    public mutating func next(now: Double) -> Step {
        if publisherPending {
            publisherPending = false
            let resuming = state == .interrupted
            state = .running
            graceDeadline = nil
            return .run(resuming: resuming)
        }
        if stopRequested { return .finish(reason: "stopped") }
        if state == .interrupted, let deadline = graceDeadline {
            return now >= deadline ? .finish(reason: "no publisher within \(Int(grace)) s") : .wait(until: deadline)
        }
        return .wait(until: nil)
    }

    /// The running session ended (publisher gone, silent, or stopped). Returns the grace deadline,
    /// or nil when the job is to finish (it was stopped).
    public mutating func publisherLeft(now: Double) -> Double? {
        guard !stopRequested else { return nil }
        state = .interrupted
        graceDeadline = now + grace
        return graceDeadline
    }

    public mutating func finished(failed: Bool) {
        state = failed ? .failed : .ended
        graceDeadline = nil
    }
}

/// A token bucket on the caller's clock: `burst` at once, refilled at `perSecond`. Bounds what a
/// publisher's notifications can write into the node's history.
public struct RateBudget: Sendable, Equatable {
    public let burst: Double
    public let perSecond: Double
    private var tokens: Double
    private var refilledAt: Double?

    public init(burst: Double, perSecond: Double) {
        self.burst = burst
        self.perSecond = perSecond
        tokens = burst
    }

    /// Takes one token at `now`; false when none is left.
    public mutating func take(now: Double) -> Bool {
        if let refilledAt { tokens = min(burst, tokens + max(0, now - refilledAt) * perSecond) }
        refilledAt = now
        guard tokens >= 1 else { return false }
        tokens -= 1
        return true
    }
}
