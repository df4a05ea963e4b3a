import Foundation
import FuzzTargets

// Built two ways. `./abr fuzz` compiles it with `-sanitize=fuzzer -D FUZZING`: libFuzzer owns
// `main` and calls `LLVMFuzzerTestOneInput` with each input for the target named by
// ABR_FUZZ_TARGET. A plain build is a replayer: `abr-fuzz <target> <file or folder>...` runs
// inputs (a corpus, a crash libFuzzer saved) through the same code without the sanitizer.

#if FUZZING
let selectedTarget: FuzzTarget = {
    let name = ProcessInfo.processInfo.environment["ABR_FUZZ_TARGET"] ?? ""
    guard let target = FuzzTarget(rawValue: name) else {
        FileHandle.standardError.write(Data("abr-fuzz: set ABR_FUZZ_TARGET to one of \(FuzzTarget.allCases.map(\.rawValue))\n".utf8))
        exit(2)
    }
    return target
}()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    selectedTarget.run(data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? [])
    return 0
}

/// libFuzzer's driver, for a program that keeps its own `main`.
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(_ argc: UnsafeMutablePointer<CInt>,
                         _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
                         _ testOneInput: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt) -> CInt

/// The test command builds the fuzzer with `-Xswiftc -sanitize=fuzzer` in the suite's own build
/// folder (only the Swift modules are rebuilt, instrumented). SwiftPM then links the executable
/// with `main` renamed to this function, as for any executable; it hands over to libFuzzer. With
/// `--sanitize=fuzzer` (`./abr fuzz`) libFuzzer's own `main` is linked and this goes unused.
@_cdecl("abr_fuzz_main")
func abrFuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc
    var arguments = argv
    return LLVMFuzzerRunDriver(&count, &arguments, fuzzTestOneInput)
}
#else
@main
struct ReplayInputs {
    static func main() {
        let arguments = CommandLine.arguments.dropFirst()
        guard let name = arguments.first, let target = FuzzTarget(rawValue: name), arguments.count > 1 else {
            FileHandle.standardError.write(Data("usage: abr-fuzz <\(FuzzTarget.allCases.map(\.rawValue).joined(separator: "|"))> <file or folder>...\n".utf8))
            exit(2)
        }
        var count = 0
        for path in arguments.dropFirst() {
            var isFolder: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isFolder) else { continue }
            let files = isFolder.boolValue
                ? ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted().map { "\(path)/\($0)" }
                : [path]
            for file in files {
                guard let data = FileManager.default.contents(atPath: file) else { continue }
                target.run(Array(data))
                count += 1
            }
        }
        print("\(name): \(count) inputs replayed, none crashed")
    }
}
#endif
