import CAllocator
import Logging
import ServiceLifecycle

/// Gives freed memory back to the system while the node runs, so its RSS follows what it holds.
///
/// glibc raises its mmap threshold after freeing a large block, so later picture-sized buffers
/// (a 720p frame is 1.4 MB) come from the heap arenas instead of their own mappings, and a long
/// live run fragments those arenas: the soak showed RSS creeping ~0.35 MB a minute with flat
/// contents. A fixed threshold keeps large buffers in mappings that go back on free, and a
/// periodic `malloc_trim` returns the arenas' free pages.
public struct MemoryReturn: Service {
    /// Blocks at least this large get their own mapping (glibc's default before it adapts).
    static let mmapThreshold: Int32 = 256 * 1024
    let interval: Duration
    let logger: Logger

    /// Call once at start, before the node allocates much.
    public static func configureAllocator() {
        _ = callocator_set_mmap_threshold(mmapThreshold)
    }

    public func run() async throws {
        try? await cancelWhenGracefulShutdown {
            while true {
                try await Task.sleep(for: interval)
                _ = callocator_trim()
            }
        }
    }
}
