import AccessTokens
import Digests
import Foundation
import MediaCore
import Testing

/// Signed playback tokens as values: what each refusal says, and the playlist rewriting.
@Suite struct PlaybackTokenTests {
    static let key = Digest.Key("group key for the tests".utf8)

    @Test func eachWayATokenCanBeWrongIsRefusedWithItsReason() {
        let token = PlaybackToken(path: "live/paid", epoch: 7, expires: 2000).signed(with: Self.key)
        func check(_ text: String?, paths: [String] = ["live/paid_1", "live/paid"], epoch: Int64 = 7, address: String = "10.0.0.1",
                   now: Int64 = 1000, key: Digest.Key = Self.key) -> PlaybackToken.Refusal? {
            PlaybackToken.verify(text, paths: paths, epoch: epoch, clientAddress: address, now: now, key: key)
        }
        #expect(check(token) == nil)
        #expect(check(nil) == .missing && PlaybackToken.Refusal.missing.status == 401)
        #expect(check("x") == .malformed && check(String(repeating: "1", count: 200)) == .malformed)
        #expect(check(token, now: 2000) == .expired(at: 2000) && PlaybackToken.Refusal.expired(at: 1).status == 403)
        #expect(check(token, paths: ["live/other_1", "live/other"]) == .forged, "another stream's")
        #expect(check(token, epoch: 8) == .forged, "the same stream provisioned again")
        #expect(check(token, key: Digest.Key("another group".utf8)) == .forged, "another node group's")
        let bound = PlaybackToken(path: "live/paid", epoch: 7, expires: 2000, clientAddress: "10.0.0.1").signed(with: Self.key)
        #expect(check(bound) == nil && check(bound, address: "10.0.0.2") == .forged, "another address's")
        // Changing the expiry or the binding breaks the signature.
        let parts = token.split(separator: ".")
        #expect(check("9999.n.\(parts[2])") == .forged && check("2000.a.\(parts[2])") == .forged)
        // A token has one spelling: the same expiry written another way, or the signature with
        // stray bits in its last character (the same 32 bytes to a lax decoder), is not a token.
        #expect(check("+2000.n.\(parts[2])") == .malformed && check("02000.n.\(parts[2])") == .malformed)
        // A 32-byte signature's last character carries 4 bits and 2 zero bits: the next character
        // up (A → B, w → x, 0 → 1) decodes to the same bytes.
        let last = parts[2].last!
        #expect(Array("AEIMQUYcgkosw048").contains(last))
        #expect(check("2000.n.\(parts[2].dropLast())\(Character(UnicodeScalar(last.asciiValue! + 1)))") == .malformed)
    }

    @Test func playlistsCarryTheTokenIntoEveryURL() {
        let playlist = "#EXTM3U\n#EXT-X-MAP:URI=\"init.mp4\"\n#EXTINF:2.0,\nsegment_00001.m4s\n#EXT-X-STREAM-INF:BANDWIDTH=1\npaid_2/index.m3u8?x=1\n"
        let carried = PlaylistTokens.carrying("T", in: playlist)
        #expect(carried == "#EXTM3U\n#EXT-X-MAP:URI=\"init.mp4?token=T\"\n#EXTINF:2.0,\nsegment_00001.m4s?token=T\n#EXT-X-STREAM-INF:BANDWIDTH=1\npaid_2/index.m3u8?x=1&token=T\n")
    }

    @Test func theProvisionAsksForSignedPlaybackOrSaysWhatIsWrong() throws {
        let base = #"{"streamGuid":"live/p","streams":[{"streamGuid":"live/p_1","abrLevel":1,"videoParams":{"videoWidth":640,"videoHeight":360,"videoBitRate":800000}}]"#
        #expect(try ProvisionParser.parse(Array((base + #","playback":{"signed":true}}"#).utf8)).requiresSignedPlayback)
        #expect(try !ProvisionParser.parse(Array((base + "}").utf8)).requiresSignedPlayback)
        let error = #expect(throws: ProvisionError.self) { try ProvisionParser.parse(Array((base + #","playback":{"signed":"yes"}}"#).utf8)) }
        #expect(error?.description.contains("provision.playback.signed") == true, "\(String(describing: error))")
    }
}
