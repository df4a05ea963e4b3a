import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Writes a file aside (a hidden `.<name>.partial` next to it, which `/hls` never serves) and
/// renames it into place, so a reader sees the old file or the whole new one.
///
/// `durable` adds an fsync before the rename, for outputs that must survive a power cut (an
/// offline run's files). A live job's segments and playlists are replaced every few seconds and
/// worth nothing after a crash, so they skip it: Foundation's atomic write syncs every file, and
/// on a variant's queue that put a disk flush (and its tail) on the encoding path of every
/// segment's first picture, about 20 times a second with 6 ladders.
enum ReplacingFile {
    static func write(_ bytes: some ContiguousBytes, to url: URL, durable: Bool) throws(TranscodeError) {
        try write(bytes, directory: url.deletingLastPathComponent().path, name: url.lastPathComponent, durable: durable)
    }

    /// The same, by paths: a live rung writes a part and its playlist three times a second, and
    /// Foundation's URL calls cost more than the writing.
    static func write(_ bytes: some ContiguousBytes, directory: String, name: String, durable: Bool) throws(TranscodeError) {
        let folder = directory.hasSuffix("/") ? directory : directory + "/"
        let aside = folder + "." + name + ".partial"
        let path = folder + name
        let descriptor = open(aside, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw failure("cannot create", aside) }
        var written = true
        bytes.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let count = Glibc.write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                if count < 0, errno == EINTR { continue }
                guard count > 0 else {
                    written = false
                    return
                }
                offset += count
            }
        }
        var failed = written ? nil : failure("cannot write", aside)
        if failed == nil, durable, fsync(descriptor) != 0 { failed = failure("cannot sync", aside) }
        close(descriptor)
        if let failed {
            unlink(aside)
            throw failed
        }
        guard rename(aside, path) == 0 else {
            let failed = failure("cannot rename into place", path)
            unlink(aside)
            throw failed
        }
    }

    static func write(_ text: String, to url: URL, durable: Bool) throws(TranscodeError) {
        try write(Array(text.utf8), to: url, durable: durable)
    }

    private static func failure(_ what: String, _ path: String) -> TranscodeError {
        .failed("\(what) \(path): \(String(cString: strerror(errno)))")
    }
}
