import ArgumentParser
import MediaCore
import NodeApp

struct Validate: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Check a provision (Stream Manager 2.0 or 1.0) and print its normalised ladder.")

    @Argument(help: "Provision JSON file.")
    var file: String

    @Option(help: "Top stream guid for a Stream Manager 1.0 meta document (default live/<name>).")
    var streamGuid: String?

    func run() throws {
        let ladder = try ProvisionFile.load(path: file, streamGuid: streamGuid)
        print("stream \(ladder.streamGuid): \(ladder.variants.count) variant\(ladder.variants.count == 1 ? "" : "s")")
        print(Table(
            header: ["level", "stream guid", "size", "bit rate"],
            rows: ladder.variants.map { ["\($0.level)", $0.streamGuid, "\($0.width)x\($0.height)", formatBitRate($0.bitRate)] }
        ).render())
    }
}

/// A plain text table, columns padded to their widest cell.
struct Table {
    var header: [String]
    var rows: [[String]]

    func render() -> String {
        let all = [header] + rows
        let widths = header.indices.map { column in all.map { $0[column].count }.max() ?? 0 }
        func line(_ cells: [String]) -> String {
            zip(cells, widths).map { $0.padding(toLength: $1, withPad: " ", startingAt: 0) }.joined(separator: "  ")
                .trimmingCharacters(in: .whitespaces)
        }
        return ([line(header), line(widths.map { String(repeating: "-", count: $0) })] + rows.map(line)).joined(separator: "\n")
    }
}

func formatBitRate(_ bitsPerSecond: Int) -> String {
    bitsPerSecond >= 1_000_000 ? String(format: "%.2f Mbit/s", Double(bitsPerSecond) / 1e6)
        : String(format: "%.0f kbit/s", Double(bitsPerSecond) / 1e3)
}
