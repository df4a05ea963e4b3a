import Foundation
import FuzzTargets
import Testing

/// The fuzz targets as tests: every committed seed, then seeded mutations of them, through the
/// same entry points libFuzzer drives (`./abr fuzz`). A crash here stops the test run, which is
/// the point: these inputs come from the network.
@Suite struct FuzzTargetsTests {
    static let corpusRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../../Fixtures/fuzz").standardizedFileURL

    static func seeds(_ target: FuzzTarget) -> [[UInt8]] {
        let folder = corpusRoot.appendingPathComponent(target.corpusDirectory)
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []).sorted()
        return names.compactMap { FileManager.default.contents(atPath: folder.appendingPathComponent($0).path).map(Array.init) }
    }

    @Test(arguments: FuzzTarget.allCases)
    func everyTargetHasARealSeedCorpus(_ target: FuzzTarget) {
        #expect(!Self.seeds(target).isEmpty, "Fixtures/fuzz/\(target.rawValue) has no seeds")
    }

    @Test(arguments: FuzzTarget.allCases)
    func seedsAndTheirMutationsRunClean(_ target: FuzzTarget) {
        let seeds = Self.seeds(target)
        var mutator = Mutator(seed: UInt64(target.rawValue.utf8.reduce(5381) { $0 &* 33 &+ UInt64($1) }))
        for seed in seeds { target.run(seed) }
        let rounds = target == .rtspConnection ? 300 : 2000
        for round in 0..<rounds {
            let base = seeds.isEmpty ? [] : seeds[round % seeds.count]
            let other = seeds.isEmpty ? [] : seeds[(round * 7 + 3) % seeds.count]
            target.run(mutator.mutate(base, splicingWith: other))
        }
    }
}

/// libFuzzer's mutations without its coverage feedback: flips, interesting values, inserts,
/// deletions, duplication of runs, splices and truncation. Deterministic for a given seed.
struct Mutator {
    private var state: UInt64

    init(seed: UInt64) { state = seed | 1 }

    mutating func next() -> UInt64 {
        state ^= state << 13
        state ^= state >> 7
        state ^= state << 17
        return state
    }

    mutating func below(_ bound: Int) -> Int { bound <= 0 ? 0 : Int(next() % UInt64(bound)) }

    static let interesting: [[UInt8]] = [[0], [0xFF], [0x7F], [0x80], [0xFF, 0xFF], [0, 0], [0x80, 0], [0xFF, 0xFF, 0xFF, 0xFF],
                                         Array("\r\n".utf8), Array(";".utf8), Array("=".utf8), Array(":".utf8), Array("-1".utf8),
                                         Array("99999999999999999999".utf8), Array("nan".utf8), Array("inf".utf8), Array("$".utf8),
                                         Array("\r\n\r\n".utf8), Array("%2f".utf8), Array("..".utf8), Array("a=".utf8), Array("m=".utf8)]

    mutating func mutate(_ input: [UInt8], splicingWith other: [UInt8]) -> [UInt8] {
        var bytes = input
        for _ in 0...below(4) {
            switch below(8) {
            case 0 where !bytes.isEmpty:
                let index = below(bytes.count)
                bytes[index] ^= UInt8(1 << below(8))
            case 1 where !bytes.isEmpty:
                bytes[below(bytes.count)] = UInt8(truncatingIfNeeded: next())
            case 2:
                bytes.insert(contentsOf: Self.interesting[below(Self.interesting.count)], at: below(bytes.count + 1))
            case 3 where !bytes.isEmpty:
                let start = below(bytes.count)
                bytes.removeSubrange(start..<min(bytes.count, start + 1 + below(16)))
            case 4 where !bytes.isEmpty:
                let start = below(bytes.count)
                let run = bytes[start..<min(bytes.count, start + 1 + below(64))]
                bytes.insert(contentsOf: Array(repeating: Array(run), count: 1 + below(8)).joined(), at: below(bytes.count + 1))
            case 5 where !other.isEmpty:
                let cut = below(bytes.count + 1)
                bytes = Array(bytes[..<cut]) + other[below(other.count)...]
            case 6:
                bytes = Array(bytes.prefix(below(bytes.count + 1)))
            default:
                bytes.append(UInt8(truncatingIfNeeded: next()))
            }
        }
        return bytes
    }
}
