import FFmpegBridge

/// Why a transcode failed, sorted by who can fix it; the CLI maps these to exit codes.
public enum TranscodeError: Error, Sendable, CustomStringConvertible {
    /// The input cannot be opened, has no usable video, or is truncated or corrupted (exit 3).
    case badInput(String)
    /// Anything else: output not writable, an encoder failing (exit 1).
    case failed(String)
    /// `LadderJob.cancel()` was called (e.g. on SIGINT); the partial output was removed.
    case cancelled

    public var description: String {
        switch self {
        case .cancelled: return "cancelled; partial output removed"
        case let .badInput(message): return message
        case let .failed(message): return message
        }
    }

    static func from(_ error: FFmpegError) -> TranscodeError {
        .failed(error.description)
    }
}
