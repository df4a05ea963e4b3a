import Dispatch
import Synchronization

/// The one clock the node's timing reads: time since an arbitrary start, never going back. Every
/// timeout, rate, silence and lag is measured on it. Services hold one (the system's uptime unless
/// told otherwise) and hand it to what they make, so a test can move time by hand instead of
/// sleeping through it (`ManualClock`).
public struct NodeClock: Sendable {
    private let read: @Sendable () -> UInt64

    public init(nanoseconds read: @escaping @Sendable () -> UInt64) {
        self.read = read
    }

    /// The system's monotonic uptime (CLOCK_MONOTONIC through Dispatch).
    public static let system = NodeClock { DispatchTime.now().uptimeNanoseconds }

    public var nanoseconds: UInt64 { read() }
    public var seconds: Double { Double(read()) / 1e9 }

    /// Seconds from `earlier` (nanoseconds read off this clock) until now.
    public func seconds(since earlier: UInt64) -> Double { Double(read() &- earlier) / 1e9 }
}

/// A clock a test moves by hand, shared by everything it was handed to.
public final class ManualClock: Sendable {
    private let now: Atomic<UInt64>

    /// Starts at `seconds` (not zero, so "never" and "at the start" differ).
    public init(seconds: Double = 1000) {
        now = Atomic(UInt64(seconds * 1e9))
    }

    public var clock: NodeClock { NodeClock { [self] in now.load(ordering: .acquiring) } }

    public func advance(seconds: Double) {
        now.add(UInt64(seconds * 1e9), ordering: .releasing)
    }
}
