/// The job's audio for browsers comes in two Opus renditions, encoded once per job from the same
/// samples on the same 20 ms grid: `full` for every viewer whose link has room, and `light` for
/// a viewer held on the lowest rung by a link that cannot carry that rung with the full audio.
/// On such a link the full audio took a third of what the link carried (64 kbit/s of Opus is
/// about 90 kbit/s with its packets' headers, beside a 250 kbit/s rung); libwebrtc's own audio
/// network adaptor lowers a sender's Opus rate the same way. Both renditions have the same
/// timestamps, so a viewer moves between them at any packet, on its one audio SSRC.
public enum BrowserAudioRendition: Sendable, Equatable {
    case full
    case light

    /// The Opus encoder's rate (constrained VBR).
    public var bitRate: Int {
        switch self {
        case .full: 64_000
        case .light: 24_000
        }
    }

    /// Packets a second (20 ms each).
    public static let packetsPerSecond = 50
    /// IPv4, UDP, RTP, its header extensions and SRTP's tag (10 bytes with HMAC-SHA1-80, 16 with
    /// AES-GCM: the larger), per packet.
    public static let packetOverhead = 20 + 8 + 12 + 8 + 16

    /// What the rendition costs on a viewer's link (bit/s).
    public var wireBitRate: Double {
        Double(bitRate + Self.packetsPerSecond * Self.packetOverhead * 8)
    }
}

/// Which rendition a browser viewer gets, from where its link's estimate stands against the
/// lowest rung with the full audio beside it. Off the lowest rung a viewer always gets the full
/// audio (its link carries more than that rung). On it, the light audio once the estimate falls
/// under the lowest rung's video on the wire plus the full audio, and the full again once the
/// estimate is `margin` above that; a rendition is kept at least `hold` seconds, since each move
/// is a small discontinuity in the decoder's state.
///
/// Pure: the caller says what time it is.
public struct BrowserAudioChoice: Sendable, Equatable {
    public static let margin = 1.15
    public static let hold = 5.0

    public private(set) var rendition = BrowserAudioRendition.full
    private var changedAt = -Double.infinity

    public init() {}

    /// - Parameters:
    ///   - onLowestRung: the viewer's rung is the lowest of its ladder.
    ///   - estimate: its link's estimate (bit/s on the wire), nil before there is one.
    ///   - lowestVideoOnTheWire: the lowest rung's video as the link carries it (bit/s, headers
    ///     and encryption included, no audio).
    /// - Returns: the rendition from now on.
    @discardableResult
    public mutating func update(onLowestRung: Bool, estimate: Double?, lowestVideoOnTheWire: Double, at now: Double) -> BrowserAudioRendition {
        let wanted: BrowserAudioRendition
        if !onLowestRung {
            wanted = .full
        } else if let estimate, estimate.isFinite, lowestVideoOnTheWire.isFinite {
            let needed = lowestVideoOnTheWire + BrowserAudioRendition.full.wireBitRate
            wanted = estimate < needed ? .light : estimate > needed * Self.margin ? .full : rendition
        } else {
            wanted = rendition
        }
        // Leaving the lowest rung gives the full audio at once: the move up says the link has room.
        if wanted != rendition, !onLowestRung || now - changedAt >= Self.hold {
            rendition = wanted
            changedAt = now
        }
        return rendition
    }
}
