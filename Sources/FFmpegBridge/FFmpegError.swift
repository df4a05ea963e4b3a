import CFFmpeg

/// An FFmpeg call that failed: its return code, FFmpeg's text for it, what we were doing, and where.
public struct FFmpegError: Error, Sendable, CustomStringConvertible {
    public var code: Int32
    public var operation: String
    public var message: String
    public var file: String
    public var line: Int

    public init(code: Int32, operation: String, file: String = #fileID, line: Int = #line) {
        self.code = code
        self.operation = operation
        self.message = Self.describe(code)
        self.file = file
        self.line = line
    }

    public init(operation: String, message: String, file: String = #fileID, line: Int = #line) {
        self.code = 0
        self.operation = operation
        self.message = message
        self.file = file
        self.line = line
    }

    public var description: String { "\(operation): \(message)" }

    /// True for errors that mean the data was bad rather than the program or the system.
    public var isInvalidData: Bool {
        code == cffmpeg_averror_invaliddata()
    }

    static func describe(_ code: Int32) -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        cffmpeg_error_string(code, &buffer, buffer.count)
        return String(decoding: buffer.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// Throws for negative FFmpeg return codes; passes the value through otherwise.
@discardableResult
func check(_ code: Int32, _ operation: @autoclosure () -> String, file: String = #fileID, line: Int = #line) throws(FFmpegError) -> Int32 {
    if code < 0 { throw FFmpegError(code: code, operation: operation(), file: file, line: line) }
    return code
}

/// Process-wide FFmpeg settings.
public enum FFmpegLibrary {
    public enum LogLevel: Sendable { case quiet, fatal, error, warning }

    /// FFmpeg logs to stderr on its own; the CLI keeps it to errors so progress lines stay readable.
    public static func setLogLevel(_ level: LogLevel) {
        switch level {
        case .quiet: cffmpeg_set_log_level(cffmpeg_log_quiet())
        case .fatal: cffmpeg_set_log_level(cffmpeg_log_fatal())
        case .error: cffmpeg_set_log_level(cffmpeg_log_error())
        case .warning: cffmpeg_set_log_level(cffmpeg_log_warning())
        }
    }

    public static var versions: String {
        "libavcodec \(version(avcodec_version())), libavformat \(version(avformat_version())), libswscale \(version(swscale_version()))"
    }

    private static func version(_ packed: UInt32) -> String {
        "\(packed >> 16).\((packed >> 8) & 0xFF).\(packed & 0xFF)"
    }

    public static var hasLibx264: Bool { avcodec_find_encoder_by_name("libx264") != nil }
}
