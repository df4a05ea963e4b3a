/// Puts RTP packets back in sequence order within a small window (UDP reorders), drops
/// duplicates and late packets, and reports where packets were lost.
public struct RTPReorderBuffer: Sendable {
    public let capacity: Int
    private var expected: UInt16?
    private var pending: [UInt16: RTPPacket] = [:]
    public private(set) var lostPackets = 0

    public init(capacity: Int = 32) {
        self.capacity = max(1, capacity)
    }

    /// Returns packets ready in order; `lostBefore` marks the first packet after a gap.
    public mutating func push(_ packet: RTPPacket) -> [(packet: RTPPacket, lostBefore: Bool)] {
        guard let next = expected else {
            expected = packet.sequenceNumber &+ 1
            return [(packet, false)]
        }
        let distance = SequenceNumber.distance(packet.sequenceNumber, after: next)
        if distance < 0 {
            // Late or duplicate: already passed, or a source that restarted far back.
            if distance < -1000 {
                reset(to: packet)
                return [(packet, true)]
            }
            return []
        }
        if distance > 1000 {
            reset(to: packet)
            return [(packet, true)]
        }
        pending[packet.sequenceNumber] = packet
        var released: [(RTPPacket, Bool)] = []
        var lost = false
        while true {
            if let ready = pending.removeValue(forKey: expected!) {
                released.append((ready, lost))
                lost = false
                expected = expected! &+ 1
            } else if pending.count >= capacity, let nearest = pending.keys.min(by: {
                SequenceNumber.distance($0, after: expected!) < SequenceNumber.distance($1, after: expected!)
            }) {
                // Waited long enough: what is missing is lost.
                lostPackets += SequenceNumber.distance(nearest, after: expected!)
                expected = nearest
                lost = true
            } else {
                break
            }
        }
        return released
    }

    private mutating func reset(to packet: RTPPacket) {
        pending.removeAll()
        expected = packet.sequenceNumber &+ 1
    }
}
