import Foundation
import Testing
@testable import Transcoder

/// Live HLS files are replaced in place without a disk sync; what a reader sees is still the old
/// file or the whole new one, and a failure says which file and why.
@Suite struct ReplacingFileTests {
    @Test func replacesWholeFilesAndLeavesNothingAside() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("replace-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let playlist = directory.appendingPathComponent("playlist.m3u8")
        try ReplacingFile.write("#EXTM3U\n", to: playlist, durable: false)
        let segment = [UInt8](repeating: 0x47, count: 300_000)
        try ReplacingFile.write(segment, to: directory.appendingPathComponent("seg_1.m4s"), durable: true)
        try ReplacingFile.write("#EXTM3U\n#EXT-X-VERSION:7\n", to: playlist, durable: false)
        #expect(try String(contentsOf: playlist, encoding: .utf8) == "#EXTM3U\n#EXT-X-VERSION:7\n")
        #expect(try Data(contentsOf: directory.appendingPathComponent("seg_1.m4s")) == Data(segment))
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted() == ["playlist.m3u8", "seg_1.m4s"])
    }

    @Test func aFailureNamesTheFileAndTheReason() {
        let missing = FileManager.default.temporaryDirectory.appendingPathComponent("no-such-\(UUID().uuidString)/playlist.m3u8")
        #expect {
            try ReplacingFile.write("#EXTM3U\n", to: missing, durable: false)
        } throws: { error in
            "\(error)".contains(missing.deletingLastPathComponent().path) && "\(error)".contains("No such file or directory")
        }
    }
}
