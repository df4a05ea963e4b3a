import Testing
@testable import WebRTC

/// The node's answers to WHEP offers: what it picks from Chromium's offer, and the offers it refuses.
@Suite struct WHEPAnswerTests {
    static func plan(profile: String = "42e01f", audio: Bool = true) -> WHEPAnswer.Plan {
        .init(iceUfrag: "nodeufrag", icePassword: "node-password-0123456789", fingerprint: "AA:BB:CC",
              candidates: [("127.0.0.1", 8189)], videoProfileLevelID: profile, videoSSRC: 1111, retransmissionSSRC: 2222,
              audioSSRC: audio ? 3333 : nil, streamID: "live-stream1")
    }

    static func offer(_ text: String = WebRTCOfferTests.chromiumOffer) throws -> WebRTCOffer { try WebRTCOffer.parse(text) }

    @Test func chromiumsOfferGetsH264WithRTXOpusAndTransportFeedback() throws {
        let answer = try WHEPAnswer.answer(try Self.offer(), plan: Self.plan())
        #expect(answer.videoPayloadType == 102 && answer.retransmissionPayloadType == 103 && answer.audioPayloadType == 111)
        #expect(answer.transportSequenceExtension == 3)
        #expect(answer.remoteUfrag == "Wq3n" && answer.remoteFingerprint.algorithm == "sha-256")
        #expect(answer.videoFeedback == ["nack", "nack pli", "ccm fir", "transport-cc", "goog-remb"])
        let sdp = answer.sdp
        #expect(sdp.contains("a=ice-lite\r\n") && sdp.contains("a=group:BUNDLE 0 1\r\n") && sdp.contains("a=setup:passive\r\n"))
        #expect(sdp.contains("m=video 9 UDP/TLS/RTP/SAVPF 102 103\r\n"))
        #expect(sdp.contains("a=fmtp:102 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f\r\n"))
        #expect(sdp.contains("a=candidate:1 1 udp 2130706431 127.0.0.1 8189 typ host\r\n"))
        #expect(sdp.contains("m=audio 9 UDP/TLS/RTP/SAVPF 111\r\n") && sdp.contains("a=sendonly"))
        // The answer is itself an SDP the node's parser reads, with the node's credentials on every m-line.
        let parsed = try WebRTCOffer.parse(sdp)
        #expect(parsed.media.allSatisfy { $0.iceUfrag == "nodeufrag" && $0.setup == "passive" })
        #expect(parsed.media.map(\.direction) == ["sendonly", "sendonly"])
    }

    /// The answer names what is sent: a Main rung is answered as Main, on a format whose decoder
    /// takes it; a stream without audio answers the audio m-line inactive.
    @Test func theAnswersProfileIsTheRungs() throws {
        let mainOffer = WebRTCOfferTests.chromiumOffer.replacingOccurrences(of: "m=video 9 UDP/TLS/RTP/SAVPF 96 97 102 103",
                                                                             with: "m=video 9 UDP/TLS/RTP/SAVPF 96 97 102 103 104")
            + "a=rtpmap:104 H264/90000\r\na=fmtp:104 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=4d001f\r\n"
        let answer = try WHEPAnswer.answer(try Self.offer(mainOffer), plan: Self.plan(profile: "4d0028", audio: false))
        #expect(answer.videoPayloadType == 104 && answer.retransmissionPayloadType == nil)
        #expect(answer.sdp.contains("profile-level-id=4d0028"))
        #expect(answer.audioPayloadType == nil && answer.sdp.contains("a=inactive"))
    }

    /// Transport-wide feedback offered under an id the node would have to write in RFC 8285's
    /// two-byte form (15 and up) is answered as if not offered: the one-byte form is all it sends.
    /// Chromium offers libwebrtc's playout-delay extension on its video: the answer takes it, so
    /// the node can ask for a playout delay its keyframes need; without it, nothing is asked.
    @Test func thePlayoutDelayExtensionIsAnsweredWhereOffered() throws {
        let video = "a=extmap:3 http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01\r\n"
        let parts = WebRTCOfferTests.chromiumOffer.components(separatedBy: video)
        #expect(parts.count == 3, "the fixture names transport-cc once per m-line")
        let offered = parts[0] + video + parts[1] + video + "a=extmap:5 \(WHEPAnswer.playoutDelayURI)\r\n" + parts[2]
        let answer = try WHEPAnswer.answer(try Self.offer(offered), plan: Self.plan())
        #expect(answer.playoutDelayExtension == 5)
        #expect(answer.sdp.contains("a=extmap:5 \(WHEPAnswer.playoutDelayURI)\r\n"))
        #expect(try WHEPAnswer.answer(try Self.offer(), plan: Self.plan()).playoutDelayExtension == nil)
    }

    @Test func extensionIdsBeyondTheOneByteFormAreLeftOut() throws {
        let twoByte = WebRTCOfferTests.chromiumOffer.replacingOccurrences(of: "a=extmap:3 ", with: "a=extmap:20 ")
        let answer = try WHEPAnswer.answer(try Self.offer(twoByte), plan: Self.plan())
        #expect(answer.transportSequenceExtension == nil && answer.audioTransportSequenceExtension == nil)
        #expect(!answer.sdp.contains("a=extmap") && !answer.videoFeedback.contains("transport-cc"))
        #expect(answer.videoPayloadType == 102 && answer.audioPayloadType == 111)
    }

    @Test func offersTheNodeCannotServeAreRefusedWithTheirStatus() throws {
        func refusal(_ text: String, profile: String = "42e01f") throws -> (Int, String)? {
            let parsed = try Self.offer(text)
            do {
                _ = try WHEPAnswer.answer(parsed, plan: Self.plan(profile: profile))
                return nil
            } catch {
                return (error.status, error.reason)
            }
        }
        let offer = WebRTCOfferTests.chromiumOffer
        // A High-profile rung (a passed-through OBS top) against an offer of Constrained Baseline only.
        #expect(try refusal(offer, profile: "640028")?.0 == 406)
        #expect(try refusal(offer, profile: "640028")?.1.contains("no H.264 format in the offer takes the rung's High (640028)") == true)
        #expect(try refusal(offer.replacingOccurrences(of: "a=group:BUNDLE 0 1\r\n", with: ""))?.0 == 400)
        #expect(try refusal(offer.replacingOccurrences(of: "opus/48000/2", with: "pcmu/8000"))?.1.contains("no Opus") == true)
        #expect(try refusal(offer.replacingOccurrences(of: "a=setup:actpass", with: "a=setup:passive"))?.0 == 406)
        #expect(try refusal(offer.replacingOccurrences(of: "a=fingerprint:sha-256", with: "a=fingerprint:sha-1"))?.0 == 400)
        #expect(try refusal(offer.replacingOccurrences(of: "a=recvonly", with: "a=sendonly"))?.1.contains("must receive") == true)
        #expect(try refusal(offer.replacingOccurrences(of: "packetization-mode=1", with: "packetization-mode=0"))?.0 == 406)
    }

    @Test func profilesAreReadAsRFC6184Says() throws {
        #expect(H264ProfileLevel(video: "42e01f")?.profile == .constrainedBaseline)
        #expect(H264ProfileLevel(video: "42001f")?.profile == .baseline)
        #expect(H264ProfileLevel(video: "4d001f")?.profile == .main)
        #expect(H264ProfileLevel(video: "640c1f")?.profile == .high)
        let high = try #require(H264ProfileLevel(video: "640028"))
        #expect(high.isDecodable(by: try #require(H264ProfileLevel(video: "64001f"))))
        #expect(!high.isDecodable(by: try #require(H264ProfileLevel(video: "42e01f"))))
        #expect(try #require(H264ProfileLevel(video: "42e01f")).isDecodable(by: high))
        // Chromium without proprietary codecs offers High 4:4:4 Predictive, whose decoders take High.
        #expect(high.isDecodable(by: try #require(H264ProfileLevel(video: "f4001f"))))
        #expect(!(try #require(H264ProfileLevel(video: "f4001f"))).isDecodable(by: high))
        #expect(H264ProfileLevel(video: "zz") == nil)
    }
}
