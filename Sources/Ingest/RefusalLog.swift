import Logging
import Synchronization

/// Log lines about refusals (connections over a limit, failed authentications) at most once per
/// `interval` for each kind of refusal, each line saying how many of its kind were left out
/// since the last: a peer that fails a thousand times a second costs the log a line a second, the
/// line still says how many there were, and a refusal of another kind (another reason, a bad
/// stream name after a wrong password) is not hidden behind it.
public final class RefusalLog: Sendable {
    public let interval: Duration
    /// Kinds remembered at once; callers use a fixed few (reasons, reject codes), this only bounds a mistake.
    static let maximumKinds = 64
    private let state = Mutex<[String: (last: ContinuousClock.Instant, suppressed: Int)]>([:])

    public init(interval: Duration = .seconds(1)) {
        self.interval = interval
    }

    /// Logs `message` (at warning level unless told) if a line of its `kind` is due, else counts it
    /// for that kind's next line.
    public func log(_ logger: Logger, _ message: @autoclosure () -> Logger.Message, kind: String = "", metadata: Logger.Metadata = [:],
                    level: Logger.Level = .warning, now: ContinuousClock.Instant = .now) {
        let suppressed: Int? = state.withLock { kinds in
            if let entry = kinds[kind], now - entry.last < interval {
                kinds[kind]!.suppressed += 1
                return nil
            }
            let left = kinds[kind]?.suppressed ?? 0
            if kinds[kind] == nil, kinds.count >= Self.maximumKinds {
                kinds = kinds.filter { now - $0.value.last < interval }
                if kinds.count >= Self.maximumKinds { kinds.removeAll() }
            }
            kinds[kind] = (now, 0)
            return left
        }
        guard let suppressed else { return }
        var metadata = metadata
        if suppressed > 0 { metadata["refusals.suppressed"] = "\(suppressed)" }
        logger.log(level: level, message(), metadata: metadata)
    }

    /// Lines of `kind` left out since its last one logged.
    public func suppressed(kind: String = "") -> Int { state.withLock { $0[kind]?.suppressed ?? 0 } }
}
