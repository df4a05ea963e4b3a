#if canImport(Glibc)
import Glibc
#endif

/// File descriptors are the node's hardest limit: every RTSP and HTTP connection holds one, and
/// so do HLS writes, the store and the UDP pair. Connections are capped so that, with every
/// connection slot full, `reserve` descriptors are still left for the rest.
struct DescriptorBudget: Equatable {
    /// Descriptors kept for files, the store, sockets of the node's own and the libraries.
    static let reserve = 256

    var limit: Int
    var rtspConnections: Int
    var httpConnections: Int

    /// Caps RTSP and HTTP connections to what `limit` descriptors hold beside the reserve,
    /// shrinking both in proportion when they do not fit (each keeps at least 16).
    static func plan(limit: Int, rtsp: Int, http: Int, reserve: Int = reserve) -> DescriptorBudget {
        let available = max(32, limit - reserve)
        guard rtsp + http > available else { return DescriptorBudget(limit: limit, rtspConnections: rtsp, httpConnections: http) }
        let rtspShare = max(16, available * rtsp / max(1, rtsp + http))
        return DescriptorBudget(limit: limit, rtspConnections: rtspShare, httpConnections: max(16, available - rtspShare))
    }

    /// Raises the soft descriptor limit to the hard one (what a server should run with) and
    /// returns the soft limit in force.
    static func raiseLimit() -> Int {
        var limits = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limits) == 0 else { return 1024 }
        if limits.rlim_cur < limits.rlim_max {
            var raised = limits
            raised.rlim_cur = limits.rlim_max
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 { limits = raised }
        }
        return limits.rlim_cur >= rlim_t(Int.max) ? Int.max : Int(limits.rlim_cur)
    }
}
