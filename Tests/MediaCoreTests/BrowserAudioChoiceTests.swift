import MediaCore
import Testing

/// Which Opus rendition a browser viewer gets, on made-up estimates: the full one off the lowest
/// rung and wherever the link has room, the light one on the lowest rung of a link that cannot
/// carry it with the full audio, and no flapping between them.
@Suite struct BrowserAudioChoiceTests {
    /// The lowest rung's video on the wire, as a 240p rung of 250 kbit/s with its headers.
    static let lowest = 262_000.0
    static var needed: Double { lowest + BrowserAudioRendition.full.wireBitRate }

    @Test func theRenditionsCostWhatTheirPacketsDo() {
        // 64 kbit/s of Opus in 50 packets a second, each with 64 bytes of headers and tag.
        #expect(BrowserAudioRendition.full.wireBitRate == 64_000 + 25_600)
        #expect(BrowserAudioRendition.light.wireBitRate == 24_000 + 25_600)
    }

    @Test func offTheLowestRungTheAudioIsFull() {
        var choice = BrowserAudioChoice()
        #expect(choice.update(onLowestRung: false, estimate: 100_000, lowestVideoOnTheWire: Self.lowest, at: 0) == .full)
        #expect(choice.update(onLowestRung: false, estimate: nil, lowestVideoOnTheWire: Self.lowest, at: 1) == .full)
    }

    @Test func aLinkUnderTheLowestRungWithFullAudioGetsTheLightAudioAndRoomBringsTheFullBack() {
        var choice = BrowserAudioChoice()
        // No estimate yet: as it was.
        #expect(choice.update(onLowestRung: true, estimate: nil, lowestVideoOnTheWire: Self.lowest, at: 0) == .full)
        // Room for the rung and the full audio: full.
        #expect(choice.update(onLowestRung: true, estimate: Self.needed * 1.05, lowestVideoOnTheWire: Self.lowest, at: 1) == .full)
        // Under it: light.
        #expect(choice.update(onLowestRung: true, estimate: Self.needed * 0.95, lowestVideoOnTheWire: Self.lowest, at: 2) == .light)
        // Back over it, but within the margin: still light.
        #expect(choice.update(onLowestRung: true, estimate: Self.needed * 1.1, lowestVideoOnTheWire: Self.lowest, at: 10) == .light)
        // Past the margin, but within the hold since the last change: still light.
        var held = choice
        #expect(held.update(onLowestRung: true, estimate: Self.needed * 1.2, lowestVideoOnTheWire: Self.lowest, at: 6) == .light)
        // Past the margin after the hold: full.
        #expect(choice.update(onLowestRung: true, estimate: Self.needed * 1.2, lowestVideoOnTheWire: Self.lowest, at: 12) == .full)
    }

    @Test func aMoveUpGivesTheFullAudioAtOnce() {
        var choice = BrowserAudioChoice()
        #expect(choice.update(onLowestRung: true, estimate: 200_000, lowestVideoOnTheWire: Self.lowest, at: 0) == .light)
        // A second later the viewer moves up a rung: the hold does not keep the light audio.
        #expect(choice.update(onLowestRung: false, estimate: 500_000, lowestVideoOnTheWire: Self.lowest, at: 1) == .full)
    }

    @Test func nonsenseEstimatesChangeNothing() {
        var choice = BrowserAudioChoice()
        #expect(choice.update(onLowestRung: true, estimate: .nan, lowestVideoOnTheWire: Self.lowest, at: 0) == .full)
        #expect(choice.update(onLowestRung: true, estimate: 100_000, lowestVideoOnTheWire: .infinity, at: 1) == .full)
    }
}
