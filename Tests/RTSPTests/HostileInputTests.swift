import MediaCore
import NIOCore
import RTSP
import Testing

/// One test per class of input that once trapped or grew without bound, at the parser level
/// (RTSPServerTests sends the same to a running node and checks it keeps serving).
@Suite struct HostileInputTests {
    @Test(arguments: ["", " ", ";", ";;", " ;timeout=60", "\t;"])
    func aSessionHeaderThatNamesNothingIsEmptyNotATrap(_ value: String) {
        let headers: RTSPHeaders = ["Session": value]
        #expect(headers.sessionID == "")
    }

    @Test func aSessionHeaderKeepsItsID() {
        #expect((["Session": " 12AB ;timeout=60"] as RTSPHeaders).sessionID == "12AB")
        #expect(RTSPHeaders().sessionID == nil)
    }

    @Test(arguments: ["RTP/AVP/TCP;;;", "RTP/AVP/TCP; ;=;=5", "RTP/AVP;client_port=", "RTP/AVP;client_port=-", "RTP/AVP;client_port=70000-70001",
                      "RTP/AVP/TCP;interleaved=300-301", "RTP/AVP/TCP;interleaved=5-2", "RTP/AVP;ssrc=zz", "RTP/AVP;mode=\"", ";", "=", ""])
    func transportParametersWithoutNamesOrValuesAreSkipped(_ value: String) {
        for transport in RTSPTransport.parseAlternatives(value) {
            _ = transport.headerValue
            if case let .tcp(channels?) = transport.lower { #expect(channels.lowerBound <= channels.upperBound) }
        }
    }

    @Test func moreTransportAlternativesThanAnyClientSendsAreCut() {
        let header = Array(repeating: "RTP/AVP/TCP;interleaved=0-1", count: 1000).joined(separator: ",")
        #expect(RTSPTransport.parseAlternatives(header).count == RTSPTransport.maximumAlternatives)
    }

    @Test func aMillionBlankLinesBeforeARequestDoNotRecurse() throws {
        var buffer = ByteBuffer(string: String(repeating: "\r\n", count: 500_000) + "OPTIONS * RTSP/1.0\r\nCSeq: 1\r\n\r\n")
        var parser = RTSPMessageParser()
        let item = try parser.parse(&buffer)
        guard case let .request(request) = item else {
            Issue.record("no request after the blank lines")
            return
        }
        #expect(request.method == "OPTIONS")
        #expect(buffer.readableBytes == 0)
    }

    @Test func aPeersBytesInAnErrorAreEscapedForTheLog() {
        // A header line with a terminal escape, a NUL, a backslash and bytes that are not UTF-8.
        var bytes = Array("OPTIONS * RTSP/1.0\r\nCSeq: 1\r\nX\u{1b}[2J".utf8)
        bytes += [0, 0x5C, 0xFF, 0xFE, 0x0D, 0x0A, 0x0D, 0x0A]
        var buffer = ByteBuffer(bytes: bytes)
        #expect {
            var parser = RTSPMessageParser()
            _ = try parser.parse(&buffer)
        } throws: { error in
            let text = (error as? RTSPParseError)?.description ?? ""
            return text.hasPrefix("malformed header line: X\\u{1b}[2J\\u{0}\\u{5c}")
                && text.unicodeScalars.allSatisfy { $0.value >= 0x20 && $0.value < 0x7F }
        }
    }

    @Test func attributeLinesWithoutANameAreIgnored() throws {
        let sdp = try SessionDescription.parse("v=0\r\na=\r\na=:\r\na=:x\r\nm=video 0 RTP/AVP 96\r\na=\r\na=rtpmap:96 H264/90000\r\n")
        #expect(sdp.media.count == 1 && sdp.media[0].isH264)
    }

    @Test(arguments: ["m=", "m=video", "m=video / RTP/AVP 96", "m=video -1 RTP/AVP 96", "m=video 99999 RTP/AVP 96", "m=video 0 RTP/AVP 300",
                      "m=video 0 RTP/AVP x"])
    func malformedMediaLinesAreErrors(_ line: String) {
        #expect(throws: SessionDescription.ParseError.self) { _ = try SessionDescription.parse("v=0\r\n\(line)\r\n") }
    }

    @Test(arguments: ["H264/0", "H264/-5", "H264/99999999999999999999", "MPEG4-GENERIC/48000/0", "MPEG4-GENERIC/48000/1000",
                      "MPEG4-GENERIC/48000/x", "H264"])
    func rtpmapNumbersOutsideTheirRangeAreErrors(_ map: String) {
        #expect(throws: SessionDescription.ParseError.self) {
            _ = try SessionDescription.parse("v=0\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 \(map)\r\n")
        }
    }

    @Test func manyMediaSectionsAreRefused() {
        let text = "v=0\r\n" + String(repeating: "m=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\n", count: 9)
        #expect(throws: SessionDescription.ParseError.self) { _ = try SessionDescription.parse(text) }
    }

    static let ffmpegSPS = "Z2QAH6y0AoAt2AiAAAADAIAAAB4HjBlQ"

    static func publishing(_ video: String, audio: String = "") throws -> PublishedMediaProblem? {
        let sdp = try SessionDescription.parse("v=0\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\n\(video)\(audio)")
        do {
            try sdp.validateForPublishing(maximumPixels: 1920 * 1080)
            return nil
        } catch {
            return error
        }
    }

    @Test(arguments: ["nan", "inf", "-inf", "-1", "0", "1e308", "241", "thirty"])
    func unusableFrameRatesAreRefusedAtAnnounce(_ rate: String) throws {
        let problem = try #require(try Self.publishing("a=framerate:\(rate)\r\n"))
        #expect(problem.status == 400)
        #expect(problem.description.contains("frame rate"))
    }

    @Test func aRealPublisherPasses() throws {
        #expect(try Self.publishing("a=framerate:29.97\r\na=fmtp:96 packetization-mode=1;sprop-parameter-sets=\(Self.ffmpegSPS),aO88sA==\r\n",
                                    audio: "m=audio 0 RTP/AVP 97\r\na=rtpmap:97 MPEG4-GENERIC/48000/2\r\na=fmtp:97 mode=AAC-hbr;config=1190\r\n") == nil)
    }

    @Test func anUnreadableSPSInTheSDPIsRefused() throws {
        let problem = try #require(try Self.publishing("a=fmtp:96 sprop-parameter-sets=AAAA,aO88sA==\r\n"))
        #expect(problem.status == 400 && problem.description.contains("SPS"))
    }

    @Test func aPictureLargerThanTheLimitIsRefused() throws {
        // 1280x720 against a limit of 640x360.
        let sdp = try SessionDescription.parse("v=0\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\na=fmtp:96 sprop-parameter-sets=\(Self.ffmpegSPS)\r\n")
        #expect(throws: PublishedMediaProblem.self) { try sdp.validateForPublishing(maximumPixels: 640 * 360) }
        #expect(throws: Never.self) { try sdp.validateForPublishing(maximumPixels: 1280 * 720) }
    }

    @Test(arguments: ["MPEG4-GENERIC/4000/2", "MPEG4-GENERIC/192000/2"])
    func aacSampleRatesOutsideAACsTableAreRefused(_ map: String) throws {
        let problem = try #require(try Self.publishing("", audio: "m=audio 0 RTP/AVP 97\r\na=rtpmap:97 \(map)\r\na=fmtp:97 mode=AAC-hbr;config=1190\r\n"))
        #expect(problem.description.contains("sample rate"))
    }

    @Test func anAACConfigThatIsNotHexIsRefused() throws {
        let problem = try #require(try Self.publishing("", audio: "m=audio 0 RTP/AVP 97\r\na=rtpmap:97 MPEG4-GENERIC/48000/2\r\na=fmtp:97 mode=AAC-hbr;config=zz\r\n"))
        #expect(problem.description.contains("config"))
    }

    @Test func anLATMTrackIsTakenWithItsConfigOutOfBandAndRefusedWithItInBand() throws {
        let gstreamer = "m=audio 0 RTP/AVP 99\r\na=rtpmap:99 MP4A-LATM/44100\r\na=fmtp:99 cpresent=0;config=40002410adca00\r\n"
        #expect(try Self.publishing("", audio: gstreamer) == nil)
        let media = try SessionDescription.parse("v=0\r\n" + gstreamer).media[0]
        let format = try #require(media.aacFormat)
        #expect(format.channels == 1 && format.config == [0x12, 0x08, 0x56, 0xE5, 0x00], "the config's channels when the rtpmap has none")

        let inBand = try #require(try Self.publishing("", audio: "m=audio 0 RTP/AVP 99\r\na=rtpmap:99 MP4A-LATM/44100\r\na=fmtp:99 cpresent=1\r\n"))
        #expect(inBand.status == 415 && inBand.description.contains("SDP media 2") && inBand.description.contains("cpresent=0"))
        let unreadable = try #require(try Self.publishing("", audio: "m=audio 0 RTP/AVP 99\r\na=rtpmap:99 MP4A-LATM/44100\r\na=fmtp:99 cpresent=0;config=c000\r\n"))
        #expect(unreadable.status == 415 && unreadable.description.contains("StreamMuxConfig"))
        let slow = try #require(try Self.publishing("", audio: "m=audio 0 RTP/AVP 99\r\na=rtpmap:99 MP4A-LATM/4000\r\na=fmtp:99 cpresent=0;config=40002410\r\n"))
        #expect(slow.description.contains("sample rate"))
    }

    @Test func twoVideoTracksOrNoneAreRefused() throws {
        let none = try SessionDescription.parse("v=0\r\nm=audio 0 RTP/AVP 0\r\n")
        #expect(throws: PublishedMediaProblem.self) { try none.validateForPublishing(maximumPixels: 1 << 30) }
        let two = try SessionDescription.parse("v=0\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\nm=video 0 RTP/AVP 98\r\na=rtpmap:98 H264/90000\r\n")
        #expect(throws: PublishedMediaProblem.self) { try two.validateForPublishing(maximumPixels: 1 << 30) }
    }

    /// A publisher that never sets the marker bit nor changes the timestamp: the access unit it
    /// builds is cut at the byte limit, not held forever.
    @Test func anEndlessAccessUnitIsDroppedAtTheByteLimit() {
        var depacketizer = H264Depacketizer()
        let nal = [UInt8(0x65)] + [UInt8](repeating: 0xAB, count: 60_000)
        var units: [H264AccessUnit] = []
        for sequence in 0..<400 {  // 24 MB in one timestamp
            units += depacketizer.push(RTPPacket(marker: false, payloadType: 96, sequenceNumber: UInt16(sequence), timestamp: 1, ssrc: 1,
                                                 payload: ByteBuffer(bytes: nal)))
        }
        units += depacketizer.push(RTPPacket(marker: true, payloadType: 96, sequenceNumber: 400, timestamp: 2, ssrc: 1, payload: ByteBuffer(bytes: nal)))
        #expect(units.allSatisfy { $0.nalUnits.reduce(0) { $0 + $1.count } <= H264Depacketizer.maximumAccessUnitSize })
        #expect(depacketizer.droppedAccessUnits >= 1)
        // The next, normal IDR still comes through.
        let next = depacketizer.push(RTPPacket(marker: true, payloadType: 96, sequenceNumber: 401, timestamp: 3000, ssrc: 1, payload: ByteBuffer(bytes: [0x65, 1, 2])))
        #expect(next.count == 1 || units.contains { $0.timestamp == 2 })
    }

    @Test func tooManyNALUnitsInOneAccessUnitAreDropped() {
        var depacketizer = H264Depacketizer()
        for sequence in 0..<(H264Depacketizer.maximumNALUnitsPerAccessUnit + 10) {
            _ = depacketizer.push(RTPPacket(marker: false, payloadType: 96, sequenceNumber: UInt16(sequence), timestamp: 1, ssrc: 1,
                                            payload: ByteBuffer(bytes: [0x65, 0])))
        }
        #expect(depacketizer.droppedAccessUnits == 1)
    }
}
