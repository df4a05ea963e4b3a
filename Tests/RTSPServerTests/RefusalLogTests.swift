import Ingest
import Logging
import RTSPServer
import Synchronization
import Testing

/// 60 failed RTMP or SRT handshakes in 0.1 s made about 120 log lines: refusals are now logged
/// a line a second at most, each saying how many were left out.
@Suite struct RefusalLogTests {
    final class Lines: Sendable {
        let stored = Mutex<[(String, Logger.Metadata)]>([])
    }

    struct Capture: LogHandler {
        let lines: Lines
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) {
            lines.stored.withLock { $0.append(("\(event.message)", event.metadata ?? [:])) }
        }
    }

    @Test func aFloodOfRefusalsIsALineASecond() {
        let lines = Lines()
        let logger = Logger(label: "test") { _ in Capture(lines: lines) }
        let refusals = RefusalLog()
        let start = ContinuousClock.now
        for index in 0..<120 {
            refusals.log(logger, "authentication failed", now: start + .milliseconds(index))
        }
        #expect(lines.stored.withLock { $0.count } == 1)
        refusals.log(logger, "authentication failed", now: start + .milliseconds(1200))
        let logged = lines.stored.withLock { $0 }
        #expect(logged.count == 2)
        #expect(logged.last?.1["refusals.suppressed"] == "119", "the next line says how many were left out")
        // Another kind of refusal is not hidden behind a flood of the first.
        refusals.log(logger, "not provisioned", kind: "404", now: start + .milliseconds(1201))
        #expect(lines.stored.withLock { $0.count } == 3)
    }
}

@Suite struct IngestProtocolTests {
    /// A protocol's publish URL comes from its template; an IPv6 host is bracketed once.
    @Test func publishURLsFillTheTemplate() {
        let srt = IngestProtocol(scheme: "srt", name: "SRT", urlTemplate: "srt://{host}:{port}?streamid=publish:{stream}")
        #expect(srt.publishURL(host: "10.0.0.5", port: 8890, stream: "live/a_1") == "srt://10.0.0.5:8890?streamid=publish:live/a_1")
        #expect(srt.publishURL(host: "::1", port: 1, stream: "s") == "srt://[::1]:1?streamid=publish:s")
        #expect(srt.publishURL(host: "[::1]", port: 1, stream: "s") == "srt://[::1]:1?streamid=publish:s")
        #expect(srt.portOption == "--srt-port")
    }
}
