import MediaCore
import RTSP
import Testing

@Suite struct SessionDescriptionTests {
    static var ffmpegSDP: String {
        let text = RTSPMessageParserTests.ffmpegAnnounce
        return String(text[text.range(of: "v=0")!.lowerBound...])
    }

    @Test func parsesFFmpegsAnnounce() throws {
        let sdp = try SessionDescription.parse(Self.ffmpegSDP)
        #expect(sdp.media.count == 2)
        let video = sdp.media[0]
        #expect(video.isH264 && video.payloadType == 96 && video.clockRate == 90000)
        #expect(video.control == "streamid=0")
        #expect(video.bandwidthKbps == 1583)
        let sets = H264.parameterSets(fromSprop: try #require(video.formatParameters["sprop-parameter-sets"]))
        #expect(sets.count == 2)
        #expect(H264.codecString(sps: sets[0]) == "avc1.64001f")
        let audio = sdp.media[1]
        #expect(audio.isAAC && audio.clockRate == 48000 && audio.channels == 2)
        #expect(audio.formatParameters["config"] == "119056E500")
        #expect(audio.formatParameters["sizelength"] == "13")
    }

    @Test func parsesGStreamersAnnounce() throws {
        // rtspclientsink 1.22: session-level control, per-stream controls of its own naming.
        let text = """
        v=0\r\no=- 1188340656180883 1 IN IP4 127.0.0.1\r\ns=Session streamed with GStreamer\r\ni=rtsp-server\r\nt=0 0\r\na=tool:GStreamer\r\na=type:broadcast\r\n\
        m=video 0 RTP/AVP 96\r\nc=IN IP4 0.0.0.0\r\na=rtpmap:96 H264/90000\r\na=framerate:30\r\n\
        a=fmtp:96 packetization-mode=1;sprop-parameter-sets=Z2QAH6y0AoAt2AiAAAADAIAAAB4HjBlQ,aO88sA==;profile-level-id=64001f;level-asymmetry-allowed=1\r\n\
        a=control:stream=0\r\n
        """
        let sdp = try SessionDescription.parse(text)
        #expect(sdp.media.count == 1)
        #expect(sdp.media[0].control == "stream=0")
        #expect(sdp.media[0].attributes.contains("framerate:30"))
    }

    @Test func rendersAndReadsBack() throws {
        let description = SessionDescription(sessionName: "live/s_2", media: [
            .init(kind: "video", payloadType: 96, encoding: "H264", clockRate: 90000,
                  formatParameters: ["packetization-mode": "1", "profile-level-id": "64001e"], control: "trackID=0",
                  bandwidthKbps: 1200, attributes: ["framerate:30"]),
        ])
        let parsed = try SessionDescription.parse(description.render())
        #expect(parsed.media == description.media)
        #expect(parsed.sessionName == "live/s_2")
    }

    @Test(arguments: ["", "v=0\r\n", "v=0\r\nm=video\r\n", "v=0\r\nm=video 0 RTP/AVP 300\r\n", "x\r\n",
                      "v=0\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 H264\r\n", String(repeating: "a=x\r\n", count: 5000)])
    func malformedSDPIsAnError(_ text: String) {
        #expect(throws: SessionDescription.ParseError.self) { _ = try SessionDescription.parse(text) }
    }
}
