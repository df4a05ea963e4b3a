import ExtrasBase64
import MediaCore
import NIOCore
import RTSP
import Testing

@Suite struct RTPPacketTests {
    @Test func roundTripsAndSkipsExtensionsAndPadding() throws {
        let packet = RTPPacket(marker: true, payloadType: 96, sequenceNumber: 65535, timestamp: 0xDEADBEEF, ssrc: 42,
                               payload: ByteBuffer(bytes: [1, 2, 3]))
        var buffer = ByteBuffer()
        packet.write(to: &buffer)
        #expect(try RTPPacket(parsing: buffer) == packet)

        // One CSRC, a one-word header extension, two bytes of padding.
        let raw: [UInt8] = [0xB1, 0x60, 0, 1, 0, 0, 0, 9, 0, 0, 0, 7, 0, 0, 0, 5, 0xBE, 0xDE, 0, 1, 9, 9, 9, 9, 0x41, 0x42, 0, 2]
        let parsed = try RTPPacket(parsing: ByteBuffer(bytes: raw))
        #expect(parsed.payload == ByteBuffer(bytes: [0x41, 0x42]))
        #expect(parsed.payloadType == 96 && !parsed.marker && parsed.sequenceNumber == 1 && parsed.timestamp == 9)
    }

    @Test(arguments: [[UInt8](), [0x80, 0x60, 0, 1], [0x40] + [UInt8](repeating: 0, count: 11),
                      [0x8F] + [UInt8](repeating: 0, count: 11), [0xA0] + [UInt8](repeating: 0, count: 10) + [200],
                      [0x90] + [UInt8](repeating: 0, count: 11) + [0, 0, 0xFF, 0xFF]])
    func malformedPacketsAreErrors(_ bytes: [UInt8]) {
        #expect(throws: RTPPacket.ParseError.self) { _ = try RTPPacket(parsing: ByteBuffer(bytes: bytes)) }
    }

    @Test func sequenceArithmeticWraps() {
        #expect(SequenceNumber.distance(2, after: 65534) == 4)
        #expect(SequenceNumber.distance(65534, after: 2) == -4)
    }
}

@Suite struct RTCPTests {
    @Test func senderAndReceiverReportsRoundTrip() {
        let reports: [RTCPPacket] = [
            .senderReport(ssrc: 1, ntpTimestamp: RTCPPacket.ntpTimestamp(unixSeconds: 1_700_000_000.5), rtpTimestamp: 90000, packetCount: 10, octetCount: 12000),
            .receiverReport(ssrc: 2, blocks: [.init(ssrc: 1, fractionLost: 3, cumulativeLost: 7, highestSequence: 100, jitter: 5)]),
            .goodbye(ssrcs: [1]),
        ]
        var buffer = ByteBuffer()
        reports.forEach { $0.write(to: &buffer) }
        #expect(RTCPPacket.parseCompound(buffer) == reports)
        #expect(RTCPPacket.ntpTimestamp(unixSeconds: 0) >> 32 == 2_208_988_800)
        #expect(RTCPPacket.parseCompound(ByteBuffer(bytes: [0x80, 200, 0xFF, 0xFF])) == [])
    }
}

@Suite struct H264RTPTests {
    static let sps: [UInt8] = [0x67, 0x64, 0x00, 0x1f, 0xac, 0xb4, 0x02, 0x80]
    static let pps: [UInt8] = [0x68, 0xef, 0x3c, 0xb0]
    static func idr(_ size: Int) -> [UInt8] { [0x65] + (0..<size).map { UInt8(truncatingIfNeeded: $0 * 7) } }
    static func slice(_ size: Int) -> [UInt8] { [0x41] + (0..<size).map { UInt8(truncatingIfNeeded: $0 * 3) } }

    func packets(_ units: [[UInt8]], timestamp: UInt32, packetizer: inout H264Packetizer) -> [RTPPacket] {
        packetizer.packetize(units.map { $0[...] }, timestamp: timestamp)
    }

    @Test func packetizeThenDepacketizeGivesTheSameAccessUnits() {
        var packetizer = H264Packetizer(ssrc: 1, initialSequence: 65530, maximumPayload: 1000)
        let pictures: [[[UInt8]]] = [[Self.sps, Self.pps, Self.idr(5000)], [Self.slice(300)], [Self.slice(2500), Self.slice(10)]]
        var depacketizer = H264Depacketizer()
        var output: [H264AccessUnit] = []
        for (index, units) in pictures.enumerated() {
            let sent = packets(units, timestamp: UInt32(index * 3000), packetizer: &packetizer)
            #expect(sent.last?.marker == true)
            #expect(sent.dropLast().allSatisfy { !$0.marker })
            #expect(sent.allSatisfy { $0.payload.readableBytes <= 1000 })
            for packet in sent { output += depacketizer.push(packet) }
        }
        #expect(output.map(\.nalUnits) == pictures)
        #expect(output.map(\.timestamp) == [0, 3000, 6000])
        #expect(depacketizer.sps == Self.sps && depacketizer.pps == Self.pps)
    }

    @Test func readsSTAPA() {
        var payload = ByteBuffer(bytes: [24])
        for unit in [Self.sps, Self.pps, Self.idr(20)] {
            payload.writeInteger(UInt16(unit.count))
            payload.writeBytes(unit)
        }
        var depacketizer = H264Depacketizer()
        let units = depacketizer.push(RTPPacket(marker: true, payloadType: 96, sequenceNumber: 1, timestamp: 5, ssrc: 1, payload: payload))
        #expect(units.map(\.nalUnits) == [[Self.sps, Self.pps, Self.idr(20)]])
    }

    @Test func lossInsideAFragmentWaitsForTheNextIDR() {
        var packetizer = H264Packetizer(ssrc: 1, maximumPayload: 500)
        var depacketizer = H264Depacketizer()
        var reorder = RTPReorderBuffer(capacity: 4)
        var sent: [RTPPacket] = []
        sent += packets([Self.idr(1500)], timestamp: 0, packetizer: &packetizer)       // 4 packets
        sent += packets([Self.slice(1500)], timestamp: 3000, packetizer: &packetizer)  // 4 packets
        sent += packets([Self.slice(100)], timestamp: 6000, packetizer: &packetizer)   // 1 packet
        sent += packets([Self.idr(100)], timestamp: 9000, packetizer: &packetizer)     // 1 packet
        sent += packets([Self.slice(100)], timestamp: 12000, packetizer: &packetizer)
        sent.remove(at: 5)  // a middle fragment of the second picture
        var output: [H264AccessUnit] = []
        for packet in sent {
            for (ready, lost) in reorder.push(packet) { output += depacketizer.push(ready, lostBefore: lost) }
        }
        // Flush what the reorder buffer still holds behind the gap.
        for _ in 0..<4 {
            for (ready, lost) in reorder.push(RTPPacket(marker: true, payloadType: 96, sequenceNumber: packetizer.sequenceNumber, timestamp: 99999, ssrc: 1, payload: ByteBuffer(bytes: [0x09, 0x10]))) {
                output += depacketizer.push(ready, lostBefore: lost)
            }
            packetizer.sequenceNumber &+= 1
        }
        // The damaged picture and the one that depends on it are gone; decoding resumes at the IDR.
        #expect(Array(output.map(\.timestamp).prefix(3)) == [0, 9000, 12000])
        #expect(!output.contains { $0.timestamp == 3000 || $0.timestamp == 6000 })
        #expect(reorder.lostPackets == 1)
    }

    @Test func startsOnlyAtAnIDR() {
        var packetizer = H264Packetizer(ssrc: 1)
        var depacketizer = H264Depacketizer()
        var output: [H264AccessUnit] = []
        for packet in packets([Self.slice(10)], timestamp: 0, packetizer: &packetizer) + packets([Self.idr(10)], timestamp: 3000, packetizer: &packetizer) {
            output += depacketizer.push(packet)
        }
        #expect(output.map(\.timestamp) == [3000])
        #expect(depacketizer.droppedAccessUnits == 1)
    }

    @Test func reorderingWithinTheWindowIsRepaired() {
        var packetizer = H264Packetizer(ssrc: 1, maximumPayload: 300)
        var sent = packets([Self.idr(1000)], timestamp: 0, packetizer: &packetizer) + packets([Self.slice(400)], timestamp: 3000, packetizer: &packetizer)
        sent.swapAt(1, 3)
        sent.swapAt(4, 5)
        sent.append(sent[2])  // a duplicate
        var reorder = RTPReorderBuffer(capacity: 8)
        var depacketizer = H264Depacketizer()
        var output: [H264AccessUnit] = []
        for packet in sent {
            for (ready, lost) in reorder.push(packet) {
                #expect(!lost)
                output += depacketizer.push(ready, lostBefore: lost)
            }
        }
        #expect(output.map(\.nalUnits) == [[Self.idr(1000)], [Self.slice(400)]])
    }

    @Test(arguments: [[UInt8](), [28], [28, 0x45], [0xFC, 0x85, 1], [25, 0, 1], [24, 0, 50, 1], [0x80]])
    func hostilePayloadsNeverTrap(_ bytes: [UInt8]) {
        var depacketizer = H264Depacketizer()
        _ = depacketizer.push(RTPPacket(marker: true, payloadType: 96, sequenceNumber: 1, timestamp: 1, ssrc: 1, payload: ByteBuffer(bytes: bytes)))
        #expect(depacketizer.waitingForKeyframe)
    }
}

@Suite struct AACRTPTests {
    @Test func packetizeThenDepacketize() {
        var packetizer = AACPacketizer(ssrc: 3)
        var depacketizer = AACDepacketizer()
        let frames: [[UInt8]] = [[1, 2, 3], Array(repeating: 9, count: 700)]
        var output: [AACDepacketizer.Frame] = []
        for (index, frame) in frames.enumerated() {
            if let packet = packetizer.packetize(frame[...], timestamp: UInt32(index * 1024)) { output += depacketizer.push(packet) }
        }
        #expect(output == [.init(timestamp: 0, data: frames[0]), .init(timestamp: 1024, data: frames[1])])
    }

    @Test func readsSeveralUnitsInOnePacketAsFFmpegMaySend() {
        var payload = ByteBuffer()
        payload.writeInteger(UInt16(32))
        payload.writeInteger(UInt16(2 << 3))
        payload.writeInteger(UInt16(3 << 3))
        payload.writeBytes([1, 2, 7, 8, 9])
        var depacketizer = AACDepacketizer()
        let frames = depacketizer.push(RTPPacket(marker: true, payloadType: 97, sequenceNumber: 1, timestamp: 100, ssrc: 1, payload: payload))
        #expect(frames == [.init(timestamp: 100, data: [1, 2]), .init(timestamp: 1124, data: [7, 8, 9])])
    }

    @Test(arguments: [[UInt8](), [0, 16], [0, 7, 0, 8], [0, 16, 0xFF, 0xF8, 1]])
    func hostilePayloadsNeverTrap(_ bytes: [UInt8]) {
        var depacketizer = AACDepacketizer()
        #expect(depacketizer.push(RTPPacket(marker: true, payloadType: 97, sequenceNumber: 1, timestamp: 1, ssrc: 1, payload: ByteBuffer(bytes: bytes))).isEmpty)
    }
}

@Suite struct Base64Tests {
    @Test func roundTrips() {
        for length in 0..<10 {
            let bytes = (0..<length).map { UInt8($0 * 37 & 0xFF) }
            #expect(Base64.decodeLenient(Base64.encodeToString(bytes: bytes)) == bytes)
        }
        #expect(Base64.encodeToString(bytes: [0x68, 0xef, 0x3c, 0xb0]) == "aO88sA==")
        #expect(Base64.decodeLenient("a b") == nil)
    }

    /// What real `sprop-parameter-sets` and Basic credentials carry: padding dropped, or the URL alphabet.
    @Test func takesWhatSendersWrite() {
        #expect(Base64.decodeLenient("aO88sA") == [0x68, 0xef, 0x3c, 0xb0])
        #expect(Base64.decodeLenient("-_8") == [0xfb, 0xff])
        #expect(Base64.decodeLenient("+/8=") == [0xfb, 0xff])
        #expect(Base64.decodeLenient("A") == nil)
        #expect(Base64.decodeLenient("a=b=") == nil)
        #expect(H264.parameterSets(fromSprop: "Z0IAHpWoKA9k,aM48gA") == [[0x67, 0x42, 0x00, 0x1e, 0x95, 0xa8, 0x28, 0x0f, 0x64], [0x68, 0xce, 0x3c, 0x80]])
    }
}

@Suite struct ReceptionStatisticsTests {
    func packet(_ sequence: UInt16, _ timestamp: UInt32) -> RTPPacket {
        RTPPacket(marker: false, payloadType: 96, sequenceNumber: sequence, timestamp: timestamp, ssrc: 77, payload: ByteBuffer())
    }

    @Test func countsLossAcrossASequenceWrap() throws {
        var statistics = ReceptionStatistics()
        // 65530 … 5 with 65533 and 2 missing: 12 expected, 10 received.
        for (index, sequence) in ([65530, 65531, 65532, 65534, 65535, 0, 1, 3, 4, 5] as [UInt16]).enumerated() {
            statistics.record(packet(sequence, UInt32(index) * 3000), arrival: Double(index) / 30, clockRate: 90000)
        }
        let report = statistics.reportBlock()
        let block = try #require(report)
        #expect(block.ssrc == 77)
        #expect(block.highestSequence == 65536 + 5)
        #expect(block.cumulativeLost == 2)
        #expect(block.fractionLost == UInt8((2 << 8) / 12))
        #expect(block.jitter < 10, "evenly spaced packets have no jitter")
        // The next interval, without loss, reports no fraction lost.
        statistics.record(packet(6, 30000), arrival: 10.0 / 30, clockRate: 90000)
        let next = statistics.reportBlock()
        #expect(next?.fractionLost == 0)
    }

    @Test func jitterGrowsWithIrregularArrival() {
        var statistics = ReceptionStatistics()
        for index in 0..<50 {
            statistics.record(packet(UInt16(index), UInt32(index) * 3000), arrival: Double(index) / 30 + (index % 2 == 0 ? 0.02 : 0), clockRate: 90000)
        }
        #expect(statistics.jitter > 1000)
    }
}

@Suite struct PlayerTimelineTests {
    @Test func catchUpCompressesThenRunsAtTheSourcesPace() {
        var timeline = PlayerTimeline(speed: 8)
        #expect(timeline.video(90_000) == 90_000)            // the IDR keeps its time
        #expect(timeline.video(93_000) == 90_375)            // 3000 ticks in 375
        #expect(timeline.video(150_000) == 97_500)           // the newest cached picture
        timeline.finishCatchUp(lastSource: 150_000)
        #expect(timeline.shift == 52_500)
        #expect(timeline.video(153_000) == 100_500)          // live: 3000 ticks in 3000
        #expect(timeline.audio(150_000 * 48_000 / 90_000, rate: 48_000) == 97_500 * 48_000 / 90_000)
    }

    @Test func aPacedCatchUpIsTimedAsItIsHandedOver() {
        var timeline = PlayerTimeline(speed: 8)
        #expect(timeline.video(90_000) == 90_000)                              // the IDR
        #expect(timeline.video(93_000, handedOverAfter: 9_000) == 99_000)      // handed over 0.1 s later
        #expect(timeline.video(96_000, handedOverAfter: 9_000) == 99_001)      // in the same batch: a tick on
        #expect(timeline.video(150_000, handedOverAfter: 90_000) == 180_000)   // 1 s on: the link's pace
        timeline.finishCatchUp(lastSource: 150_000)
        #expect(timeline.shift == -30_000)
        #expect(timeline.video(153_000) == 183_000)
    }

    @Test func aCatchUpEndedByAMoveGoesOnByTheWallClock() {
        var timeline = PlayerTimeline(speed: 8)
        _ = timeline.video(90_000)
        #expect(timeline.video(120_000, handedOverAfter: 18_000) == 108_000)
        // The move's IDR is 2 s of source on, 0.2 s after the last picture was handed over.
        timeline.finishCatchUp(continuingAt: 300_000, after: 18_000)
        #expect(!timeline.isCatchingUp)
        #expect(timeline.video(300_000) == 126_000)
        #expect(timeline.video(303_000) == 129_000)
        #expect(timeline.audio(300_000 * 48_000 / 90_000, rate: 48_000) == 126_000 * 48_000 / 90_000)
    }

    @Test func withoutACatchUpTimeIsTheSources() {
        var timeline = PlayerTimeline()
        timeline.finishCatchUp(lastSource: nil)
        #expect(timeline.video(5000) == 5000)
        #expect(timeline.video(8000) == 8000)
        #expect(timeline.audio(123, rate: 44_100) == 123)
    }
}
