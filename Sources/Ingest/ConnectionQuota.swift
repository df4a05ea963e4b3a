import Synchronization

/// Connections counted in all and per IP address, against a limit for each: RTSP and HTTP both
/// admit a connection here before it can hold anything, and release it when it closes.
public final class ConnectionQuota: Sendable {
    public let total: Int
    public let perAddress: Int
    private let state = Mutex<(open: Int, byAddress: [String: Int], refused: Int)>((0, [:], 0))

    public init(total: Int, perAddress: Int) {
        self.total = total
        self.perAddress = perAddress
    }

    /// Counts a connection from `address` in; false (and counted as refused) when the node or
    /// that address is at its limit.
    public func admit(_ address: String) -> Bool {
        state.withLock { state in
            let fromAddress = state.byAddress[address, default: 0]
            guard state.open < total, fromAddress < perAddress else {
                state.refused += 1
                return false
            }
            state.open += 1
            state.byAddress[address] = fromAddress + 1
            return true
        }
    }

    public func release(_ address: String) {
        state.withLock { state in
            state.open -= 1
            let left = state.byAddress[address, default: 1] - 1
            state.byAddress[address] = left > 0 ? left : nil
        }
    }

    public var open: Int { state.withLock { $0.open } }
    public var refused: Int { state.withLock { $0.refused } }
}
