/// The node's SDP answer to a WHEP offer (RFC 9725 §4.2, JSEP's answer rules): which of the
/// browser's formats carry the rung and the audio, and everything the transport then needs (the
/// browser's ICE credentials and certificate fingerprint, the payload types, the transport-wide
/// sequence extension). An offer it cannot serve is refused with the HTTP status and the reason.
public struct WHEPAnswer: Sendable, Equatable {
    /// What the node brings to the answer: its ICE-lite credentials, its certificate's SHA-256
    /// fingerprint, where browsers reach it, and what the stream sends.
    public struct Plan: Sendable, Equatable {
        public var iceUfrag: String
        public var icePassword: String
        /// `AB:CD:...`, upper-case hex.
        public var fingerprint: String
        public var candidates: [(address: String, port: Int)]
        /// The rung's H.264 `profile-level-id` (six hex digits, from its SPS).
        public var videoProfileLevelID: String
        public var videoSSRC: UInt32
        public var retransmissionSSRC: UInt32
        /// nil: the stream has no audio (an audio m-line is answered inactive).
        public var audioSSRC: UInt32?
        public var streamID: String

        public init(iceUfrag: String, icePassword: String, fingerprint: String, candidates: [(address: String, port: Int)],
                    videoProfileLevelID: String, videoSSRC: UInt32, retransmissionSSRC: UInt32, audioSSRC: UInt32?, streamID: String) {
            self.iceUfrag = iceUfrag
            self.icePassword = icePassword
            self.fingerprint = fingerprint
            self.candidates = candidates
            self.videoProfileLevelID = videoProfileLevelID
            self.videoSSRC = videoSSRC
            self.retransmissionSSRC = retransmissionSSRC
            self.audioSSRC = audioSSRC
            self.streamID = streamID
        }

        public static func == (lhs: Plan, rhs: Plan) -> Bool {
            lhs.iceUfrag == rhs.iceUfrag && lhs.icePassword == rhs.icePassword && lhs.fingerprint == rhs.fingerprint
                && lhs.candidates.map { "\($0.address):\($0.port)" } == rhs.candidates.map { "\($0.address):\($0.port)" }
                && lhs.videoProfileLevelID == rhs.videoProfileLevelID && lhs.videoSSRC == rhs.videoSSRC
                && lhs.retransmissionSSRC == rhs.retransmissionSSRC && lhs.audioSSRC == rhs.audioSSRC && lhs.streamID == rhs.streamID
        }
    }

    /// An offer the node cannot serve: the HTTP status (400: not a usable WebRTC offer; 406:
    /// nothing in it the node can send) and why.
    public struct Refusal: Error, Equatable, CustomStringConvertible {
        public var status: Int
        public var reason: String
        public var description: String { reason }
    }

    public var sdp: String
    public var videoPayloadType: UInt8
    public var retransmissionPayloadType: UInt8?
    public var audioPayloadType: UInt8?
    /// The header extension id the browser gave transport-wide sequence numbers (nil: it sends
    /// no transport-wide feedback, so REMB or reports are what the node has).
    public var transportSequenceExtension: Int?
    /// The same for the audio m-line (under BUNDLE, browsers give both one id).
    public var audioTransportSequenceExtension: Int?
    /// The id of libwebrtc's playout-delay extension on the video (nil: not offered), through
    /// which the node asks the browser to hold pictures long enough for the rung's keyframes
    /// to cross the viewer's link (`KeyframePlayoutDelay`).
    public var playoutDelayExtension: Int?
    public var remoteUfrag: String
    public var remotePassword: String
    public var remoteFingerprint: WebRTCOffer.Fingerprint
    /// What the browser will send about the video: `nack`, `nack pli`, `ccm fir`, `transport-cc`, `goog-remb`.
    public var videoFeedback: [String]
    /// The H.264 decoder the browser offered in the chosen format: which other rungs it takes too.
    public var videoDecoder: H264ProfileLevel?

    public static let transportSequenceURI = "http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01"
    public static let playoutDelayURI = "http://www.webrtc.org/experiments/rtp-hdrext/playout-delay"
    static let supportedFeedback = ["nack", "nack pli", "ccm fir", "transport-cc", "goog-remb"]

    public static func answer(_ offer: WebRTCOffer, plan: Plan) throws(Refusal) -> WHEPAnswer {
        guard !offer.bundle.isEmpty else {
            throw Refusal(status: 400, reason: "the offer has no BUNDLE group: the node sends every track on one transport (a=group:BUNDLE)")
        }
        guard let videoIndex = offer.media.firstIndex(where: { $0.kind == "video" && !$0.isRejected && $0.mid.map(offer.bundle.contains) == true }) else {
            throw Refusal(status: 406, reason: "the offer has no video m-line in its BUNDLE group")
        }
        let video = offer.media[videoIndex]
        guard video.proto.uppercased().hasSuffix("SAVPF") else {
            throw Refusal(status: 400, reason: "the video m-line's protocol is \(video.proto), not UDP/TLS/RTP/SAVPF (DTLS-SRTP)")
        }
        guard video.direction == "recvonly" || video.direction == "sendrecv" else {
            throw Refusal(status: 400, reason: "the video m-line is \(video.direction): a WHEP viewer must receive it")
        }
        guard let ufrag = video.iceUfrag, let password = video.icePassword, !ufrag.isEmpty, password.count >= 22 else {
            throw Refusal(status: 400, reason: "the offer has no ICE credentials (a=ice-ufrag and an a=ice-pwd of at least 22 characters)")
        }
        guard let fingerprint = video.fingerprint, fingerprint.algorithm == "sha-256" else {
            throw Refusal(status: 400, reason: "the offer has no a=fingerprint:sha-256 for its DTLS certificate")
        }
        guard video.setup == "actpass" || video.setup == "active" else {
            throw Refusal(status: 406, reason: "the offer asks the node to be the DTLS client (a=setup:\(video.setup ?? "missing")); the node is a DTLS server (setup:passive)")
        }
        guard let rung = H264ProfileLevel(video: plan.videoProfileLevelID) else {
            throw Refusal(status: 406, reason: "the rung's profile-level-id \(plan.videoProfileLevelID) is not H.264 the node can describe")
        }
        let candidates = video.formats.filter { format in
            format.encoding.uppercased() == "H264" && format.clockRate == 90000 && format.parameters["packetization-mode"] == "1"
                && H264ProfileLevel(video: format.parameters["profile-level-id"] ?? "420010").map { rung.isDecodable(by: $0) } == true
        }
        // An exact profile first: the browser's own preference order among the rest.
        guard let chosen = candidates.first(where: { H264ProfileLevel(video: $0.parameters["profile-level-id"] ?? "")?.profile == rung.profile })
                ?? candidates.first else {
            let offered = video.formats.filter { $0.encoding.uppercased() == "H264" }
                .map { "\($0.payloadType) (\($0.parameters["profile-level-id"] ?? "no profile-level-id"), packetization-mode \($0.parameters["packetization-mode"] ?? "0"))" }
            throw Refusal(status: 406, reason: "no H.264 format in the offer takes the rung's \(rung.name) (\(plan.videoProfileLevelID)) with packetization-mode 1; offered: \(offered.isEmpty ? "none" : offered.joined(separator: ", "))")
        }
        let rtx = video.formats.first { $0.encoding.lowercased() == "rtx" && $0.parameters["apt"] == String(chosen.payloadType) }
        let twcc = Self.oneByteID(video, transportSequenceURI)
        let playoutDelay = Self.oneByteID(video, playoutDelayURI).flatMap { $0 == twcc ? nil : $0 }
        let feedback = supportedFeedback.filter { chosen.feedback.contains($0) && ($0 != "transport-cc" || twcc != nil) }

        var lines = ["v=0", "o=- \(UInt64(plan.videoSSRC) << 16 | UInt64(plan.audioSSRC ?? 0) & 0xFFFF) 2 IN IP4 127.0.0.1", "s=-", "t=0 0",
                     "a=ice-lite", "a=group:BUNDLE \(offer.bundle.joined(separator: " "))", "a=msid-semantic: WMS \(plan.streamID)"]
        var audioPayloadType: UInt8?
        var audioTWCC: Int?
        for media in offer.media {
            let bundled = media.mid.map(offer.bundle.contains) == true && !media.isRejected
            let formatList = media.formats.map { String($0.payloadType) }.joined(separator: " ")
            guard bundled, media.kind == "video" || media.kind == "audio", media.mid == video.mid || media.kind == "audio" && audioPayloadType == nil else {
                // Rejected, unbundled, data channels, a second video or audio: port 0 (RFC 3264 §6).
                lines.append("m=\(media.kind) 0 \(media.proto) \(formatList.isEmpty ? "0" : formatList)")
                lines.append("c=IN IP4 0.0.0.0")
                if let mid = media.mid { lines.append("a=mid:\(mid)") }
                lines.append("a=inactive")
                continue
            }
            if media.kind == "video" {
                let payloadTypes = [chosen.payloadType] + (rtx.map { [$0.payloadType] } ?? [])
                lines.append("m=video 9 UDP/TLS/RTP/SAVPF \(payloadTypes.map(String.init).joined(separator: " "))")
                lines += transportLines(media: media, plan: plan, extensionID: twcc)
                if let playoutDelay { lines.append("a=extmap:\(playoutDelay) \(playoutDelayURI)") }
                lines.append("a=sendonly")
                lines.append("a=msid:\(plan.streamID) video")
                lines.append("a=rtpmap:\(chosen.payloadType) H264/90000")
                for item in feedback { lines.append("a=rtcp-fb:\(chosen.payloadType) \(item)") }
                lines.append("a=fmtp:\(chosen.payloadType) level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=\(plan.videoProfileLevelID.lowercased())")
                if let rtx {
                    lines.append("a=rtpmap:\(rtx.payloadType) rtx/90000")
                    lines.append("a=fmtp:\(rtx.payloadType) apt=\(chosen.payloadType)")
                    lines.append("a=ssrc-group:FID \(plan.videoSSRC) \(plan.retransmissionSSRC)")
                }
                lines.append("a=ssrc:\(plan.videoSSRC) cname:\(plan.streamID)")
                if rtx != nil { lines.append("a=ssrc:\(plan.retransmissionSSRC) cname:\(plan.streamID)") }
            } else {
                let opus = media.formats.first { $0.encoding.lowercased() == "opus" && $0.clockRate == 48000 && ($0.channels ?? 1) == 2 }
                guard let opus else {
                    throw Refusal(status: 406, reason: "the offer's audio m-line has no Opus 48000/2, the only audio the node sends to browsers")
                }
                audioPayloadType = opus.payloadType
                audioTWCC = Self.oneByteID(media, transportSequenceURI)
                lines.append("m=audio 9 UDP/TLS/RTP/SAVPF \(opus.payloadType)")
                lines += transportLines(media: media, plan: plan, extensionID: audioTWCC)
                lines.append(plan.audioSSRC == nil ? "a=inactive" : "a=sendonly")
                lines.append("a=msid:\(plan.streamID) audio")
                lines.append("a=rtpmap:\(opus.payloadType) opus/48000/2")
                if opus.feedback.contains("transport-cc"), audioTWCC != nil {
                    lines.append("a=rtcp-fb:\(opus.payloadType) transport-cc")
                }
                lines.append("a=fmtp:\(opus.payloadType) minptime=10;useinbandfec=1;stereo=1")
                if let ssrc = plan.audioSSRC { lines.append("a=ssrc:\(ssrc) cname:\(plan.streamID)") }
            }
        }
        return WHEPAnswer(sdp: lines.joined(separator: "\r\n") + "\r\n", videoPayloadType: chosen.payloadType,
                          retransmissionPayloadType: rtx?.payloadType, audioPayloadType: plan.audioSSRC == nil ? nil : audioPayloadType,
                          transportSequenceExtension: twcc, audioTransportSequenceExtension: plan.audioSSRC == nil ? nil : audioTWCC,
                          playoutDelayExtension: playoutDelay,
                          remoteUfrag: ufrag, remotePassword: password, remoteFingerprint: fingerprint, videoFeedback: feedback,
                          videoDecoder: H264ProfileLevel(video: chosen.parameters["profile-level-id"] ?? "420010"))
    }

    /// An offered extension's id where the node can write it: RFC 8285's one-byte form (ids
    /// 1–14), the only one it sends. An offer that names it 15 or above (the two-byte form) gets
    /// an answer without it, as a peer that did not offer it would: the node had written such an
    /// id into a byte and trapped on its first packet.
    static func oneByteID(_ media: WebRTCOffer.Media, _ uri: String) -> Int? {
        media.extensionID(uri).flatMap { (1...14).contains($0) ? $0 : nil }
    }

    private static func transportLines(media: WebRTCOffer.Media, plan: Plan, extensionID: Int?) -> [String] {
        var lines = ["c=IN IP4 0.0.0.0", "a=mid:\(media.mid ?? "")", "a=ice-ufrag:\(plan.iceUfrag)", "a=ice-pwd:\(plan.icePassword)",
                     "a=fingerprint:sha-256 \(plan.fingerprint)", "a=setup:passive", "a=rtcp-mux"]
        if let extensionID { lines.append("a=extmap:\(extensionID) \(transportSequenceURI)") }
        for (index, candidate) in plan.candidates.enumerated() {
            lines.append("a=candidate:\(index + 1) 1 udp \(2_130_706_431 - index) \(candidate.address) \(candidate.port) typ host")
        }
        lines.append("a=end-of-candidates")
        return lines
    }
}

/// An H.264 `profile-level-id` (RFC 6184 §8.1): profile_idc, the constraint flags, level_idc.
public struct H264ProfileLevel: Sendable, Equatable {
    public enum Profile: Sendable, Equatable {
        case constrainedBaseline, baseline, main, extended, high, other(UInt8)
    }

    public var profileIDC: UInt8
    public var constraints: UInt8
    public var levelIDC: UInt8

    /// From a sequence parameter set (its bytes 1–3 are profile_idc, the constraint flags and level_idc).
    public init?(sps: [UInt8]) {
        guard sps.count >= 4 else { return nil }
        (profileIDC, constraints, levelIDC) = (sps[1], sps[2], sps[3])
    }

    public init?(video hex: String) {
        guard hex.count == 6, let value = UInt32(hex, radix: 16) else { return nil }
        profileIDC = UInt8(value >> 16)
        constraints = UInt8((value >> 8) & 0xFF)
        levelIDC = UInt8(value & 0xFF)
    }

    /// RFC 6184 Table 5: constraint_set1 on baseline (0x42, or 0x4D/0x58 with set0 and set1)
    /// means Constrained Baseline.
    public var profile: Profile {
        let set0 = constraints & 0x80 != 0, set1 = constraints & 0x40 != 0
        switch profileIDC {
        case 0x42: return set1 ? .constrainedBaseline : .baseline
        case 0x4D: return set0 && set1 ? .constrainedBaseline : .main
        case 0x58: return set0 && set1 ? .constrainedBaseline : .extended
        case 0x64: return .high
        default: return .other(profileIDC)
        }
    }

    public var name: String {
        switch profile {
        case .constrainedBaseline: "Constrained Baseline"
        case .baseline: "Baseline"
        case .main: "Main"
        case .extended: "Extended"
        case .high: "High"
        case let .other(idc): "profile_idc \(idc)"
        }
    }

    /// High and the profiles above it (High 10, High 4:2:2, High 4:4:4 Predictive): H.264 Annex A
    /// makes each one's decoders decode every profile before it. Chromium without proprietary
    /// codecs offers High 4:4:4 Predictive (`f4001f`) and no plain High.
    static let highFamily: [UInt8] = [100, 110, 122, 244]

    /// Whether a decoder offered as `decoder` takes a stream of this profile. The level does not
    /// matter: WebRTC offers carry level-asymmetry-allowed, and browsers decode above the level
    /// they name. Constrained Baseline is a subset of every profile here.
    public func isDecodable(by decoder: H264ProfileLevel) -> Bool {
        let decoderRank = Self.highFamily.firstIndex(of: decoder.profileIDC)
        switch profile {
        case .constrainedBaseline: return true
        case .baseline: return decoder.profile == .baseline || decoder.profile == .extended
        case .main: return decoder.profile == .main || decoderRank != nil
        case .high: return decoderRank != nil
        case let .other(idc):
            guard let rank = Self.highFamily.firstIndex(of: idc), let decoderRank else { return false }
            return rank <= decoderRank
        case .extended: return decoder.profile == .extended
        }
    }
}
