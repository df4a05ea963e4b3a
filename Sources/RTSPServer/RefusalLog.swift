import Logging
import Synchronization

/// Log lines about refusals (connections over a limit, failed authentications) at most once per
/// `interval`, each with how many were left out since the last: a peer that fails a thousand
/// times a second costs the log one line a second, and the line still says how many there were.
public final class RefusalLog: Sendable {
    public let interval: Duration
    private let state = Mutex<(last: ContinuousClock.Instant?, suppressed: Int)>((nil, 0))

    public init(interval: Duration = .seconds(1)) {
        self.interval = interval
    }

    /// Logs `message` (at warning level unless told) if a line is due, else counts it for the next line.
    public func log(_ logger: Logger, _ message: @autoclosure () -> Logger.Message, metadata: Logger.Metadata = [:],
                    level: Logger.Level = .warning, now: ContinuousClock.Instant = .now) {
        let suppressed: Int? = state.withLock { state in
            guard state.last.map({ now - $0 >= interval }) ?? true else {
                state.suppressed += 1
                return nil
            }
            defer { state = (now, 0) }
            return state.suppressed
        }
        guard let suppressed else { return }
        var metadata = metadata
        if suppressed > 0 { metadata["refusals.suppressed"] = "\(suppressed)" }
        logger.log(level: level, message(), metadata: metadata)
    }

    /// Lines left out since the last one logged.
    public var suppressed: Int { state.withLock { $0.suppressed } }
}
