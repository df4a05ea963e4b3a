import Foundation

/// Writes a job's output aside and moves it into place only when the job succeeded, so a failed
/// or interrupted run never leaves output that looks complete. `report.json` moves last: its
/// presence marks a finished run.
struct OutputDirectory {
    let final: URL
    let staging: URL

    init(_ directory: URL) throws {
        final = directory
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        staging = directory.appendingPathComponent(".abr-worker-partial-\(ProcessInfo.processInfo.processIdentifier)")
        try? FileManager.default.removeItem(at: staging)
        try FileManager.default.createDirectory(at: staging, withIntermediateDirectories: true)
    }

    func commit(lastItem: String) throws {
        let fileManager = FileManager.default
        var items = try fileManager.contentsOfDirectory(atPath: staging.path).sorted()
        if let index = items.firstIndex(of: lastItem) { items.append(items.remove(at: index)) }
        // An earlier run's report goes first, so the directory never pairs new media with an old report.
        try? fileManager.removeItem(at: final.appendingPathComponent(lastItem))
        for item in items {
            let target = final.appendingPathComponent(item)
            try? fileManager.removeItem(at: target)
            try fileManager.moveItem(at: staging.appendingPathComponent(item), to: target)
        }
        try fileManager.removeItem(at: staging)
    }

    func abandon() {
        try? FileManager.default.removeItem(at: staging)
    }
}
