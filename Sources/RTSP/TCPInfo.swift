/// What Linux's `TCP_INFO` socket option says about one connection (`struct tcp_info` of
/// `linux/tcp.h`; glibc's copy of the struct stops before the fields that matter here, so the
/// bytes are read by offset). Only what a player's bandwidth estimate needs.
public struct TCPInfo: Sendable, Equatable {
    /// The kernel's estimate of the rate it delivers data at, bytes per second (`tcpi_delivery_rate`, Linux 4.9).
    public var deliveryRate: UInt64
    /// The sample behind `deliveryRate` was limited by the application, not the network: the link may carry more.
    public var deliveryRateAppLimited: Bool
    /// Smoothed round-trip time and the least seen, microseconds.
    public var roundTripTime: UInt32
    public var minimumRoundTripTime: UInt32
    /// Bytes the application wrote that the kernel has not sent yet (`tcpi_notsent_bytes`).
    public var notSentBytes: UInt32
    /// Segments sent and not acknowledged, the congestion window (segments) and the segment size.
    public var unackedSegments: UInt32
    public var congestionWindow: UInt32
    public var maximumSegmentSize: UInt32
    public var totalRetransmissions: UInt32
    /// Bytes the peer acknowledged over the connection's life.
    public var bytesAcked: UInt64

    /// Bytes of `struct tcp_info` up to and including `tcpi_delivery_rate`.
    public static let minimumSize = 168

    public init(deliveryRate: UInt64, deliveryRateAppLimited: Bool, roundTripTime: UInt32, minimumRoundTripTime: UInt32,
                notSentBytes: UInt32, unackedSegments: UInt32, congestionWindow: UInt32, maximumSegmentSize: UInt32,
                totalRetransmissions: UInt32, bytesAcked: UInt64) {
        self.deliveryRate = deliveryRate
        self.deliveryRateAppLimited = deliveryRateAppLimited
        self.roundTripTime = roundTripTime
        self.minimumRoundTripTime = minimumRoundTripTime
        self.notSentBytes = notSentBytes
        self.unackedSegments = unackedSegments
        self.congestionWindow = congestionWindow
        self.maximumSegmentSize = maximumSegmentSize
        self.totalRetransmissions = totalRetransmissions
        self.bytesAcked = bytesAcked
    }

    /// Reads the kernel's struct (little-endian, as on every Linux this project builds for); nil
    /// when fewer bytes than `minimumSize` came back (a kernel older than 4.9 has no delivery rate).
    public init?(bytes: some Collection<UInt8>) {
        let raw = Array(bytes)
        guard raw.count >= Self.minimumSize else { return nil }
        func u32(_ offset: Int) -> UInt32 {
            raw[offset..<offset + 4].enumerated().reduce(UInt32(0)) { $0 | UInt32($1.element) << (8 * $1.offset) }
        }
        func u64(_ offset: Int) -> UInt64 {
            raw[offset..<offset + 8].enumerated().reduce(UInt64(0)) { $0 | UInt64($1.element) << (8 * $1.offset) }
        }
        // Byte 7 holds `tcpi_delivery_rate_app_limited:1` in its lowest bit (x86-64 and arm64 bit-field order).
        self.init(deliveryRate: u64(160), deliveryRateAppLimited: raw[7] & 1 == 1, roundTripTime: u32(68), minimumRoundTripTime: u32(148),
                  notSentBytes: u32(144), unackedSegments: u32(24), congestionWindow: u32(80), maximumSegmentSize: u32(16),
                  totalRetransmissions: u32(100), bytesAcked: u64(120))
    }
}
