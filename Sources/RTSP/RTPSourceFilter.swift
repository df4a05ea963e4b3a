/// Which RTP packets on a publisher's track come from its real source (RFC 3550 §8.2 and A.1).
///
/// Over UDP the node can only route by source address and port, and a datagram with a forged
/// source address costs an attacker one packet. The filter makes such a packet worthless: it must
/// also carry the source's SSRC (learned from the first packet) and a sequence number within the window around the last one seen.
///
/// Out-of-window packets are dropped, unless the next one follows them in sequence (a sender that
/// restarted its sequence numbers: RFC 3550's `bad_seq`). A new SSRC is taken over only when the
/// old one has been silent for `ssrcTakeoverSilence` seconds and the new one sends
/// `probation` packets in sequence, so a forger cannot displace a source that is still sending.
public struct RTPSourceFilter: Sendable, Equatable {
    public enum Verdict: Sendable, Equatable {
        case accept
        /// Another SSRC than the source's.
        case foreignSource
        /// A sequence number far outside the window (RFC 3550 MAX_DROPOUT / MAX_MISORDER).
        case outOfSequence
    }

    public static let maximumDropout: UInt16 = 3000
    public static let maximumMisorder: UInt16 = 100
    public static let probation = 4
    public static let ssrcTakeoverSilence = 2.0

    public private(set) var ssrc: UInt32?
    private var highestSequence: UInt16 = 0
    private var badSequence: UInt16?
    private var lastAccepted: Double = 0
    /// A candidate new source: its SSRC, the next sequence expected and how many in a row it sent.
    private var candidate: (ssrc: UInt32, next: UInt16, count: Int)?
    public private(set) var foreignPackets = 0
    public private(set) var outOfSequencePackets = 0

    public init() {}

    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.ssrc == rhs.ssrc && lhs.highestSequence == rhs.highestSequence && lhs.badSequence == rhs.badSequence
            && lhs.foreignPackets == rhs.foreignPackets && lhs.outOfSequencePackets == rhs.outOfSequencePackets
    }

    /// Judges one packet arriving at `now` (seconds on a steady clock).
    public mutating func admit(ssrc packetSSRC: UInt32, sequence: UInt16, now: Double) -> Verdict {
        guard let ssrc else {
            start(ssrc: packetSSRC, sequence: sequence, now: now)
            return .accept
        }
        if packetSSRC != ssrc {
            guard now - lastAccepted >= Self.ssrcTakeoverSilence else {
                foreignPackets += 1
                return .foreignSource
            }
            if let current = candidate, current.ssrc == packetSSRC, current.next == sequence {
                candidate = (packetSSRC, sequence &+ 1, current.count + 1)
            } else {
                candidate = (packetSSRC, sequence &+ 1, 1)
            }
            guard candidate!.count >= Self.probation else {
                foreignPackets += 1
                return .foreignSource
            }
            start(ssrc: packetSSRC, sequence: sequence, now: now)
            return .accept
        }
        candidate = nil
        let ahead = sequence &- highestSequence
        if ahead < Self.maximumDropout {
            // In order, with a permissible gap (a wrap included).
            highestSequence = sequence
        } else if ahead <= UInt16.max - Self.maximumMisorder {
            // A very large jump: accepted only when the next packet follows it (the sender restarted).
            guard let bad = badSequence, bad == sequence else {
                badSequence = sequence &+ 1
                outOfSequencePackets += 1
                return .outOfSequence
            }
            highestSequence = sequence
        }
        // else: a duplicate or reordered packet within MAX_MISORDER, accepted as it is.
        badSequence = nil
        lastAccepted = now
        return .accept
    }

    private mutating func start(ssrc: UInt32, sequence: UInt16, now: Double) {
        self.ssrc = ssrc
        highestSequence = sequence
        badSequence = nil
        candidate = nil
        lastAccepted = now
    }
}
