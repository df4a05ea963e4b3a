import Foundation

/// What GStreamer's `rtspsrc` played from an RTSP URL: how many pictures reached the sink, whether
/// the sink got all it asked for, and the errors that count against the server.
public struct RTSPSourcePlayback: Sendable {
    /// gst-launch's exit status.
    public var status: Int32
    /// Standard output and error in the order they were written (gst-launch's messages and rtspsrc's debug log).
    public var output: String
    /// Buffers that reached the fakesink.
    public var pictures: Int
    /// The sink took the pictures it wanted and the pipeline ended on its own.
    public var reachedEnd: Bool
    /// Errors gst-launch reported, less rtspsrc's own shutdown race (see `isShutdownRace`).
    public var errors: [String]

    /// Played `wanted` pictures and ended without an error the server caused.
    public func played(_ wanted: Int) -> Bool { pictures >= wanted && reachedEnd && errors.isEmpty }

    /// The tail of the output, for a failed expectation's message.
    public var summary: String {
        "status \(status), \(pictures) pictures, end \(reachedEnd), errors: \(errors.joined(separator: " | "))\n\(output.suffix(1500))"
    }
}

/// Ends a playback before its sink has all its pictures, the way a user stops gst-launch: SIGINT,
/// which `-e` turns into an end of stream, so the pipeline closes as it would at its last picture.
public final class PlaybackEnd: @unchecked Sendable {
    /// Runs its arguments with SIGINT unblocked and at its default action.
    static let withSIGINT = ["/usr/bin/python3", "-c",
                             "import os, signal, sys; signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT]); "
                             + "signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])"]

    private let lock = NSLock()
    private var process: Process?
    private var ended = false

    public init() {}

    func started(_ process: Process) {
        let endNow = lock.withLock {
            self.process = process
            return ended
        }
        if endNow { kill(process.processIdentifier, SIGINT) }
    }

    /// Ends the playback now, or as soon as it starts.
    public func end() {
        let running = lock.withLock {
            ended = true
            return process
        }
        if let running, running.isRunning { kill(running.processIdentifier, SIGINT) }
    }
}

/// Plays `url` with `gst-launch-1.0 rtspsrc … ! fakesink num-buffers=pictures` over `protocols`
/// (`tcp` or `udp`). `decode` goes between the depayloader and the sink; `launcher` is what
/// gst-launch runs under (a namespace's `ip netns exec …`). With `end`, the caller may end it
/// before the sink has `pictures`: it then reaches its end all the same (`reachedEnd`).
public func playWithRTSPSource(_ url: String, protocols: String, pictures: Int,
                               decode: [String] = ["h264parse", "!", "avdec_h264"], timeout: TimeInterval = 30,
                               launcher: [String] = [], end: PlaybackEnd? = nil) throws -> RTSPSourcePlayback {
    // -v prints one "last-message = chain" line per buffer the fakesink takes; rtspsrc's DEBUG log
    // shows whether the server answered the TEARDOWN (what tells its shutdown race from a dropped connection).
    let pipeline = ["-v", "rtspsrc", "location=\(url)", "protocols=\(protocols)", "!", "rtph264depay", "!"] + decode
        + ["!", "fakesink", "silent=false", "num-buffers=\(pictures)", "sync=false"]
    // To be ended early it runs with `-e`, and with SIGINT as a shell gives it: the test runner
    // blocks SIGINT, and a child inherits that mask.
    let program = end == nil ? ["gst-launch-1.0"] : PlaybackEnd.withSIGINT + ["gst-launch-1.0", "-e"]
    let result = try runProcess("/bin/sh", ["-c", "GST_DEBUG=rtspsrc:5 GST_DEBUG_NO_COLOR=1 exec \"$@\" 2>&1", "sh"] + launcher + program + pipeline,
                                timeout: timeout, started: end.map { end in { end.started($0) } })
    let output = result.stdout
    let sinkLines = output.split(separator: "\n").filter { $0.contains("GstFakeSink:fakesink0: last-message = chain") }
    let endMarker = output.range(of: "Got EOS from element")
    var errors: [String] = []
    var searchFrom = output.startIndex
    while let found = output.range(of: "ERROR: from element", range: searchFrom..<output.endIndex) {
        // gst-launch prints an error in four lines (the message, "Additional debug info:", where, why);
        // other threads' debug lines ("0:00:01.5 …") may land between them.
        let block = output[found.lowerBound...].split(separator: "\n", maxSplits: 40, omittingEmptySubsequences: false)
            .filter { !$0.hasPrefix("0:") }.prefix(4).joined(separator: "\n")
        if !isShutdownRace(block, at: found.lowerBound, in: output, endOfStream: endMarker?.lowerBound) { errors.append(block) }
        searchFrom = found.upperBound
    }
    return RTSPSourcePlayback(status: result.status, output: output, pictures: sinkLines.count, reachedEnd: endMarker != nil, errors: errors)
}

/// rtspsrc (GStreamer 1.22) shutting down after end of stream queues a PAUSE on its own thread and
/// then flushes its connection from the application thread to close it. When the flush lands while
/// the PAUSE is on the wire, rtspsrc reports "Could not send message. (Received end-of-file)" and
/// goes on to send TEARDOWN on the same connection, which the server answers. That is the client
/// racing itself, not the server dropping the connection: it counts only when it comes after the
/// end of stream and the TEARDOWN that follows it got a 200.
private func isShutdownRace(_ block: String, at position: String.Index, in output: String, endOfStream: String.Index?) -> Bool {
    guard let endOfStream, position > endOfStream, block.contains("Received end-of-file"),
          block.contains("gst_rtspsrc_pause") || block.contains("gst_rtspsrc_try_send") else { return false }
    guard let teardown = output.range(of: "gst_rtspsrc_close:<rtspsrc0> TEARDOWN...", range: position..<output.endIndex) else { return false }
    return output.range(of: "got response message 200", range: teardown.upperBound..<output.endIndex) != nil
}
