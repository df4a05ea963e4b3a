import NIOCore
import RTSP
import Testing

/// Feeds `bytes` one byte at a time, as the slowest network would, collecting every item.
func parseByteAtATime(_ bytes: [UInt8], parser: RTSPMessageParser = RTSPMessageParser()) throws -> [RTSPInbound] {
    var parser = parser
    var buffer = ByteBuffer()
    var items: [RTSPInbound] = []
    for byte in bytes {
        buffer.writeInteger(byte)
        while let item = try parser.parse(&buffer) { items.append(item) }
    }
    #expect(buffer.readableBytes == 0, "bytes left over")
    return items
}

func parseWhole(_ bytes: [UInt8], parser: RTSPMessageParser = RTSPMessageParser()) throws -> [RTSPInbound] {
    var parser = parser
    var buffer = ByteBuffer(bytes: bytes)
    var items: [RTSPInbound] = []
    while let item = try parser.parse(&buffer) { items.append(item) }
    return items
}

@Suite struct RTSPMessageParserTests {
    /// ffmpeg 5.1's ANNOUNCE, byte for byte as captured.
    static let ffmpegAnnounce = """
    ANNOUNCE rtsp://127.0.0.1:18555/live/stream1_1 RTSP/1.0\r
    Content-Type: application/sdp\r
    CSeq: 2\r
    User-Agent: Lavf59.27.100\r
    Content-Length: 506\r
    \r
    v=0\r
    o=- 0 0 IN IP4 127.0.0.1\r
    s=No Name\r
    c=IN IP4 127.0.0.1\r
    t=0 0\r
    a=tool:libavformat LIBAVFORMAT_VERSION\r
    m=video 0 RTP/AVP 96\r
    b=AS:1583\r
    a=rtpmap:96 H264/90000\r
    a=fmtp:96 packetization-mode=1; sprop-parameter-sets=Z2QAH6y0AoAt2AiAAAADAIAAAB4HjBlQ,aO88sA==; profile-level-id=64001F\r
    a=control:streamid=0\r
    m=audio 0 RTP/AVP 97\r
    b=AS:96\r
    a=rtpmap:97 MPEG4-GENERIC/48000/2\r
    a=fmtp:97 profile-level-id=1;mode=AAC-hbr;sizelength=13;indexlength=3;indexdeltalength=3; config=119056E500\r
    a=control:streamid=1\r

    """

    @Test func parsesARealAnnounceByteAtATime() throws {
        let items = try parseByteAtATime(Array(Self.ffmpegAnnounce.utf8))
        guard case let .request(request) = try #require(items.first) else {
            Issue.record("not a request")
            return
        }
        #expect(items.count == 1)
        #expect(request.method == "ANNOUNCE")
        #expect(request.uri == "rtsp://127.0.0.1:18555/live/stream1_1")
        #expect(request.cseq == "2")
        #expect(request.headers["content-type"] == "application/sdp")
        #expect(request.body.count == 506)
        #expect(String(decoding: request.body, as: UTF8.self).hasSuffix("a=control:streamid=1\r\n"))
    }

    @Test func interleavedFramesAndMessagesShareTheStream() throws {
        var bytes: [UInt8] = [UInt8(ascii: "$"), 0, 0, 3, 0xAA, 0xBB, 0xCC]
        bytes += Array("GET_PARAMETER rtsp://h/s RTSP/1.0\r\nCSeq: 9\r\nSession: abc\r\n\r\n".utf8)
        bytes += [UInt8(ascii: "$"), 1, 0, 0]
        bytes += Array("\r\nRTSP/1.0 200 OK\r\nCSeq: 3\r\n\r\n".utf8)
        for items in [try parseByteAtATime(bytes), try parseWhole(bytes)] {
            #expect(items.count == 4)
            #expect(items[0] == .interleaved(channel: 0, payload: ByteBuffer(bytes: [0xAA, 0xBB, 0xCC])))
            if case let .request(request) = items[1] {
                #expect(request.method == "GET_PARAMETER" && request.headers["session"] == "abc")
            } else { Issue.record("expected a request") }
            #expect(items[2] == .interleaved(channel: 1, payload: ByteBuffer()))
            if case let .response(response) = items[3] { #expect(response.status == 200 && response.reason == "OK") } else { Issue.record("expected a response") }
        }
    }

    @Test func requestAndResponseRoundTrip() throws {
        let request = RTSPRequest(method: "SETUP", uri: "rtsp://127.0.0.1/live/a_1/streamid=0",
                                  headers: ["CSeq": "3", "Transport": "RTP/AVP/TCP;unicast;interleaved=0-1;mode=record"])
        let response = RTSPResponse(status: 200, headers: ["CSeq": "3", "Session": "12345678;timeout=60"], body: Array("v=0\r\n".utf8))
        var buffer = ByteBuffer()
        request.write(to: &buffer)
        response.write(to: &buffer)
        let items = try parseByteAtATime(Array(buffer.readableBytesView))
        #expect(items == [.request(request), .response(RTSPResponse(status: 200, headers: ["CSeq": "3", "Session": "12345678;timeout=60", "Content-Length": "5"], body: Array("v=0\r\n".utf8)))])
    }

    @Test func acceptsBareLineFeedsAndLowercaseMethods() throws {
        let items = try parseWhole(Array("options rtsp://x/y RTSP/1.0\nCSeq: 1\n\n".utf8))
        #expect(items == [.request(RTSPRequest(method: "OPTIONS", uri: "rtsp://x/y", headers: ["CSeq": "1"]))])
    }

    @Test(arguments: [
        ("garbage\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        ("OPTIONS rtsp://x RTSP/2.0\r\nCSeq: 1\r\n\r\n", 505),
        ("OPTIONS rtsp://x RTSP/1.0\r\nno colon here\r\n\r\n", 400),
        ("ANNOUNCE rtsp://x RTSP/1.0\r\nContent-Length: -4\r\n\r\n", 400),
        ("ANNOUNCE rtsp://x RTSP/1.0\r\nContent-Length: 99999999\r\n\r\n", 413),
        ("RTSP/1.0 abc OK\r\n\r\n", 400),
    ])
    func malformedInputIsAnErrorWithAStatus(_ text: String, _ status: Int) {
        let error = #expect(throws: RTSPParseError.self) { _ = try parseWhole(Array(text.utf8)) }
        #expect(error?.status == status)
    }

    @Test func limitsHoldBeforeTheWholeMessageArrives() {
        // A line that never ends is refused once it passes the limit, not buffered forever.
        var limits = RTSPMessageParser.Limits()
        limits.maximumLineLength = 256
        var parser = RTSPMessageParser(limits: limits)
        var buffer = ByteBuffer(bytes: Array(repeating: UInt8(ascii: "A"), count: 300))
        #expect(throws: RTSPParseError.lineTooLong(limit: 256)) { _ = try parser.parse(&buffer) }

        let manyHeaders = "OPTIONS rtsp://x RTSP/1.0\r\n" + (0..<100).map { "X-\($0): y\r\n" }.joined() + "\r\n"
        #expect(throws: RTSPParseError.tooManyHeaders(limit: 64)) { _ = try parseWhole(Array(manyHeaders.utf8)) }
    }

    @Test func partialMessageWaitsWithoutConsuming() throws {
        var buffer = ByteBuffer(string: "OPTIONS rtsp://x RTSP/1.0\r\nCSeq: 1\r\nContent-Length: 4\r\n\r\nab")
        var parser = RTSPMessageParser()
        #expect(try parser.parse(&buffer) == nil)
        #expect(buffer.readerIndex == 0)
        buffer.writeString("cd")
        #expect(try parser.parse(&buffer) != nil)
        // A fresh parser over the same bytes reads the same message: nothing was consumed early.
        var again = ByteBuffer(string: "OPTIONS rtsp://x RTSP/1.0\r\nCSeq: 1\r\nContent-Length: 4\r\n\r\nabcd")
        var fresh = RTSPMessageParser()
        #expect(try fresh.parse(&again) != nil)
    }
}

@Suite struct RTSPTransportTests {
    @Test func parsesWhatRealClientsSend() throws {
        let ffmpegTCP = try #require(RTSPTransport.parse("RTP/AVP/TCP;unicast;interleaved=0-1;mode=record"))
        #expect(ffmpegTCP.lower == .tcp(interleaved: 0...1))
        #expect(ffmpegTCP.isRecord)
        let gstreamerUDP = try #require(RTSPTransport.parse("RTP/AVP;unicast;client_port=5000-5001;mode=RECORD"))
        #expect(gstreamerUDP.lower == .udp(clientPorts: 5000...5001, serverPorts: nil))
        #expect(gstreamerUDP.isRecord)
        let player = try #require(RTSPTransport.parse("RTP/AVP/UDP;unicast;client_port=6970"))
        #expect(player.lower == .udp(clientPorts: 6970...6971, serverPorts: nil))
        #expect(!player.isRecord)
        let alternatives = RTSPTransport.parseAlternatives("RTP/SAVP;unicast,RTP/AVP/TCP;interleaved=2-3")
        #expect(alternatives.map(\.lower) == [.tcp(interleaved: 2...3)])
        #expect(RTSPTransport.parse("RTP/AVP;client_port=70000-70001")?.lower == .udp(clientPorts: nil, serverPorts: nil))
    }

    @Test func rendersReplies() {
        var transport = RTSPTransport(lower: .udp(clientPorts: 5000...5001, serverPorts: 7000...7001), ssrc: 0xABCD)
        #expect(transport.headerValue == "RTP/AVP;unicast;client_port=5000-5001;server_port=7000-7001;ssrc=ABCD")
        transport = RTSPTransport(lower: .tcp(interleaved: 0...1), isRecord: true)
        #expect(transport.headerValue == "RTP/AVP/TCP;unicast;interleaved=0-1;mode=record")
    }
}

@Suite struct RTSPSessionStateMachineTests {
    @Test func publisherFlow() {
        var machine = RTSPSessionStateMachine(role: .publisher)
        #expect(machine.apply("RECORD") == .notValidInState)
        #expect(machine.apply("SETUP") == .accept(next: .ready))
        #expect(machine.apply("SETUP") == .accept(next: .ready))
        #expect(machine.apply("PLAY") == .notValidInState)
        #expect(machine.apply("RECORD") == .accept(next: .active))
        #expect(machine.apply("SETUP") == .notValidInState)
        #expect(machine.apply("GET_PARAMETER") == .accept(next: .active))
        #expect(machine.apply("PAUSE") == .accept(next: .ready))
        #expect(machine.apply("RECORD") == .accept(next: .active))
        #expect(machine.apply("TEARDOWN") == .accept(next: .closed))
        #expect(machine.apply("OPTIONS") == .notValidInState)
    }

    @Test func playerFlow() {
        var machine = RTSPSessionStateMachine(role: .player)
        #expect(machine.apply("PLAY") == .notValidInState)
        #expect(machine.apply("SETUP") == .accept(next: .ready))
        #expect(machine.apply("RECORD") == .notValidInState)
        #expect(machine.apply("PLAY") == .accept(next: .active))
        #expect(machine.apply("PAUSE") == .accept(next: .ready))
        #expect(machine.apply("PLAY") == .accept(next: .active))
        #expect(machine.apply("FLY") == .notValidInState)
        #expect(machine.state == .active)
    }
}

/// A peer trickling a large header block a byte at a time costs the node the same per byte as
/// one that sends it at once: the parser never searches the same bytes again.
@Suite struct RTSPParserCostTests {
    @Test func aHeaderBlockTrickledByteByByteIsSearchedOnce() throws {
        let headers = (0..<60).map { "X-Padding-\($0): \(String(repeating: "v", count: 60))\r\n" }.joined()
        let request = Array("OPTIONS rtsp://x/live/a RTSP/1.0\r\nCSeq: 1\r\n\(headers)\r\n".utf8)
        var parser = RTSPMessageParser()
        var buffer = ByteBuffer()
        var items = 0
        for byte in request {
            buffer.writeInteger(byte)
            while try parser.parse(&buffer) != nil { items += 1 }
            buffer.discardReadBytes()
        }
        #expect(items == 1)
        #expect(parser.bytesExamined <= request.count, "\(parser.bytesExamined) bytes searched for \(request.count)")
    }

    @Test func controlCharactersInsideALineAreRefused() {
        for bad in ["OPTIONS * RTSP/1.0\r\nCSeq: 1\rInjected: yes\r\n\r\n", "OPTIONS *\u{1}x RTSP/1.0\r\nCSeq: 1\r\n\r\n"] {
            var buffer = ByteBuffer(string: bad)
            var parser = RTSPMessageParser()
            #expect(throws: RTSPParseError.self) { _ = try parser.parse(&buffer) }
        }
        var out = ByteBuffer()
        RTSPResponse(status: 200, headers: ["CSeq": "1\r\nX-Evil: 1", "Content-Base": "rtsp://h/a\rb/"]).write(to: &out)
        let text = String(buffer: out)
        #expect(!text.contains("\r\nX-Evil") && text.contains("CSeq: 1X-Evil: 1\r\n") && text.contains("Content-Base: rtsp://h/ab/\r\n"))
    }
}
