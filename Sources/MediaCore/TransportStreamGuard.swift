/// Watches a publisher's MPEG-TS on its way to a demuxer (SRT's libavformat), and says stop
/// before the demuxer or its H.264 parser sees bytes that would make them grow without bound.
///
/// libavformat's parser joins a video PES stream's bytes into access units, and keeps gathering
/// until a slice starts a new picture (first_mb_in_slice = 0); behind it, each NAL unit becomes an
/// allocation of its own. So this guard counts what that framing would gather, on every H.264 PID
/// (stream_type 0x1B in a PMT, or a PES stream_id 0xE0–0xEF): NAL units and bytes since the last
/// picture start, each against the caps every ingest shares. Other PES PIDs are held to the same
/// caps per PES. A value: it keeps no socket, and the fuzz target drives it byte by byte.
public struct TransportStreamGuard: Sendable {
    public struct Limits: Sendable {
        /// NAL units one access unit may hold (the node-wide cap).
        public var maximumNALUnits = H264.maximumNALUnitsPerAccessUnit
        /// Bytes one access unit may take (as RTSP's depacketizer).
        public var maximumAccessUnitBytes = 8 * 1024 * 1024
        /// PIDs followed at once (a TS has a handful).
        public var maximumPIDs = 64
        public init() {}
    }

    public enum Violation: Error, Sendable, Equatable, CustomStringConvertible {
        case tooManyNALUnits(pid: UInt16, limit: Int)
        case accessUnitTooLarge(pid: UInt16, limit: Int)
        case tooManyPIDs(limit: Int)

        public var description: String {
            switch self {
            case let .tooManyNALUnits(pid, limit):
                "PID \(pid) carries more than \(limit) H.264 NAL units in one access unit (the node's limit)"
            case let .accessUnitTooLarge(pid, limit):
                "PID \(pid) carries an access unit of more than \(limit) bytes (the node's limit)"
            case let .tooManyPIDs(limit):
                "the transport stream uses more than \(limit) PIDs"
            }
        }
    }

    private struct Scan: Sendable {
        var isVideo = false
        /// Zero bytes just seen (0, 1, or 2 meaning two or more), across packet boundaries.
        var zeros = 0
        /// 0: not after a start code; 1: the next byte is a NAL header; 2: the next byte opens a slice's header.
        var expect = 0
        var units = 0
        var bytes = 0
    }

    public static let packetSize = 188
    public let limits: Limits
    private var pending: [UInt8] = []
    private var scans: [UInt16: Scan] = [:]
    /// PMT PIDs from the PAT, and the H.264 PIDs the PMTs name.
    private var pmtPIDs: Set<UInt16> = []
    private var videoPIDs: Set<UInt16> = []

    public init(limits: Limits = .init()) {
        self.limits = limits
    }

    /// Looks at the next bytes of the stream (any cut: packets may span calls). Throws at the first
    /// packet past a cap; bytes that are not TS packets are left to the demuxer to refuse.
    public mutating func inspect(_ bytes: some Collection<UInt8>) throws(Violation) {
        pending.append(contentsOf: bytes)
        var offset = 0
        while pending.count - offset >= Self.packetSize {
            guard pending[offset] == 0x47 else {
                offset += 1  // resynchronise as a demuxer would
                continue
            }
            try packet(pending[offset..<offset + Self.packetSize])
            offset += Self.packetSize
        }
        pending.removeFirst(offset)
    }

    private mutating func packet(_ packet: ArraySlice<UInt8>) throws(Violation) {
        let base = packet.startIndex
        let unitStart = packet[base + 1] & 0x40 != 0
        let pid = UInt16(packet[base + 1] & 0x1F) << 8 | UInt16(packet[base + 2])
        let control = (packet[base + 3] >> 4) & 0x3
        guard control & 0x1 != 0 else { return }  // no payload
        var start = base + 4
        if control & 0x2 != 0 { start += 1 + Int(packet[base + 4]) }
        guard start < packet.endIndex else { return }
        let payload = packet[start...]
        if pid == 0 {
            if unitStart { readPAT(payload) }
            return
        }
        if pmtPIDs.contains(pid) {
            if unitStart { readPMT(payload) }
            return
        }
        if pid == 0x1FFF { return }  // null packets
        if scans[pid] == nil {
            guard unitStart else { return }  // a PES is followed from its start
            guard scans.count < limits.maximumPIDs else { throw .tooManyPIDs(limit: limits.maximumPIDs) }
            scans[pid] = Scan()
        }
        var scan = scans.removeValue(forKey: pid)!
        defer { scans[pid] = scan }
        var body = payload
        if unitStart {
            // A PES header: 00 00 01, stream_id, length (2), flags (2), header length, header data.
            if payload.count >= 9, payload[payload.startIndex] == 0, payload[payload.startIndex + 1] == 0, payload[payload.startIndex + 2] == 1 {
                let streamID = payload[payload.startIndex + 3]
                scan.isVideo = videoPIDs.contains(pid) || (0xE0...0xEF).contains(streamID)
                let headerLength = 9 + Int(payload[payload.startIndex + 8])
                body = payload.dropFirst(headerLength)
            } else {
                body = payload[payload.endIndex...]
            }
            scan.zeros = 0
            scan.expect = 0
            // Other PES: each one alone is held to the caps.
            if !scan.isVideo { (scan.units, scan.bytes) = (0, 0) }
        }
        if videoPIDs.contains(pid) { scan.isVideo = true }
        try count(body, into: &scan, pid: pid)
    }

    /// Counts start codes and bytes; on a video PID a slice whose first_mb_in_slice is 0 (its
    /// first bit set) starts a new picture and so a new count, as libavcodec's parser frames.
    private func count(_ body: ArraySlice<UInt8>, into scan: inout Scan, pid: UInt16) throws(Violation) {
        for byte in body {
            switch scan.expect {
            case 1:
                let type = byte & 0x1F
                scan.expect = scan.isVideo && (1...5).contains(type) ? 2 : 0
            case 2:
                if byte & 0x80 != 0 { (scan.units, scan.bytes) = (1, 0) }
                scan.expect = 0
            default:
                break
            }
            if byte == 1, scan.zeros >= 2 {
                scan.units += 1
                scan.expect = 1
                guard scan.units <= limits.maximumNALUnits else { throw .tooManyNALUnits(pid: pid, limit: limits.maximumNALUnits) }
            }
            scan.zeros = byte == 0 ? min(scan.zeros + 1, 2) : 0
        }
        scan.bytes += body.count
        guard scan.bytes <= limits.maximumAccessUnitBytes else { throw .accessUnitTooLarge(pid: pid, limit: limits.maximumAccessUnitBytes) }
    }

    /// A PSI section's bytes after the pointer field, when whole in this packet (they are, for
    /// PAT and PMT of the sizes publishers send; a longer one is skipped, not trusted).
    private func section(_ payload: ArraySlice<UInt8>) -> ArraySlice<UInt8>? {
        guard let pointer = payload.first else { return nil }
        let start = payload.startIndex + 1 + Int(pointer)
        guard start + 3 <= payload.endIndex else { return nil }
        let length = Int(payload[start + 1] & 0x0F) << 8 | Int(payload[start + 2])
        let end = start + 3 + length
        guard length >= 9, end <= payload.endIndex else { return nil }
        return payload[start..<end - 4]  // without the CRC
    }

    private mutating func readPAT(_ payload: ArraySlice<UInt8>) {
        guard let section = section(payload), section.first == 0x00 else { return }
        var index = section.startIndex + 8
        while index + 4 <= section.endIndex, pmtPIDs.count < limits.maximumPIDs {
            let program = UInt16(section[index]) << 8 | UInt16(section[index + 1])
            let pid = UInt16(section[index + 2] & 0x1F) << 8 | UInt16(section[index + 3])
            if program != 0 { pmtPIDs.insert(pid) }
            index += 4
        }
    }

    private mutating func readPMT(_ payload: ArraySlice<UInt8>) {
        guard let section = section(payload), section.first == 0x02, section.count >= 12 else { return }
        let infoLength = Int(section[section.startIndex + 10] & 0x0F) << 8 | Int(section[section.startIndex + 11])
        var index = section.startIndex + 12 + infoLength
        while index + 5 <= section.endIndex, videoPIDs.count < limits.maximumPIDs {
            let type = section[index]
            let pid = UInt16(section[index + 1] & 0x1F) << 8 | UInt16(section[index + 2])
            let length = Int(section[index + 3] & 0x0F) << 8 | Int(section[index + 4])
            if type == 0x1B { videoPIDs.insert(pid) }
            index += 5 + length
        }
    }
}
