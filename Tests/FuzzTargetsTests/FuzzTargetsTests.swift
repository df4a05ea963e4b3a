import AccessTokens
import Digests
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

    /// The token targets check what they accept, so their seeds must hold tokens the node accepts
    /// (signed under the targets' key) beside the ones it refuses.
    @Test func theTokenSeedsHoldAcceptedAndRefusedTokens() throws {
        func seed(_ target: FuzzTarget, _ name: String) throws -> String {
            try String(contentsOf: Self.corpusRoot.appendingPathComponent(target.corpusDirectory).appendingPathComponent(name), encoding: .utf8)
        }
        let authority = TokenAuthority(secret: FuzzTarget.fuzzSecret)
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        #expect(try authority.verify(seed(.bearerToken, "valid"), now: now) == .success("admin"))
        for (name, reason) in [("expired", "the token has expired"), ("other-key", "the token's signature does not match"),
                               ("alg-none", "the token's algorithm none is not HS256"), ("crit", "the token is not a valid JWT"),
                               ("exp-string", "the token is not a valid JWT")] {
            guard case let .failure(refusal) = try authority.verify(seed(.bearerToken, name), now: now) else {
                Issue.record("bearer-token/\(name) was accepted"); continue
            }
            #expect(refusal.reason == reason, "\(name)")
        }
        let key = Digest.Key(FuzzTarget.fuzzSecret.utf8)
        func playback(_ name: String) throws -> PlaybackToken.Refusal? {
            try PlaybackToken.verify(seed(.playbackToken, name), paths: ["live/stream1", "live/stream1_2"], epoch: 7, clientAddress: "127.0.0.1",
                                     now: 1_800_000_000, key: key)
        }
        #expect(try playback("ladder-any-address") == nil && playback("rung-bound-address") == nil)
        #expect(try playback("expired") == .expired(at: 1_700_000_000) && playback("other-epoch") == .forged && playback("other-stream") == .forged)
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
