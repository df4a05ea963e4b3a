import Digests
import MediaCore
import NIOCore
import RTMP
import Testing

@Suite struct AMF0Tests {
    @Test func roundTripsEveryKind() throws {
        let values: [AMF0Value] = [
            .string("connect"), .number(1), .boolean(true), .null, .undefined,
            .object([("app", .string("live")), ("tcUrl", .string("rtmp://h/live")), ("nested", .object([("x", .number(-2.5))]))]),
            .ecmaArray([("width", .number(1280)), ("framerate", .number(30))]),
            .strictArray([.number(1), .string("two")]),
            .date(1_700_000_000_000),
            .string(String(repeating: "é", count: 40_000)),  // over 65 535 bytes: a long string
        ]
        #expect(try AMF0.decodeAll(AMF0.encode(values)) == values)
    }

    /// A `connect` laid out as ffmpeg's client writes it (name, transaction 1, an object with
    /// app, type and tcUrl), written out byte by byte from AMF0's specification.
    @Test func readsFFmpegsConnect() throws {
        let bytes: [UInt8] = [
            0x02, 0x00, 0x07, 0x63, 0x6f, 0x6e, 0x6e, 0x65, 0x63, 0x74, 0x00, 0x3f, 0xf0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x03, 0x00, 0x03, 0x61, 0x70, 0x70, 0x02, 0x00, 0x04, 0x6c, 0x69, 0x76, 0x65,
            0x00, 0x04, 0x74, 0x79, 0x70, 0x65, 0x02, 0x00, 0x0a, 0x6e, 0x6f, 0x6e, 0x70, 0x72, 0x69, 0x76, 0x61, 0x74, 0x65,
            0x00, 0x05, 0x74, 0x63, 0x55, 0x72, 0x6c, 0x02, 0x00, 0x15,
        ] + Array("rtmp://127.0.0.1/live".utf8) + [0x00, 0x00, 0x09]
        let values = try AMF0.decodeAll(ByteBuffer(bytes: bytes))
        #expect(values.count == 3)
        #expect(values[0] == .string("connect") && values[1] == .number(1))
        #expect(values[2]["app"] == .string("live") && values[2]["tcUrl"] == .string("rtmp://127.0.0.1/live"))
    }

    @Test func hostileBytesGetErrorsNotTraps() {
        let deep = [UInt8](repeating: 0x0A, count: 1) + [0, 0, 0, 1]
        var nested: [UInt8] = []
        for _ in 0..<100 { nested += deep }
        let cases: [[UInt8]] = [
            [0x00, 0x01],  // a number cut short
            [0x02, 0xFF, 0xFF, 0x41],  // a string longer than what follows
            [0x0A, 0xFF, 0xFF, 0xFF, 0xFF],  // a strict array claiming four billion elements
            nested,  // arrays nested a hundred deep
            [0x03, 0x00, 0x01, 0x61],  // an object whose property value never comes
            [0x11],  // AMF3's marker
            [0x02, 0x00, 0x02, 0xC3, 0x28],  // not UTF-8
        ]
        for bytes in cases {
            #expect(throws: AMF0Error.self, "\(bytes.prefix(8))") { try AMF0.decodeAll(ByteBuffer(bytes: bytes)) }
        }
    }
}

@Suite struct RTMPChunkTests {
    /// Messages through the encoder, then the decoder fed a byte at a time.
    @Test func messagesSurviveChunkingByteAtATime() throws {
        var encoder = RTMPChunkEncoder()
        var wire = ByteBuffer()
        let big = ByteBuffer(bytes: (0..<10_000).map { UInt8($0 & 0xFF) })
        let messages = [
            RTMPMessage.control(RTMPMessage.Kind.setChunkSize, 1000),
            RTMPMessage(typeID: RTMPMessage.Kind.video, streamID: 1, timestamp: 33, payload: big),
            RTMPMessage(typeID: RTMPMessage.Kind.audio, streamID: 1, timestamp: 0x0100_0000, payload: ByteBuffer(bytes: [0xAF, 1, 2, 3])),
            RTMPMessage.command([.string("publish"), .number(0), .null, .string("stream1_1")], streamID: 1),
        ]
        for message in messages { encoder.encode(message, into: &wire) }
        var decoder = RTMPChunkDecoder()
        var input = ByteBuffer(bytes: [3] + [UInt8](repeating: 0, count: 1536 * 2))
        var received: [RTMPInbound] = []
        while let item = try decoder.next(&input) { if let item { received.append(item) } }
        #expect(received.count == 1)  // the handshake answer; C2 consumed
        var bytes = Array(wire.readableBytesView)[...]
        var out: [RTMPMessage] = []
        var pending = ByteBuffer()
        while !bytes.isEmpty {
            pending.writeInteger(bytes.removeFirst())
            while let item = try decoder.next(&pending) {
                if case let .message(message)? = item { out.append(message) }
            }
        }
        #expect(out == messages)
    }

    @Test func limitsAndNonsenseCloseTheConnectionWithAReason() throws {
        func decode(_ bytes: [UInt8]) throws {
            var decoder = RTMPChunkDecoder()
            var buffer = ByteBuffer(bytes: [3] + [UInt8](repeating: 0, count: 3072) + bytes)
            while try decoder.next(&buffer) != nil {}
        }
        #expect(throws: RTMPProtocolError.unsupportedVersion(6)) {
            var decoder = RTMPChunkDecoder()
            var buffer = ByteBuffer(bytes: [6] + [UInt8](repeating: 0, count: 1536))
            _ = try decoder.next(&buffer)
        }
        // A 16 MiB message.
        #expect(throws: RTMPProtocolError.self) { try decode([0x04, 0, 0, 0, 0xFF, 0xFF, 0xFF, 9, 1, 0, 0, 0]) }
        // Set Chunk Size to 2^30.
        #expect(throws: RTMPProtocolError.chunkSizeOutOfRange(1 << 30, limit: 65_536)) {
            try decode([0x02, 0, 0, 0, 0, 0, 4, 1, 0, 0, 0, 0, 0x40, 0, 0, 0])
        }
        // A continuation (type 3) on a chunk stream that never had a header.
        #expect(throws: RTMPProtocolError.continuationWithoutHeader(chunkStream: 7)) { try decode([0xC7, 1, 2, 3]) }
        // Chunk streams opened without end, each holding part of a message.
        var many: [UInt8] = []
        for id in 3..<63 { many += [UInt8(id), 0, 0, 0, 0, 1, 0, 9, 1, 0, 0, 0] + [UInt8](repeating: 0, count: 128) }
        for id in 0..<20 { many += [0x00, UInt8(id), 0, 0, 0, 0, 1, 0, 9, 1, 0, 0, 0] + [UInt8](repeating: 0, count: 128) }
        #expect(throws: RTMPProtocolError.tooManyChunkStreams(limit: 64)) { try decode(many) }
    }

    @Test func anAbortDropsAPartialMessageAndAcknowledgementsFollowTheWindow() throws {
        var decoder = RTMPChunkDecoder()
        var buffer = ByteBuffer(bytes: [3] + [UInt8](repeating: 0, count: 3072))
        while try decoder.next(&buffer) != nil {}
        var encoder = RTMPChunkEncoder()
        var wire = ByteBuffer()
        encoder.encode(.control(RTMPMessage.Kind.windowAcknowledgementSize, 70_000), into: &wire)
        // Half of a 200-byte message on chunk stream 5, then Abort for it, then a whole one.
        wire.writeBytes([0x05, 0, 0, 0, 0, 0, 200, 9, 1, 0, 0, 0] + [UInt8](repeating: 1, count: 128))
        encoder.encode(.control(RTMPMessage.Kind.abort, 5), into: &wire)
        for _ in 0..<600 {
            encoder.encode(RTMPMessage(typeID: RTMPMessage.Kind.audio, streamID: 1, payload: ByteBuffer(bytes: [UInt8](repeating: 2, count: 120))), into: &wire)
        }
        var items: [RTMPInbound] = []
        while let item = try decoder.next(&wire) { if let item { items.append(item) } }
        let media = items.compactMap { if case let .message(m) = $0, m.typeID == RTMPMessage.Kind.audio || m.typeID == RTMPMessage.Kind.video { m } else { nil } }
        #expect(media.count == 600 && media.allSatisfy { $0.typeID == RTMPMessage.Kind.audio })
        let acknowledgements = items.compactMap { if case let .acknowledge(n) = $0 { n } else { nil } }
        #expect(acknowledgements.count == 1 && acknowledgements[0] >= 70_000, "\(acknowledgements)")
    }
}

@Suite struct RTMPHandshakeTests {
    @Test func aPlainClientGetsItsC1Echoed() {
        let c1 = [UInt8](repeating: 7, count: 4) + [0, 0, 0, 0] + [UInt8](repeating: 9, count: 1528)
        let answer = Array(RTMPHandshake.answer(toC1: ByteBuffer(bytes: c1)).readableBytesView)
        #expect(answer.count == 1 + 2 * 1536 && answer[0] == 3)
        #expect(Array(answer[1537...]) == c1)
    }

    /// A Flash-style C1 (version set, digest at the offset its own bytes give) gets S1 with the
    /// server's digest and S2 signed with the key derived from the client's digest, checked here
    /// with HMAC-SHA256 as a Flash Player would.
    @Test func aDigestClientGetsASignedAnswer() {
        let playerKey = Array("Genuine Adobe Flash Player 001".utf8)
        let serverKey = Array("Genuine Adobe Flash Media Server 001".utf8)
        let tail: [UInt8] = [0xF0, 0xEE, 0xC2, 0x4A, 0x80, 0x68, 0xBE, 0xE8, 0x2E, 0x00, 0xD0, 0xD1, 0x02, 0x9E, 0x7E, 0x57,
                             0x6E, 0xEC, 0x5D, 0x2D, 0x29, 0x80, 0x6F, 0xAB, 0x93, 0xB8, 0xE6, 0x36, 0xCF, 0xEB, 0x31, 0xAE]
        func mac(_ data: [UInt8], _ key: [UInt8]) -> [UInt8] { Array(Digest.hmac(.sha256, data, key: Digest.Key(key))) }
        var c1 = (0..<1536).map { UInt8(($0 * 31 + 7) & 0xFF) }
        c1.replaceSubrange(4..<8, with: [0x80, 0x00, 0x07, 0x02])
        let offset = (Int(c1[8]) + Int(c1[9]) + Int(c1[10]) + Int(c1[11])) % 728 + 12
        let clientDigest = mac(Array(c1[..<offset]) + Array(c1[(offset + 32)...]), playerKey)
        c1.replaceSubrange(offset..<offset + 32, with: clientDigest)
        let answer = Array(RTMPHandshake.answer(toC1: ByteBuffer(bytes: c1)).readableBytesView)
        let s1 = Array(answer[1..<1537]), s2 = Array(answer[1537...])
        #expect(s1[4..<8] != [0, 0, 0, 0])
        let serverOffset = (Int(s1[8]) + Int(s1[9]) + Int(s1[10]) + Int(s1[11])) % 728 + 12
        #expect(Array(s1[serverOffset..<serverOffset + 32]) == mac(Array(s1[..<serverOffset]) + Array(s1[(serverOffset + 32)...]), serverKey))
        let signingKey = mac(clientDigest, serverKey + tail)
        #expect(Array(s2[1504...]) == mac(Array(s2[..<1504]), signingKey))
        // A C1 whose digest does not check out is answered plainly.
        c1[offset] ^= 0xFF
        #expect(Array(RTMPHandshake.answer(toC1: ByteBuffer(bytes: c1)).readableBytesView[1537...]) == c1)
    }
}

@Suite struct RTMPPublishSessionTests {
    static func command(_ values: [AMF0Value], stream: UInt32 = 0) -> RTMPMessage { .command(values, streamID: stream) }

    static func sent(_ actions: [RTMPPublishSession.Action]) -> [[AMF0Value]] {
        actions.flatMap { action -> [[AMF0Value]] in
            guard case let .send(messages) = action else { return [] }
            return messages.filter { $0.typeID == RTMPMessage.Kind.amf0Command }.compactMap { try? AMF0.decodeAll($0.payload) }
        }
    }

    /// The sequence ffmpeg and OBS send, with credentials on the stream key as Red5 clients put them.
    @Test func ffmpegsCommandSequenceIsAnsweredAndThePublishDecided() throws {
        var session = RTMPPublishSession()
        let connected = session.receive(Self.command([.string("connect"), .number(1),
                                                      .object([("app", .string("live")), ("tcUrl", .string("rtmp://127.0.0.1:1935/live"))])]))
        let types = connected.flatMap { action -> [UInt8] in if case let .send(m) = action { m.map(\.typeID) } else { [] } }
        #expect(types == [5, 6, 1, 20])
        #expect(Self.sent(connected).first?[3]["code"] == .string("NetConnection.Connect.Success"))
        _ = session.receive(Self.command([.string("releaseStream"), .number(2), .null, .string("stream1_1?user=u&password=p%40ss")]))
        let fc = session.receive(Self.command([.string("FCPublish"), .number(3), .null, .string("stream1_1?user=u&password=p%40ss")]))
        #expect(Self.sent(fc).first?[0] == .string("onFCPublish"))
        let created = session.receive(Self.command([.string("createStream"), .number(4), .null]))
        #expect(Self.sent(created).first == [.string("_result"), .number(4), .null, .number(1)])
        let publish = session.receive(Self.command([.string("publish"), .number(5), .null, .string("stream1_1?user=u&password=p%40ss"), .string("live")], stream: 1))
        guard case let .decide(intent)? = publish.first else { Issue.record("no decision asked: \(publish)"); return }
        #expect(intent == RTMPPublishIntent(path: "live/stream1_1", username: "u", password: "p@ss", tcUrl: "rtmp://127.0.0.1:1935/live"))
        let accepted = session.accept()
        #expect(Self.sent(accepted).first?[3]["code"] == .string("NetStream.Publish.Start"))
        #expect(session.isPublishing)
        let unpublished = session.receive(Self.command([.string("FCUnpublish"), .number(6), .null, .string("stream1_1")]))
        #expect(unpublished.contains { if case .end(_, false) = $0 { true } else { false } })
    }

    @Test func credentialsOnTheURLAndRefusals() {
        var session = RTMPPublishSession()
        _ = session.receive(Self.command([.string("connect"), .number(1),
                                          .object([("app", .string("live?user=a&password=b")), ("tcUrl", .string("rtmp://h/live?user=a&password=b"))])]))
        guard case let .decide(intent)? = session.receive(Self.command([.string("publish"), .number(0), .null, .string("s_1")], stream: 1)).first else {
            Issue.record("no decision")
            return
        }
        #expect(intent.path == "live/s_1" && intent.username == "a" && intent.password == "b")
        let refused = session.refuse(code: "NetConnection.Connect.Rejected", description: "live/s_1 needs the provision's credentials")
        #expect(Self.sent(refused).first?[3]["code"] == .string("NetConnection.Connect.Rejected"))
        #expect(refused.contains { if case .end(_, true) = $0 { true } else { false } })
        // Nothing more is taken from a refused publisher.
        #expect(session.receive(RTMPMessage(typeID: 9, streamID: 1, payload: ByteBuffer(bytes: [0x17, 1, 0, 0, 0]))).isEmpty)
    }

    static func published() -> RTMPPublishSession {
        var session = RTMPPublishSession()
        _ = session.receive(command([.string("connect"), .number(1), .object([("app", .string("live"))])]))
        _ = session.receive(command([.string("publish"), .number(0), .null, .string("s_1")], stream: 1))
        _ = session.accept()
        return session
    }

    static let sps: [UInt8] = [0x67, 0x64, 0x00, 0x1f, 0xac, 0xd9, 0x40, 0x50, 0x05, 0xbb, 0x01, 0x10, 0x00, 0x00, 0x03, 0x00, 0x10,
                               0x00, 0x00, 0x03, 0x03, 0xc0, 0xf1, 0x83, 0x19, 0x60]
    static let pps: [UInt8] = [0x68, 0xeb, 0xe3, 0xcb, 0x22, 0xc0]

    @Test func avcAndAACBecomeFormatsAndTimedMedia() throws {
        var session = Self.published()
        let record: [UInt8] = [1, 0x64, 0, 0x1f, 0xFF, 0xE1, 0, UInt8(Self.sps.count)] + Self.sps + [1, 0, UInt8(Self.pps.count)] + Self.pps
        let header = session.receive(RTMPMessage(typeID: 9, streamID: 1, payload: ByteBuffer(bytes: [0x17, 0, 0, 0, 0] + record)))
        guard case let .media(.formats(video?, nil))? = header.first else { Issue.record("\(header)"); return }
        #expect(video.width == 1280 && video.height == 720)
        let config = AAC.audioSpecificConfig(objectType: 2, sampleRate: 48000, channels: 2)
        _ = session.receive(RTMPMessage(typeID: 8, streamID: 1, payload: ByteBuffer(bytes: [0xAF, 0] + config)))
        // A B-frame stream's picture: decoded at 1000 ms, shown 66 ms later.
        let idr: [UInt8] = [0x65, 0x88, 0x84, 0x00]
        let picture = session.receive(RTMPMessage(typeID: 9, streamID: 1, timestamp: 1000,
                                                  payload: ByteBuffer(bytes: [0x17, 1, 0, 0, 66, 0, 0, 0, UInt8(idr.count)] + idr)))
        guard case let .media(.video(units, time, isKeyframe))? = picture.first else { Issue.record("\(picture)"); return }
        #expect(units == [Self.sps, Self.pps, idr], "a keyframe carries the sequence header's sets in-band")
        #expect(isKeyframe && time == MediaTime(ticks: 1066, timeBase: Rational(1, 1000)))
        let frame = session.receive(RTMPMessage(typeID: 8, streamID: 1, timestamp: 1010, payload: ByteBuffer(bytes: [0xAF, 1, 0x21, 0x10])))
        guard case let .media(.audio(bytes, audioTime))? = frame.first else { Issue.record("\(frame)"); return }
        #expect(bytes == [0x21, 0x10] && audioTime.ticks == 1010)
    }

    @Test func codecsTheNodeDoesNotTakeAreRefusedWithAStatusThatSaysWhy() {
        for (payload, word) in [([0x90, 0x68, 0x76, 0x63, 0x31] as [UInt8], "hvc1"), ([0x1C, 0, 0, 0, 0], "HEVC"), ([0x12, 0, 0, 0, 0], "H.263")] {
            var session = Self.published()
            let actions = session.receive(RTMPMessage(typeID: 9, streamID: 1, payload: ByteBuffer(bytes: payload)))
            let status = Self.sent(actions).first?[3]
            #expect(status?["code"] == .string("NetStream.Publish.Rejected"))
            #expect(status?["description"]?.string?.contains(word) == true, "\(String(describing: status))")
            #expect(actions.contains { if case .end(_, true) = $0 { true } else { false } })
        }
        var session = Self.published()
        let mp3 = session.receive(RTMPMessage(typeID: 8, streamID: 1, payload: ByteBuffer(bytes: [0x2F, 0xFF, 0xFB])))
        #expect(Self.sent(mp3).first?[3]["description"]?.string?.contains("MP3") == true)
    }

    @Test func timestampsWrapAndJumpsStartANewTimeline() {
        var session = Self.published()
        let record: [UInt8] = [1, 0x64, 0, 0x1f, 0xFF, 0xE1, 0, UInt8(Self.sps.count)] + Self.sps + [1, 0, UInt8(Self.pps.count)] + Self.pps
        _ = session.receive(RTMPMessage(typeID: 9, streamID: 1, payload: ByteBuffer(bytes: [0x17, 0, 0, 0, 0] + record)))
        func picture(_ timestamp: UInt32) -> [RTMPPublishSession.Action] {
            session.receive(RTMPMessage(typeID: 9, streamID: 1, timestamp: timestamp, payload: ByteBuffer(bytes: [0x27, 1, 0, 0, 0, 0, 0, 0, 2, 0x41, 0x9a])))
        }
        func times(_ actions: [RTMPPublishSession.Action]) -> [Int64] {
            actions.compactMap { if case let .media(.video(_, time, _)) = $0 { time.ticks } else { nil } }
        }
        let before = times(picture(UInt32.max - 40))
        let after = times(picture(26))  // 67 ms later, across the wrap
        #expect(after[0] - before[0] == 67)
        let jumped = picture(500_000)
        #expect(jumped.contains { if case .media(.timelineRestarted) = $0 { true } else { false } })
        #expect(times(jumped)[0] == after[0] + 100)
    }
}

/// Round three's RTMP attacks, on the decoder alone (no socket): each costs the node no more than
/// a small multiple of what the peer sent.
@Suite struct RTMPHostileChunkTests {
    static func handshaken(_ limits: RTMPChunkDecoder.Limits = .init()) throws -> RTMPChunkDecoder {
        var decoder = RTMPChunkDecoder(limits: limits)
        var buffer = ByteBuffer(bytes: [3] + [UInt8](repeating: 0, count: 3072))
        while try decoder.next(&buffer) != nil {}
        return decoder
    }

    /// Reassembly copied the whole unfinished message on every chunk, so a few KB of 1-byte chunks
    /// cost seconds of the event loop every RTMP connection shares. A 512 KiB message in 1-byte
    /// chunks took minutes of copying; appended in place it is read in linear time (the time
    /// limit only catches the quadratic copy coming back).
    @Test(.timeLimit(.minutes(1))) func oneByteChunksOfALargeMessageAreReadInLinearTime() throws {
        var decoder = try Self.handshaken()
        var encoder = RTMPChunkEncoder()
        var wire = ByteBuffer()
        encoder.encode(.control(RTMPMessage.Kind.setChunkSize, 1), into: &wire)
        let length = 512 * 1024
        wire.writeBytes([0x06, 0, 0, 0, UInt8(length >> 16), UInt8((length >> 8) & 0xFF), UInt8(length & 0xFF), 9, 1, 0, 0, 0, 0x17])
        for index in 1..<length { wire.writeBytes([0xC6, UInt8(truncatingIfNeeded: index)]) }
        var messages: [RTMPMessage] = []
        while let item = try decoder.next(&wire) { if case let .message(message)? = item { messages.append(message) } }
        let video = try #require(messages.last)
        #expect(video.typeID == RTMPMessage.Kind.video && video.payload.readableBytes == length)
        #expect(video.payload.getInteger(at: video.payload.readerIndex + 1000, as: UInt8.self) == UInt8(truncatingIfNeeded: 1000))
    }

    /// A window of 1 byte made every chunk owe an acknowledgement (500 KB sent held 124 MiB of
    /// queued answers). The window has a floor of 64 KiB.
    @Test func aTinyAcknowledgementWindowIsRaisedToTheFloor() throws {
        var decoder = try Self.handshaken()
        var encoder = RTMPChunkEncoder()
        var wire = ByteBuffer()
        encoder.encode(.control(RTMPMessage.Kind.windowAcknowledgementSize, 1), into: &wire)
        encoder.encode(.control(RTMPMessage.Kind.setChunkSize, 1), into: &wire)
        for _ in 0..<20_000 {
            encoder.encode(RTMPMessage(typeID: RTMPMessage.Kind.audio, streamID: 1, payload: ByteBuffer(bytes: [0xAF, 1, 2, 3])), into: &wire)
        }
        let sent = wire.readableBytes
        var acknowledgements = 0
        while let item = try decoder.next(&wire) { if case .acknowledge? = item { acknowledgements += 1 } }
        #expect(sent > 4 * 65_536 && acknowledgements <= sent / 65_536, "\(acknowledgements) acknowledgements for \(sent) bytes")
    }

    /// Unfinished messages on many chunk streams together are bounded, not only one by one.
    @Test func unfinishedMessagesAcrossChunkStreamsAreBoundedTogether() throws {
        var limits = RTMPChunkDecoder.Limits()
        limits.maximumBytesInProgress = 1000
        var decoder = try Self.handshaken(limits)
        var wire = ByteBuffer()
        for id in 3..<20 { wire.writeBytes([UInt8(id), 0, 0, 0, 0, 4, 0, 9, 1, 0, 0, 0] + [UInt8](repeating: 0, count: 128)) }
        #expect(throws: RTMPProtocolError.tooMuchInProgress(bytes: 1024, limit: 1000)) {
            while try decoder.next(&wire) != nil {}
        }
    }

    /// One 8 MiB message of 1-byte NAL units took the node from 76 MiB to over 17 GB: a picture
    /// of more than the node's 1024 NAL units is refused before it is split into them.
    @Test func aPictureOfTooManyNALUnitsIsRefused() {
        var payload: [UInt8] = [0x27, 0x01, 0, 0, 0]
        for _ in 0..<2000 { payload += [0, 0, 0, 1, 0x0C] }
        #expect(throws: FLVVideo.Problem.malformed("more than 1024 NAL units in one picture")) {
            try FLVVideo.parse(ByteBuffer(bytes: payload), lengthSize: 4)
        }
    }
}
