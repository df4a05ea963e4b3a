import NIOCore
import RTSP

/// The last video packets sent to one viewer, to answer its NACKs (RFC 4585 §6.2.1). Each entry
/// is the packet as the viewer got it (its own sequence number and timestamp) over the rung's
/// shared payload buffer, so keeping them costs headers, not pictures.
///
/// Feedback that lies cannot make it send much: only packets still held are resent, each at
/// most `maximumResends` times and not again within `resendInterval`, and at most
/// `maximumPerRequest` per NACK.
public struct RetransmissionHistory: Sendable {
    /// About a second of a 2 Mbit/s rung: older losses are past what a player would still wait for.
    public static let capacity = 256
    /// Chromium asks for a missing packet again every round trip or so, up to ten times, and
    /// then waits for a keyframe. Two resends lost in the overflow that lost the original (a
    /// 30-packet queue, run BE) left it asking for 2 s with nothing sent, and froze the picture
    /// until the rung's next IDR; a third, sent once the window had closed, would have arrived.
    public static let maximumResends = 6
    /// A packet is resent again only this long after its last resend (seconds): a NACK repeated
    /// sooner was sent before that resend could arrive. libwebrtc waits a round trip likewise.
    public static let resendInterval = 0.05
    public static let maximumPerRequest = 64

    private var slots: [(packet: RTPPacket, resends: Int, lastResend: Double)?]
    private var newest: UInt16?

    public init() {
        slots = Array(repeating: nil, count: Self.capacity)
    }

    /// Nothing sent so far is resent any more: the player was moved to another rung, whose IDR
    /// comes next, and the old rung's lost packets would only take the link from it.
    public mutating func forget() {
        slots = Array(repeating: nil, count: Self.capacity)
        newest = nil
    }

    public mutating func keep(_ packet: RTPPacket) {
        slots[Int(packet.sequenceNumber) % Self.capacity] = (packet, 0, -.infinity)
        newest = packet.sequenceNumber
    }

    /// Packets already sent, newest first, whose payloads add up to at least `bytes` (the held
    /// ones over again if they are fewer): what a probe sends as padding, as libwebrtc's
    /// "payload padding" does. Padding-only RTP packets carry at most 255 bytes each, and a
    /// bottleneck whose queue is counted in packets (a router's, htb's pfifo) fills with them
    /// at a fifth of the bytes full-size packets would take: a probe made of them overflowed a
    /// 100-packet queue holding 0.2 s of a 1.4 Mbit/s link, and lost the media behind it.
    /// The browser counts these in transport-wide feedback and drops them as duplicates (or,
    /// where the original was lost, repairs it). Resend counts are left alone.
    public func recent(bytes: Int, maximumPackets: Int = 2000) -> [RTPPacket] {
        guard let newest, bytes > 0 else { return [] }
        var held: [RTPPacket] = []
        for back in 0..<Self.capacity {
            let sequence = newest &- UInt16(back)
            guard let slot = slots[Int(sequence) % Self.capacity], slot.packet.sequenceNumber == sequence else { break }
            held.append(slot.packet)
        }
        guard !held.isEmpty else { return [] }
        var packets: [RTPPacket] = []
        var total = 0
        while total < bytes, packets.count < maximumPackets {
            let packet = held[packets.count % held.count]
            packets.append(packet)
            total += packet.payload.readableBytes + 14
        }
        return packets
    }

    /// The held packets `sequences` name that may be resent at `now`, in the order asked, and counts each resend.
    public mutating func resend(_ sequences: [UInt16], at now: Double) -> [RTPPacket] {
        var packets: [RTPPacket] = []
        for sequence in sequences {
            guard packets.count < Self.maximumPerRequest else { break }
            let index = Int(sequence) % Self.capacity
            guard let slot = slots[index], slot.packet.sequenceNumber == sequence, slot.resends < Self.maximumResends,
                  now - slot.lastResend >= Self.resendInterval else { continue }
            slots[index]?.resends += 1
            slots[index]?.lastResend = now
            packets.append(slot.packet)
        }
        return packets
    }

    /// A retransmission (RFC 4588 §4): the original sequence number, then the original payload,
    /// on the retransmission stream's own sequence.
    public static func retransmission(of packet: RTPPacket, payloadType: UInt8, ssrc: UInt32, sequence: UInt16) -> RTPPacket {
        var payload = ByteBuffer()
        payload.reserveCapacity(packet.payload.readableBytes + 2)
        payload.writeInteger(packet.sequenceNumber)
        payload.writeImmutableBuffer(packet.payload)
        return RTPPacket(marker: packet.marker, payloadType: payloadType, sequenceNumber: sequence, timestamp: packet.timestamp,
                         ssrc: ssrc, payload: payload)
    }
}

/// How much a viewer's retransmissions may add to its media: a token bucket at `share` of the
/// media's rate (never under `floor`). A NACK says the link lost packets; answering every one at
/// once on a link that is already full loses more, which the browser NACKs again: on a 1.3 Mbit/s
/// link, unbounded resends kept a 100-packet queue full for seconds after the viewer had moved to
/// a rung the link carried (50 % loss throughout). libwebrtc bounds them the same way (its
/// retransmission rate limiter). What the budget refuses, the rung's next IDR repairs.
///
/// Pure: the caller says what time it is.
public struct RetransmissionBudget: Sendable {
    public static let share = 0.25
    /// bit/s: a low rung's viewer can still have a lost packet or two resent.
    public static let floor = 150_000.0
    /// Seconds of the budget's rate that may go out in one burst.
    public static let depth = 0.5

    private var tokens = 0.0
    private var last: Double?

    public init() {}

    /// Whether a resend of `bytes` fits now, given the media's rate (bit/s); takes it from the budget if so.
    public mutating func allow(bytes: Int, mediaRate: Double, at now: Double) -> Bool {
        let rate = max(Self.floor, mediaRate.isFinite ? mediaRate * Self.share : 0) / 8
        let elapsed = last.map { max(0, now - $0) } ?? Self.depth
        last = now
        tokens = min(rate * Self.depth, tokens + elapsed * rate)
        guard tokens >= Double(bytes) else { return false }
        tokens -= Double(bytes)
        return true
    }
}
