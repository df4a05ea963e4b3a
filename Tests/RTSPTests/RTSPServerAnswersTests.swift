import MediaCore
import RTSP
import Testing

/// The parts of a server's answers that are pure: which transport it replies with, what an
/// ANNOUNCE's body must be, and what a SET_PARAMETER carries.
@Suite struct RTSPServerAnswersTests {
    static let ports: ClosedRange<UInt16> = 50000...50001

    static func offer(_ header: String) throws -> RTSPTransport {
        try #require(RTSPTransport.parseAlternatives(header).first)
    }

    @Test func interleavedOffersGetTheirChannelsOrTwoPerTrack() throws {
        guard case let .serve(given) = try Self.offer("RTP/AVP/TCP;unicast;interleaved=4-5").answer(track: 0, isRecord: true, serverPorts: nil) else {
            Issue.record("an interleaved offer is served without UDP")
            return
        }
        #expect(given.headerValue.contains("interleaved=4-5") && given.isRecord)
        guard case let .serve(defaulted) = try Self.offer("RTP/AVP/TCP;unicast").answer(track: 1, isRecord: false, serverPorts: nil) else {
            Issue.record("an interleaved offer without channels is served")
            return
        }
        #expect(defaulted.headerValue.contains("interleaved=2-3") && !defaulted.isRecord)
    }

    @Test func udpOffersNeedBothPortPairsAndUsablePorts() throws {
        let udp = try Self.offer("RTP/AVP;unicast;client_port=6000-6001")
        #expect(udp.answer(track: 0, isRecord: false, serverPorts: nil) == .skip)
        guard case let .serve(reply) = udp.answer(track: 0, isRecord: false, serverPorts: Self.ports) else {
            Issue.record("a UDP offer with a server pair is served")
            return
        }
        #expect(reply.headerValue.contains("client_port=6000-6001") && reply.headerValue.contains("server_port=50000-50001"))
        #expect(try Self.offer("RTP/AVP;unicast").answer(track: 0, isRecord: false, serverPorts: Self.ports) == .skip)
        guard case let .refuse(reason) = try Self.offer("RTP/AVP;unicast;client_port=6001-6002").answer(track: 0, isRecord: false, serverPorts: Self.ports) else {
            Issue.record("an odd RTP port is refused")
            return
        }
        #expect(reason.contains("even"))
        guard case .refuse = try Self.offer("RTP/AVP;unicast;client_port=22-23").answer(track: 0, isRecord: false, serverPorts: Self.ports) else {
            Issue.record("a system port is refused")
            return
        }
    }

    /// What an ANNOUNCE with this Content-Type and body is refused for, or nil.
    static func refusal(_ contentType: String?, _ body: String) -> PublishedMediaProblem? {
        do {
            _ = try SessionDescription.announced(contentType: contentType, body: Array(body.utf8), maximumPixels: 1)
            return nil
        } catch {
            return error
        }
    }

    @Test func anAnnounceMustCarryASDPThatParsesAndCanBePublished() {
        let video = "v=0\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\n"
        #expect(Self.refusal(nil, video) == nil)
        #expect(Self.refusal("Application/SDP; charset=utf-8", video) == nil)
        let html = Self.refusal("text/html", video)
        #expect(html?.status == 415 && html?.description.contains("text/html") == true)
        #expect(Self.refusal(nil, "m=video x\r\n")?.status == 400)
        #expect(Self.refusal(nil, "v=0\r\nm=audio 0 RTP/AVP 97\r\na=rtpmap:97 MPEG4-GENERIC/48000/2\r\n")?.status == 415)
    }

    @Test func parametersAreNameValueLinesOrBareNames() {
        let request = RTSPRequest(method: "SET_PARAMETER", uri: "rtsp://h/a", body: Array("a: 1\r\nb=two words\nc\r\n\r\n".utf8))
        let parameters = request.parameters.map { "\($0.name)|\($0.value)" }
        #expect(parameters == ["a|1", "b|two words", "c|"])
        let long = RTSPRequest(method: "SET_PARAMETER", uri: "rtsp://h/a", body: Array(repeating: UInt8(ascii: "x"), count: 10_000))
        #expect(long.parameters.first?.name.utf8.count == 4096)
    }
}
