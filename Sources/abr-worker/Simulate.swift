import ArgumentParser
import Foundation
import MediaCore

/// Replays bandwidth traces through the edge's switching policy against a ladder's real segments:
/// how a player on each link would have fared, before the ladder goes live.
struct Simulate: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Replay bandwidth traces through the edge's switching policy against a ladder's real segments.",
        discussion: """
        DIR is a `transcode` output (DIR/abr.json and DIR/hls/) or a live job's HLS folder \
        (DATA_DIR/hls/<top guid>/). Each level's segments give what a player on it is sent; abr.json \
        gives the switch thresholds. Per trace it prints what the player received, what an oracle \
        knowing the link's next seconds would have, freezes, switches, skips and the worst lag.
        """)

    @Argument(help: "A transcode output or a live job's HLS folder.")
    var directory: String

    @Option(name: .customLong("trace"), help: "A trace file (JSON: duration_ms, bandwidth_kbps) or a folder of them; repeatable (default: Fixtures/traces/hsdpa-3g).")
    var traces: [String] = []

    @Option(help: "Seconds of each trace to replay, from --start (0: the whole trace).")
    var window: Double = 120

    @Option(help: "Where in each trace the window starts, seconds.")
    var start: Double = 60

    @Option(help: "The level each player asks for (default: the lowest).")
    var level: Int?

    @Option(help: "Seconds of the link an oracle knows ahead.")
    var oracleHorizon: Double = 3

    @Option(help: "The link's shaper burst in bytes (what it lets through at once after a quiet spell; 0: a smooth link).")
    var burstBytes: Int = 0

    @Option(help: "The link's bottleneck queue in packets of 1500 bytes.")
    var queuePackets: Int = 100

    @Flag(help: "Print JSON instead of the table.")
    var json = false

    struct TraceResult: Codable {
        var trace: String
        var seconds: Double
        var meanLinkKbps: Int
        var deliveredKbps: Int
        var oracleKbps: Int
        var oracleShare: Double
        var freezeSeconds: Double
        var starvedSeconds: Double
        var switchesUp: Int
        var switchesDown: Int
        var skips: Int
        var probes: Int
        var maximumLagSeconds: Double
        var secondsPerLevel: [String: Double]
    }

    func validate() throws {
        guard window >= 0, window.isFinite, start >= 0, start.isFinite else { throw ValidationError("--window and --start must be 0 or more seconds") }
        guard oracleHorizon > 0, oracleHorizon <= 60 else { throw ValidationError("--oracle-horizon must be above 0 and at most 60 seconds") }
        guard (0...(64 << 20)).contains(burstBytes) else { throw ValidationError("--burst-bytes must be 0 to 64 MiB") }
        guard (1...1_000_000).contains(queuePackets) else { throw ValidationError("--queue-packets must be 1 to 1000000") }
    }

    func run() throws {
        let (rungs, keyframeInterval) = try loadLadder()
        let files = try traceFiles()
        guard !files.isEmpty else { throw CLIError(message: "no trace files in \(traces.joined(separator: ", "))", status: .invalidProvisionOrArguments) }
        let startLevel = level ?? rungs.last!.level
        guard rungs.contains(where: { $0.level == startLevel }) else {
            throw CLIError(message: "--level \(startLevel): the ladder has levels \(rungs.map(\.level))", status: .invalidProvisionOrArguments)
        }
        var replay = TraceReplay(link: LinkModel(burstBytes: Double(burstBytes), queueBytes: Double(queuePackets) * 1500))
        replay.keyframeInterval = keyframeInterval
        replay.oracleHorizon = oracleHorizon
        var results: [TraceResult] = []
        for (index, file) in files.enumerated() {
            FileHandle.standardError.write(Data("\rsimulate: trace \(index + 1)/\(files.count) \(file.lastPathComponent)".utf8))
            let trace: BandwidthTrace
            do {
                trace = try BandwidthTrace.parse(Array(try Data(contentsOf: file)))
            } catch {
                throw CLIError(message: "\(file.path): \(error)", status: .badInput)
            }
            let replayed = window > 0 ? trace.window(from: start, length: window) : trace
            let outcome = replay.run(replayed, policy: SwitchingPolicy(rungs: rungs, startingAt: startLevel))
            let mean = replayed.intervals.reduce(0) { $0 + $1.bitRate * $1.seconds } / max(replayed.duration, 1e-9)
            results.append(TraceResult(
                trace: file.lastPathComponent, seconds: outcome.seconds, meanLinkKbps: Int(mean / 1000),
                deliveredKbps: Int(outcome.deliveredBitRate / 1000), oracleKbps: Int(outcome.oracleBitRate / 1000),
                oracleShare: (outcome.oracleShare * 1000).rounded() / 1000, freezeSeconds: outcome.freezeSeconds,
                starvedSeconds: outcome.starvedSeconds, switchesUp: outcome.switchesUp, switchesDown: outcome.switchesDown,
                skips: outcome.skips, probes: outcome.probes, maximumLagSeconds: (outcome.maximumLag * 100).rounded() / 100,
                secondsPerLevel: Dictionary(uniqueKeysWithValues: outcome.secondsPerLevel.map { ("\($0.key)", $0.value) })))
        }
        FileHandle.standardError.write(Data("\n".utf8))
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            print(String(decoding: try encoder.encode(results), as: UTF8.self))
            return
        }
        print(Table(header: ["trace", "link kbit/s", "delivered", "oracle", "share", "freeze s", "starved s", "up/down", "skips", "max lag s"],
                    rows: results.map { result in
                        [result.trace, "\(result.meanLinkKbps)", "\(result.deliveredKbps)", "\(result.oracleKbps)",
                         String(format: "%.0f %%", result.oracleShare * 100), String(format: "%.1f", result.freezeSeconds),
                         String(format: "%.1f", result.starvedSeconds), "\(result.switchesUp)/\(result.switchesDown)", "\(result.skips)",
                         String(format: "%.2f", result.maximumLagSeconds)]
                    }).render())
        let shares = results.map(\.oracleShare).sorted()
        print(String(format: "%d traces, %.0f s each: delivered/oracle median %.0f %% (worst %.0f %%); freezes %.1f s in all beyond %.1f s starved; worst lag %.2f s",
                     results.count, results.first?.seconds ?? 0, shares[shares.count / 2] * 100, (shares.first ?? 0) * 100,
                     results.reduce(0) { $0 + $1.freezeSeconds }, results.reduce(0) { $0 + $1.starvedSeconds },
                     results.map(\.maximumLagSeconds).max() ?? 0))
    }

    /// The ladder's rungs from abr.json, each with its real segments' rates from its media playlist.
    private func loadLadder() throws -> ([SwitchingPolicy.Rung], Double) {
        let root = URL(fileURLWithPath: directory)
        let hintsFile = root.appendingPathComponent(HLSLayout.hintsFile)
        let hints: BandwidthHints
        do {
            hints = try JSONDecoder().decode(BandwidthHints.self, from: Data(contentsOf: hintsFile))
        } catch {
            throw CLIError(message: "\(hintsFile.path): cannot read the ladder's hints (\(error.localizedDescription)); "
                           + "give a transcode output or a live job's HLS folder", status: .badInput)
        }
        guard !hints.variants.isEmpty else { throw CLIError(message: "\(hintsFile.path): no variants", status: .badInput) }
        let offline = root.appendingPathComponent("hls")
        let hls = FileManager.default.fileExists(atPath: offline.appendingPathComponent(HLSLayout.masterPlaylist).path) ? offline : root
        let layout = HLSLayout(ladderGuid: hints.streamGuid)
        var rungs = SwitchingPolicy.Rung.ladder(hints)
        for index in rungs.indices {
            rungs[index].segmentBitRates = Self.segmentBitRates(playlist: hls.appendingPathComponent(layout.variantPlaylist(level: rungs[index].level)))
        }
        return (rungs, hints.keyframeInterval > 0 ? hints.keyframeInterval : 2)
    }

    /// Each segment's bytes over its duration, from a media playlist and the files beside it;
    /// empty when there is no playlist (the hints' rates stand in).
    static func segmentBitRates(playlist: URL) -> [Double] {
        guard let text = try? String(contentsOf: playlist, encoding: .utf8) else { return [] }
        var rates: [Double] = []
        var duration: Double?
        for line in text.split(whereSeparator: \.isNewline) {
            if line.hasPrefix("#EXTINF:") {
                duration = Double(line.dropFirst(8).prefix { $0 != "," })
            } else if !line.hasPrefix("#"), let seconds = duration, seconds > 0 {
                let file = playlist.deletingLastPathComponent().appendingPathComponent(String(line))
                if let size = (try? FileManager.default.attributesOfItem(atPath: file.path))?[.size] as? Int {
                    rates.append(Double(size * 8) / seconds)
                }
                duration = nil
            }
        }
        return rates
    }

    private func traceFiles() throws -> [URL] {
        let sources = traces.isEmpty ? ["Fixtures/traces/hsdpa-3g"] : traces
        var files: [URL] = []
        for source in sources {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: source, isDirectory: &isDirectory) else {
                throw CLIError(message: "--trace \(source): no such file or folder", status: .invalidProvisionOrArguments)
            }
            if isDirectory.boolValue {
                let names = try FileManager.default.contentsOfDirectory(atPath: source).filter { $0.hasSuffix(".json") }.sorted()
                files += names.map { URL(fileURLWithPath: source).appendingPathComponent($0) }
            } else {
                files.append(URL(fileURLWithPath: source))
            }
        }
        return files
    }
}
