import Testing
@testable import WebRTC

/// Offers as browsers send them to a WHEP endpoint, and the ones an attacker sends.
@Suite struct WebRTCOfferTests {
    /// Chromium's recvonly offer for one audio and one video transceiver (trimmed to what it
    /// always carries: BUNDLE, ICE and DTLS attributes, Opus, H.264 in two profiles with RTX).
    static let chromiumOffer = """
        v=0\r
        o=- 4611731400430051336 2 IN IP4 127.0.0.1\r
        s=-\r
        t=0 0\r
        a=group:BUNDLE 0 1\r
        a=extmap-allow-mixed\r
        a=msid-semantic: WMS\r
        m=audio 9 UDP/TLS/RTP/SAVPF 111 63 9\r
        c=IN IP4 0.0.0.0\r
        a=rtcp:9 IN IP4 0.0.0.0\r
        a=ice-ufrag:Wq3n\r
        a=ice-pwd:c5KZKp0AjZ8vZ9zP7dVqB2Xy\r
        a=ice-options:trickle\r
        a=fingerprint:sha-256 3A:1F:0B:9C:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF\r
        a=setup:actpass\r
        a=mid:0\r
        a=extmap:1 urn:ietf:params:rtp-hdrext:ssrc-audio-level\r
        a=extmap:3 http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01\r
        a=recvonly\r
        a=rtcp-mux\r
        a=rtpmap:111 opus/48000/2\r
        a=rtcp-fb:111 transport-cc\r
        a=fmtp:111 minptime=10;useinbandfec=1\r
        a=rtpmap:63 red/48000/2\r
        a=fmtp:63 111/111\r
        a=rtpmap:9 G722/8000\r
        m=video 9 UDP/TLS/RTP/SAVPF 96 97 102 103\r
        c=IN IP4 0.0.0.0\r
        a=rtcp:9 IN IP4 0.0.0.0\r
        a=ice-ufrag:Wq3n\r
        a=ice-pwd:c5KZKp0AjZ8vZ9zP7dVqB2Xy\r
        a=ice-options:trickle\r
        a=fingerprint:sha-256 3A:1F:0B:9C:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF\r
        a=setup:actpass\r
        a=mid:1\r
        a=extmap:3 http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01\r
        a=recvonly\r
        a=rtcp-mux\r
        a=rtcp-rsize\r
        a=rtpmap:96 VP8/90000\r
        a=rtcp-fb:96 goog-remb\r
        a=rtcp-fb:96 transport-cc\r
        a=rtcp-fb:96 ccm fir\r
        a=rtcp-fb:96 nack\r
        a=rtcp-fb:96 nack pli\r
        a=rtpmap:97 rtx/90000\r
        a=fmtp:97 apt=96\r
        a=rtpmap:102 H264/90000\r
        a=rtcp-fb:102 goog-remb\r
        a=rtcp-fb:102 transport-cc\r
        a=rtcp-fb:102 ccm fir\r
        a=rtcp-fb:102 nack\r
        a=rtcp-fb:102 nack pli\r
        a=fmtp:102 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f\r
        a=rtpmap:103 rtx/90000\r
        a=fmtp:103 apt=102\r

        """

    @Test func chromiumsOfferIsReadWhole() throws {
        let offer = try WebRTCOffer.parse(Self.chromiumOffer)
        #expect(offer.bundle == ["0", "1"])
        #expect(offer.media.map(\.kind) == ["audio", "video"])
        let video = offer.media[1]
        #expect(video.mid == "1" && video.direction == "recvonly" && video.rtcpMux && !video.isRejected)
        #expect(video.iceUfrag == "Wq3n" && video.icePassword == "c5KZKp0AjZ8vZ9zP7dVqB2Xy" && video.setup == "actpass")
        #expect(video.fingerprint?.algorithm == "sha-256")
        #expect(video.extensionID("http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01") == 3)
        let h264 = try #require(video.formats.first { $0.encoding == "H264" })
        #expect(h264.payloadType == 102 && h264.clockRate == 90000)
        #expect(h264.parameters["profile-level-id"] == "42e01f" && h264.parameters["packetization-mode"] == "1")
        #expect(h264.feedback.contains("nack pli") && h264.feedback.contains("transport-cc"))
        #expect(video.formats.first { $0.payloadType == 103 }?.parameters["apt"] == "102")
        let opus = try #require(offer.media[0].formats.first { $0.encoding == "opus" })
        #expect(opus.payloadType == 111 && opus.clockRate == 48000 && opus.channels == 2)
    }

    @Test func sessionLevelAttributesApplyToEveryMLine() throws {
        let offer = try WebRTCOffer.parse("v=0\na=ice-ufrag:abcd\na=ice-pwd:0123456789abcdefghijkl\na=setup:active\n"
            + "a=fingerprint:sha-256 AA:BB\nm=video 9 UDP/TLS/RTP/SAVPF 100\na=rtpmap:100 H264/90000\n")
        #expect(offer.media[0].iceUfrag == "abcd" && offer.media[0].setup == "active" && offer.media[0].fingerprint?.value == "AA:BB")
    }

    /// aiortc names its certificate under three hashes, sha-256 first: that one is checked.
    @Test func theSHA256FingerprintIsKeptAmongSeveral() throws {
        let offer = try WebRTCOffer.parse("v=0\nm=video 9 UDP/TLS/RTP/SAVPF 100\na=fingerprint:sha-256 AA:BB\n"
            + "a=fingerprint:sha-384 CC:DD\na=fingerprint:sha-512 EE:FF\n")
        #expect(offer.media[0].fingerprint?.algorithm == "sha-256" && offer.media[0].fingerprint?.value == "AA:BB")
        let later = try WebRTCOffer.parse("v=0\nm=video 9 UDP/TLS/RTP/SAVPF 100\na=fingerprint:sha-512 EE:FF\na=fingerprint:sha-256 AA:BB\n")
        #expect(later.media[0].fingerprint?.value == "AA:BB")
    }

    /// Garbage, a megabyte, a thousand m-lines: refused with the reason and the line, quickly.
    @Test func offersTheNodeCannotReadSayWhereTheyWentWrong() {
        func reason(_ text: String) -> String {
            do {
                _ = try WebRTCOffer.parse(text)
                return "accepted"
            } catch {
                return error.description
            }
        }
        #expect(reason("hello") == "SDP offer, line 1: not a `x=value` line: \"hello\"")
        #expect(reason("v=1\n") == "SDP offer, line 1: SDP version \"1\", expected 0")
        #expect(reason("v=0\ns=-\n") == "SDP offer: no m-line: the offer asks for no media")
        #expect(reason("m=video 9 UDP/TLS/RTP/SAVPF 96\n") == "SDP offer: no `v=0` line: not an SDP offer")
        #expect(reason("v=0\nm=video\n").hasPrefix("SDP offer, line 2: an m-line needs"))
        #expect(reason(String(repeating: "a=x\n", count: 300_000)).hasSuffix("over the limit of 65536"))
        let many = "v=0\n" + String(repeating: "m=audio 9 UDP/TLS/RTP/SAVPF 111\n", count: 1000)
        #expect(reason(many) == "SDP offer, line 18: more than 16 m-lines")
    }
}
