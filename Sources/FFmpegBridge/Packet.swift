import MediaCore
import CFFmpeg

/// One compressed access unit (owns an AVPacket; refcounted data is shared by `reference()`).
/// Timestamps are in `timeBase`, which travels with the packet because AVPacket's own field
/// is not honoured by every libavformat 5.x call.
///
/// Not thread-safe; a packet handed to another queue must no longer be used by the sender.
public final class Packet: @unchecked Sendable {
    // @unchecked: ownership moves with the packet between queues; it is never shared.
    let pointer: UnsafeMutablePointer<AVPacket>
    public var timeBase: Rational

    public init() throws(FFmpegError) {
        guard let pointer = av_packet_alloc() else { throw FFmpegError(operation: "av_packet_alloc", message: "out of memory") }
        self.pointer = pointer
        self.timeBase = Rational(1, 1)
    }

    /// A packet holding a copy of `bytes`.
    public convenience init(bytes: [UInt8], timeBase: Rational) throws(FFmpegError) {
        try self.init()
        try check(av_new_packet(pointer, Int32(bytes.count)), "av_new_packet")
        bytes.withUnsafeBufferPointer { source in
            if let base = source.baseAddress { pointer.pointee.data.update(from: base, count: bytes.count) }
        }
        self.timeBase = timeBase
    }

    /// A packet holding `units` in Annex B form (each after a 4-byte start code), written straight
    /// into the packet's buffer: how a depacketized access unit becomes a packet with one copy.
    public convenience init(annexBUnits units: [[UInt8]], timeBase: Rational) throws(FFmpegError) {
        try self.init()
        let total = units.reduce(0) { $0 + 4 + $1.count }
        guard total <= Int(Int32.max) else { throw FFmpegError(operation: "av_new_packet", message: "access unit of \(total) bytes") }
        try check(av_new_packet(pointer, Int32(total)), "av_new_packet")
        if let data = pointer.pointee.data {
            var offset = 0
            for unit in units {
                (data + offset).update(from: [0, 0, 0, 1], count: 4)
                unit.withUnsafeBufferPointer { source in
                    if let base = source.baseAddress { (data + offset + 4).update(from: base, count: unit.count) }
                }
                offset += 4 + unit.count
            }
        }
        self.timeBase = timeBase
    }

    deinit {
        var p: UnsafeMutablePointer<AVPacket>? = pointer
        av_packet_free(&p)
    }

    /// A new packet sharing this one's data (no copy).
    public func reference() throws(FFmpegError) -> Packet {
        let copy = try Packet()
        try check(av_packet_ref(copy.pointer, pointer), "av_packet_ref")
        copy.timeBase = timeBase
        return copy
    }

    public var pts: Int64 {
        get { pointer.pointee.pts }
        set { pointer.pointee.pts = newValue }
    }

    public var dts: Int64 {
        get { pointer.pointee.dts }
        set { pointer.pointee.dts = newValue }
    }

    public var duration: Int64 {
        get { pointer.pointee.duration }
        set { pointer.pointee.duration = newValue }
    }

    public var streamIndex: Int {
        get { Int(pointer.pointee.stream_index) }
        set { pointer.pointee.stream_index = Int32(newValue) }
    }

    public var size: Int { Int(pointer.pointee.size) }

    public var isKeyframe: Bool {
        get { pointer.pointee.flags & cffmpeg_pkt_flag_key() != 0 }
        set {
            if newValue { pointer.pointee.flags |= cffmpeg_pkt_flag_key() } else { pointer.pointee.flags &= ~cffmpeg_pkt_flag_key() }
        }
    }

    public var isCorrupt: Bool { pointer.pointee.flags & cffmpeg_pkt_flag_corrupt() != 0 }

    /// The payload, copied out (for parsing headers and parameter sets, not per-frame hot paths).
    public var bytes: [UInt8] {
        guard let data = pointer.pointee.data, size > 0 else { return [] }
        return Array(UnsafeBufferPointer(start: data, count: size))
    }

    /// The payload in place, for reading without a copy; valid only inside `body`.
    public func withBytes<Result>(_ body: (UnsafeBufferPointer<UInt8>) throws -> Result) rethrows -> Result {
        guard let data = pointer.pointee.data, size > 0 else { return try body(UnsafeBufferPointer(start: nil, count: 0)) }
        return try body(UnsafeBufferPointer(start: data, count: size))
    }

    /// The first `count` payload bytes, copied out.
    public func prefix(_ count: Int) -> [UInt8] {
        guard let data = pointer.pointee.data, size > 0 else { return [] }
        return Array(UnsafeBufferPointer(start: data, count: min(count, size)))
    }

    /// Drops `count` bytes from the front of the payload without copying (the buffer stays shared).
    public func dropFirst(_ count: Int) {
        let n = min(count, size)
        pointer.pointee.data = pointer.pointee.data.map { $0 + n }
        pointer.pointee.size -= Int32(n)
    }

    /// Keeps only the first `count` payload bytes.
    public func truncate(to count: Int) {
        pointer.pointee.size = Int32(min(count, size))
    }

    /// One packet holding this one's payload followed by `other`'s, with this one's timestamps:
    /// how slices sent as separate packets become one access unit. Copies the payloads.
    public func appending(_ other: Packet) throws(FFmpegError) -> Packet {
        let merged = try Packet(bytes: bytes + other.bytes, timeBase: timeBase)
        merged.pts = pts
        merged.dts = dts
        merged.duration = duration
        merged.streamIndex = streamIndex
        merged.isKeyframe = isKeyframe || other.isKeyframe
        return merged
    }

    /// Converts every timestamp to `newTimeBase`.
    public func rescale(to newTimeBase: Rational) {
        guard newTimeBase != timeBase else { return }
        av_packet_rescale_ts(pointer, timeBase.av, newTimeBase.av)
        timeBase = newTimeBase
    }
}
