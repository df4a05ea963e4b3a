import AccessTokens
import Digests
import Foundation
import MediaCore
import NIOCore
import NIOEmbedded
import RTMP
import RTSP
import RTSPServer
import Store
import Transcoder
import WebRTC

/// Every parser that takes bytes from the network or an API client, as one entry point each.
/// libFuzzer drives them through `abr-fuzz` (built with `-sanitize=fuzzer`); the test suite replays
/// the committed corpus and seeded mutations through the same functions. A target returns normally
/// for every input: a trap, an unbounded recursion or allocation is the bug being looked for.
public enum FuzzTarget: String, CaseIterable, Sendable {
    case rtspMessage = "rtsp-message"
    case transport
    case sdp
    case rtp
    case rtcp
    case rtcpFeedback = "rtcp-feedback"
    case h264Depacketizer = "h264-depacketizer"
    case aacDepacketizer = "aac-depacketizer"
    case latm
    case reorderBuffer = "reorder-buffer"
    case sps
    case sprop
    case provision
    case hlsPath = "hls-path"
    case rtspConnection = "rtsp-connection"
    case rtspAuthorization = "rtsp-authorization"
    case hlsPlaylist = "hls-playlist"
    case mediaTime = "media-time"
    case amf0
    case flvMedia = "flv-media"
    case rtmpSession = "rtmp-session"
    case srtStreamID = "srt-stream-id"
    case elementaryStreams = "elementary-streams"
    case rtmpChunks = "rtmp-chunks"
    case transportStreamGuard = "ts-guard"
    case stun
    case sdpOffer = "sdp-offer"
    case webrtcFeedback = "webrtc-feedback"
    case bearerToken = "bearer-token"
    case playbackToken = "playback-token"
    case postgresBackend = "postgres-backend"

    public func run(_ bytes: [UInt8]) {
        switch self {
        case .rtspMessage: Self.rtspMessage(bytes)
        case .transport: _ = RTSPTransport.parseAlternatives(String(decoding: bytes, as: UTF8.self)).map(\.headerValue)
        case .sdp: Self.sdp(bytes)
        case .rtp: Self.rtp(bytes)
        case .rtcp: _ = RTCPPacket.parseCompound(ByteBuffer(bytes: bytes))
        case .rtcpFeedback: Self.rtcpFeedback(bytes)
        case .h264Depacketizer: Self.h264(bytes)
        case .aacDepacketizer: Self.aac(bytes)
        case .latm: Self.latm(bytes)
        case .reorderBuffer: Self.reorder(bytes)
        case .sps: Self.sps(bytes)
        case .sprop: Self.sprop(bytes)
        case .provision: Self.provision(bytes)
        case .hlsPath: Self.hlsPath(bytes)
        case .rtspConnection: Self.rtspConnection(bytes)
        case .rtspAuthorization: Self.rtspAuthorization(bytes)
        case .hlsPlaylist:
            let next = HLSPlaylistContinuation(playlistText: String(decoding: bytes, as: UTF8.self))
            precondition(next.staleFiles.allSatisfy { !$0.contains("/") }, "a playlist named a file outside its folder")
        case .mediaTime: Self.mediaTime(bytes)
        case .amf0: Self.amf0(bytes)
        case .flvMedia: Self.flvMedia(bytes)
        case .rtmpSession: Self.rtmpSession(bytes)
        case .srtStreamID: Self.srtStreamID(bytes)
        case .elementaryStreams: Self.elementaryStreams(bytes)
        case .rtmpChunks: Self.rtmpChunks(bytes)
        case .transportStreamGuard: Self.transportStreamGuard(bytes)
        case .stun: Self.stun(bytes)
        case .sdpOffer: Self.sdpOffer(bytes)
        case .webrtcFeedback: Self.webrtcFeedback(bytes)
        case .bearerToken: Self.bearerToken(bytes)
        case .playbackToken: Self.playbackToken(bytes)
        case .postgresBackend: Self.postgresBackend(bytes)
        }
    }

    // MARK: - Targets

    /// The API's `Authorization: Bearer` value: refused with a reason, or accepted only when it is
    /// what the node itself would sign (an HS256 JWT under its key whose signature matches).
    static func bearerToken(_ bytes: [UInt8]) {
        let text = String(decoding: bytes, as: UTF8.self)
        let authority = TokenAuthority(secret: fuzzSecret)
        switch authority.verify(text, now: Date(timeIntervalSince1970: 1_800_000_000)) {
        case .success:
            let parts = text.split(separator: ".", omittingEmptySubsequences: false)
            precondition(parts.count == 3, "a bearer token of \(parts.count) parts was accepted")
            let signingInput = Data(text.utf8.prefix(parts[0].utf8.count + 1 + parts[1].utf8.count))
            let expected = Base64URL.encode(Data(Digest.hmac(.sha256, signingInput, key: Digest.Key(fuzzSecret.utf8))))
            precondition(parts[2] == expected, "a bearer token was accepted without the node's signature")
        case let .failure(refusal):
            precondition(!refusal.reason.isEmpty && refusal.reason.utf8.count < 120, "a refusal without a short reason")
        }
    }

    /// A `?token=` for signed playback: refused for a reason, or accepted only when signed under
    /// the key for one of the paths asked about.
    static func playbackToken(_ bytes: [UInt8]) {
        let text = String(decoding: bytes, as: UTF8.self)
        let key = Digest.Key(fuzzSecret.utf8)
        let paths = ["live/stream1", "live/stream1_2"]
        guard PlaybackToken.verify(text, paths: paths, epoch: 7, clientAddress: "127.0.0.1", now: 1_800_000_000, key: key) == nil else { return }
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        precondition(text.utf8.count <= PlaybackToken.maximumLength && parts.count == 3, "an unbounded playback token was accepted")
        let minted = paths.map { PlaybackToken(path: $0, epoch: 7, expires: Int64(parts[0]) ?? 0, clientAddress: parts[1] == "a" ? "127.0.0.1" : nil).signed(with: key) }
        precondition(minted.contains(text), "a playback token the node did not sign was accepted")
    }

    /// The key both token targets check against; their seeds include tokens signed with it.
    public static let fuzzSecret = "fuzz-secret-0123456789"

    /// A WebRTC viewer's RTCP (after SRTCP): every figure within the bounds the node relies on.
    static func webrtcFeedback(_ bytes: [UInt8]) {
        for item in RTCPFeedback.parseCompound(bytes) {
            switch item {
            case let .nack(_, sequences): precondition(sequences.count <= RTCPFeedback.maximumNackedSequences)
            case let .receiverEstimate(bitRate, _): precondition(bitRate <= RTCPFeedback.maximumBitRate)
            case let .transportFeedback(feedback): precondition(feedback.packets.count <= TransportFeedback.maximumStatuses)
            default: break
            }
        }
    }

    /// A WHEP POST's body: read within its limits, or refused with a printable reason.
    static func sdpOffer(_ bytes: [UInt8]) {
        do {
            let offer = try WebRTCOffer.parse(String(decoding: bytes, as: UTF8.self))
            precondition(offer.media.count <= WebRTCOffer.maximumMedia && offer.media.allSatisfy { $0.formats.count <= WebRTCOffer.maximumFormatsPerMedia })
        } catch {
            precondition(error.description.unicodeScalars.allSatisfy { $0.value >= 0x20 && $0.value < 0x7F }, "unescaped bytes in \(error.description)")
        }
    }

    /// A datagram on the WebRTC port that claims to be STUN: parsed, re-encoded and read back
    /// the same, and answered by ICE-lite for a session whose ufrag a mutation can hit.
    /// What a PostgreSQL server (or something posing as one) sends the fleet's store: whole
    /// messages decoded, anything else refused with a PostgresFailure; with or without the SSL
    /// answer byte first.
    static func postgresBackend(_ bytes: [UInt8]) {
        for expectingSSLResponse in [false, true] {
            if case let .failure(error) = PostgresBackendDecoder.decodeAll(bytes, expectingSSLResponse: expectingSSLResponse) {
                precondition(error is PostgresFailure, "the PostgreSQL decoder failed with \(type(of: error)), not a PostgresFailure")
            }
        }
    }

    static func stun(_ bytes: [UInt8]) {
        if let received = try? STUNMessage.parse(bytes) {
            let again = try? STUNMessage.parse(received.message.encoded(integrityKey: [1, 2, 3]))
            precondition(again?.message == received.message, "a STUN message did not survive its own encoding")
        }
        let session = ICELiteResponder.Credentials(localUfrag: "node", localPassword: "node-password-0123456789", remoteUfrag: "brws")
        switch ICELiteResponder.respond(to: bytes, from: [127, 0, 0, 1], port: 9) { $0 == "node" ? session : nil } {
        case let .answer(response, _, _), let .refuse(response?, _):
            precondition((try? STUNMessage.parse(response)) != nil, "ICE-lite answered with a message it cannot read back")
        case .refuse, .ignore:
            break
        }
    }

    /// The first byte chooses how the input is cut into reads, as TCP would deliver it.
    static func rtspMessage(_ bytes: [UInt8]) {
        guard let first = bytes.first else { return }
        var parser = RTSPMessageParser()
        var buffer = ByteBuffer()
        for chunk in bytes.dropFirst().chunks(of: Int(first % 32) + 1) {
            buffer.writeBytes(chunk)
            do {
                while let item = try parser.parse(&buffer) {
                    if case let .request(request) = item {
                        var out = ByteBuffer()
                        request.write(to: &out)
                        _ = request.headers.sessionID
                    }
                }
            } catch {
                // What the log and the 400 answer say about the peer's bytes must be printable.
                precondition(error.description.unicodeScalars.allSatisfy { $0.value >= 0x20 && $0.value < 0x7F },
                             "unescaped bytes in \(error.description)")
                return
            }
        }
    }

    static func sdp(_ bytes: [UInt8]) {
        guard let description = try? SessionDescription.parse(String(decoding: bytes, as: UTF8.self)) else { return }
        _ = description.render()
        try? description.validateForPublishing(maximumPixels: 4096 * 2304)
        for media in description.media { _ = (media.aacFormat, media.frameRate, media.spropSPS) }
    }

    static func rtp(_ bytes: [UInt8]) {
        guard let packet = try? RTPPacket(parsing: ByteBuffer(bytes: bytes)) else { return }
        var out = ByteBuffer()
        packet.write(to: &out)
    }

    /// Packets framed as `length(1) bytes...`, so one input is a sequence of RTP packets.
    static func packets(_ bytes: [UInt8]) -> [RTPPacket] {
        var packets: [RTPPacket] = []
        var rest = bytes[...]
        while let length = rest.first {
            rest = rest.dropFirst()
            let body = rest.prefix(Int(length))
            rest = rest.dropFirst(body.count)
            if let packet = try? RTPPacket(parsing: ByteBuffer(bytes: body)) { packets.append(packet) }
        }
        return packets
    }

    static func h264(_ bytes: [UInt8]) {
        var depacketizer = H264Depacketizer()
        for (index, packet) in packets(bytes).enumerated() {
            for unit in depacketizer.push(packet, lostBefore: index % 7 == 6) {
                _ = unit.annexB
                if let sps = unit.nalUnits.first(where: { ($0.first ?? 0) & 0x1F == 7 }) { _ = H264SPS(sps) }
            }
        }
    }

    static func aac(_ bytes: [UInt8]) {
        var depacketizer = AACDepacketizer()
        for packet in packets(bytes) { _ = depacketizer.push(packet) }
    }

    /// A StreamMuxConfig (its length in the first byte), then packets as `packets` frames them,
    /// depacketized with the config's frame count, or the length byte's when it is unreadable.
    static func latm(_ bytes: [UInt8]) {
        guard let first = bytes.first else { return }
        let config = Array(bytes.dropFirst().prefix(Int(first % 32)))
        _ = AudioSpecificConfig(config)
        let frames = LATMStreamMuxConfig(config)?.framesPerElement ?? Int(first >> 5) + 1
        var depacketizer = LATMDepacketizer(framesPerElement: frames)
        for (index, packet) in packets(Array(bytes.dropFirst(1 + config.count))).enumerated() {
            _ = depacketizer.push(packet, lostBefore: index % 5 == 4)
        }
    }

    /// Two bytes a packet: its sequence number, so the input is an arrival order.
    static func reorder(_ bytes: [UInt8]) {
        var buffer = RTPReorderBuffer(capacity: 16)
        var statistics = ReceptionStatistics()
        var index = 0
        while index + 1 < bytes.count {
            let sequence = UInt16(bytes[index]) << 8 | UInt16(bytes[index + 1])
            let packet = RTPPacket(marker: false, payloadType: 96, sequenceNumber: sequence, timestamp: UInt32(index), ssrc: 1, payload: ByteBuffer())
            statistics.record(packet, arrival: Double(index), clockRate: 90000)
            _ = buffer.push(packet)
            index += 2
        }
        _ = statistics.reportBlock()
    }

    static func sps(_ bytes: [UInt8]) {
        guard let sps = H264SPS(bytes) else { return }
        _ = (sps.reorderDepth, H264.codecString(sps: bytes))
    }

    static func sprop(_ bytes: [UInt8]) {
        let sets = H264.parameterSets(fromSprop: String(decoding: bytes, as: UTF8.self))
        for set in sets { _ = H264SPS(set) }
        _ = H264.sprop(sets)
        _ = H264.parameterSets(fromExtradata: bytes)
        _ = H264.annexBUnits(bytes)
        _ = H264.lengthPrefixedUnits(bytes)
    }

    /// Timestamps and time bases come from the network (RTP timestamps, SDP clock rates, container
    /// time bases): 16-byte records of ticks, numerator and denominator go through rescaling,
    /// comparison and both grid modes. The first byte picks the grid interval.
    static func mediaTime(_ bytes: [UInt8]) {
        guard let first = bytes.first else { return }
        var grids = [KeyframeGrid(mode: .interval(Double(first % 16) / 2)), KeyframeGrid(mode: .followSource(minimumSegment: Double(first >> 4)))]
        func integer<T: FixedWidthInteger>(_ slice: ArraySlice<UInt8>) -> T { slice.reduce(T.zero) { $0 << 8 | T($1) } }
        var previous: MediaTime?
        for record in bytes.dropFirst().chunks(of: 16) where record.count == 16 {
            let start = record.startIndex
            let time = MediaTime(ticks: integer(record[start..<start + 8]),
                                 timeBase: Rational(integer(record[start + 8..<start + 12]), integer(record[start + 12..<start + 16])))
            for target in [Rational(1, 90000), Rational(1, 1000), Rational(1001, 30000), time.timeBase] {
                _ = time.ticks(in: target)
            }
            _ = time.seconds
            if let previous {
                precondition(!(previous < time && time < previous), "MediaTime ordering is not antisymmetric")
                if previous == time { precondition(previous.hashValue == time.hashValue, "equal instants hash apart") }
                _ = previous + time
                _ = previous - time
            }
            for index in grids.indices { _ = grids[index].decide(time: time, isSourceKeyframe: time.ticks & 1 == 0) }
            previous = time
        }
        // NAL splitting in place, from a slice that does not start at 0, as a packet's payload is read.
        _ = H264.accessUnitNALUnits(bytes.dropFirst())
    }

    static func provision(_ bytes: [UInt8]) {
        _ = try? ProvisionParser.parse(bytes)
        _ = try? ProvisionParser.parse(bytes, streamGuid: "live/fuzz")
    }

    /// A fixed tree with a playlist, a segment, a hidden file and a symbolic link out of it.
    static let hlsRoot: HLSFiles = {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("abr-fuzz-hls-\(getpid())")
        let variant = root.appendingPathComponent("live/a_1")
        try? FileManager.default.createDirectory(at: variant, withIntermediateDirectories: true)
        for name in ["index.m3u8", "seg1.m4s", "init.mp4", ".hidden.m3u8"] {
            FileManager.default.createFile(atPath: variant.appendingPathComponent(name).path, contents: Data("x".utf8))
        }
        try? FileManager.default.createSymbolicLink(atPath: root.appendingPathComponent("live/out").path, withDestinationPath: "/etc")
        return HLSFiles(root: root)
    }()

    static func hlsPath(_ bytes: [UInt8]) {
        let text = String(decoding: bytes, as: UTF8.self)
        // `path?query`: the query's Low-Latency directives, as a player may write them.
        let parts = text.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        let path = String(parts[0])
        if parts.count == 2 {
            var values: [String: String] = [:]
            for pair in parts[1].split(separator: "&").prefix(16) {
                let field = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                values[String(field[0])] = field.count == 2 ? String(field[1]) : ""
            }
            if let directives = try? HLSDeliveryDirectives(msn: values["_HLS_msn"], part: values["_HLS_part"], skip: values["_HLS_skip"]) {
                precondition(directives.part == nil || directives.mediaSequence != nil, "a part without a segment was accepted")
                _ = directives.tooFarAhead(of: .init(mediaSequence: 5, part: 2))
            }
        }
        _ = HLSLayout.isPartialSegment(path.split(separator: "/").last.map(String.init) ?? "")
        guard let file = hlsRoot.resolve(rawPath: path[...]) else { return }
        // Whatever resolves must lie inside the root.
        precondition(file.url.standardizedFileURL.path.hasPrefix(hlsRoot.root.path + "/"), "\(path) escaped to \(file.url.path)")
    }

    static let authenticator = RTSPAuthenticator(secret: "fuzz", nonceLifetime: 1 << 40)

    static func rtspAuthorization(_ bytes: [UInt8]) {
        let header = String(decoding: bytes, as: UTF8.self)
        _ = RTSPAuthorization(parsing: header)
        _ = authenticator.verify(header, method: "ANNOUNCE", requestURI: "rtsp://h/live/a_1", credentials: StreamCredentials(username: "user", password: "pass"), now: 1 << 32)
    }

    /// A whole RTSP connection, in-process: the server's own handler on an embedded channel,
    /// fed the input in TCP-sized reads, with the relay policy (any path may publish).
    static func rtspConnection(_ bytes: [UInt8]) {
        guard let first = bytes.first else { return }
        let registry = StreamRegistry()
        var configuration = RTSPService.Configuration()
        configuration.maximumSessions = 4
        let service = RTSPService(configuration: configuration, registry: registry, policy: RelayEverything(registry: registry))
        let channel = EmbeddedChannel(handlers: service.makeConnectionHandlers())
        for chunk in bytes.dropFirst().chunks(of: Int(first) * 8 + 1) {
            guard channel.isActive else { break }
            _ = try? channel.writeInbound(ByteBuffer(bytes: chunk))
            while (try? channel.readOutbound(as: ByteBuffer.self)) ?? nil != nil {}
        }
        _ = try? channel.finish()
        service.shutdown()
    }

    /// A UDP player's receiver reports as its adaptation reads them: the first byte says how many
    /// packets were sent (and from which sequence), the second how far apart reports arrive; the
    /// rest is compound RTCP, read one packet's worth at a time. Every reading must be a number
    /// the policy can use, and the policy must keep the player on a rung of its ladder.
    static func rtcpFeedback(_ bytes: [UInt8]) {
        guard bytes.count > 2 else { return }
        var meter = ReceiverReportMeter(capacity: 64)
        let first = UInt16(bytes[0]) << 8 | UInt16(bytes[1])
        for index in 0..<Int(bytes[0]) { meter.sent(sequence: first &+ UInt16(index), bytes: 100 + index) }
        meter.sentReport(ntpTimestamp: 0x0102_0304_0506_0708, at: 0)
        let rungs = [SwitchingPolicy.Rung(level: 1, bitRate: 2_000_000, upswitchAbove: 2_400_000, downswitchBelow: 1_800_000),
                     SwitchingPolicy.Rung(level: 2, bitRate: 800_000, upswitchAbove: 960_000, downswitchBelow: 720_000)]
        var policy = SwitchingPolicy(rungs: rungs, startingAt: 1)
        var time = 0.0
        for chunk in bytes.dropFirst(2).chunks(of: 32) {
            for case let .receiverReport(_, blocks) in RTCPPacket.parseCompound(ByteBuffer(bytes: chunk)) {
                for block in blocks {
                    time += Double(bytes[1]) / 100
                    meter.sent(sequence: first &+ UInt16(truncatingIfNeeded: Int(time * 10)), bytes: 1200)
                    guard let reading = meter.receive(block, at: time) else { continue }
                    precondition((0...1).contains(reading.lossFraction) && reading.inFlightBytes >= 0, "reading out of range: \(reading)")
                    precondition(reading.bitRate.map { $0.isFinite && $0 >= 0 } ?? true, "rate out of range: \(reading)")
                    precondition(reading.roundTrip.map { $0 >= 0 && $0 < 10 } ?? true, "round trip out of range: \(reading)")
                    _ = policy.observe(.init(time: time, estimate: reading.bitRate, appLimited: reading.inFlightBytes == 0,
                                             lossFraction: reading.lossFraction, backlogSeconds: Double(reading.inFlightBytes) * 8 / 800_000))
                    precondition(rungs.contains { $0.level == policy.level }, "policy left the ladder")
                }
            }
        }
    }

    /// AMF0 as RTMP commands carry it: whatever decodes must encode and decode to the same values.
    static func amf0(_ bytes: [UInt8]) {
        guard let values = try? AMF0.decodeAll(ByteBuffer(bytes: bytes)) else { return }
        let again = try? AMF0.decodeAll(AMF0.encode(values))
        precondition(again == values, "AMF0 did not survive a round trip")
    }

    /// An FLV video or audio tag body (the first byte chooses which), with a NAL length size of 1 to 4.
    static func flvMedia(_ bytes: [UInt8]) {
        guard let first = bytes.first else { return }
        let payload = ByteBuffer(bytes: bytes.dropFirst())
        if first & 1 == 0 {
            if case let .picture(units, _, _)? = try? FLVVideo.parse(payload, lengthSize: Int(first >> 1 & 3) + 1) {
                precondition(units.allSatisfy { !$0.isEmpty }, "an empty NAL unit")
            }
        } else {
            _ = try? FLVAudio.parse(payload)
        }
    }

    /// A whole RTMP publisher's bytes after its C0+C1 and C2, cut into reads by the first byte, through
    /// the chunk decoder and the publish session (which is accepted when it asks): no message may
    /// exceed the limit, and nothing may trap, whatever commands and media the bytes hold.
    static func rtmpSession(_ bytes: [UInt8]) {
        guard let first = bytes.first else { return }
        var decoder = RTMPChunkDecoder()
        var session = RTMPPublishSession()
        var buffer = ByteBuffer(bytes: [3] + [UInt8](repeating: 0, count: 2 * RTMPHandshake.packetSize))
        var chunks = bytes.dropFirst().chunks(of: Int(first) * 16 + 1)[...]
        while true {
            do {
                while let item = try decoder.next(&buffer) {
                    guard case let .message(message)? = item else { continue }
                    precondition(message.payload.readableBytes <= decoder.limits.maximumMessageLength, "a message over the limit")
                    var actions = session.receive(message)
                    while !actions.isEmpty {
                        let action = actions.removeFirst()
                        if case .decide = action { actions += session.accept() }
                    }
                }
            } catch {
                return
            }
            guard let chunk = chunks.popFirst() else { return }
            buffer.writeBytes(chunk)
        }
    }

    /// RTMP chunking alone, with Set Chunk Size, Abort and Window Acknowledgement Size among the
    /// chunks (small limits, so they are reached): whatever the bytes, acknowledgements come at most
    /// once per window floor, and no message exceeds its limit.
    static func rtmpChunks(_ bytes: [UInt8]) {
        guard let first = bytes.first else { return }
        var limits = RTMPChunkDecoder.Limits()
        limits.maximumMessageLength = 64 * 1024
        limits.maximumBytesInProgress = 96 * 1024
        limits.minimumAcknowledgementWindow = 4096
        var decoder = RTMPChunkDecoder(limits: limits)
        var buffer = ByteBuffer(bytes: [3] + [UInt8](repeating: 0, count: 2 * RTMPHandshake.packetSize))
        var acknowledgements = 0
        for chunk in bytes.dropFirst().chunks(of: Int(first % 64) + 1) {
            buffer.writeBytes(chunk)
            do {
                while let item = try decoder.next(&buffer) {
                    switch item {
                    case let .message(message)?:
                        precondition(message.payload.readableBytes <= limits.maximumMessageLength, "a message over the limit")
                    case .acknowledge?:
                        acknowledgements += 1
                    default:
                        break
                    }
                }
            } catch {
                return
            }
            precondition(UInt64(acknowledgements) <= decoder.bytesReceived / 4096 + 1, "an acknowledgement more often than the window floor")
        }
    }

    /// MPEG-TS on its way to libavformat, cut into reads by the first byte: the guard either takes
    /// it or throws, and never traps.
    static func transportStreamGuard(_ bytes: [UInt8]) {
        guard let first = bytes.first else { return }
        var limits = TransportStreamGuard.Limits()
        limits.maximumNALUnits = 16
        limits.maximumAccessUnitBytes = 4096
        var guardian = TransportStreamGuard(limits: limits)
        for chunk in bytes.dropFirst().chunks(of: Int(first) * 8 + 1) {
            do { try guardian.inspect(chunk) } catch { return }
        }
    }

    /// An SRT stream ID as a publisher's handshake carries it: whatever is taken must name a stream
    /// the node could serve (no empty segment, no `..`).
    static func srtStreamID(_ bytes: [UInt8]) {
        guard let target = try? PublishTarget(srtStreamID: String(decoding: bytes, as: UTF8.self)) else { return }
        precondition(!target.path.isEmpty && !target.path.split(separator: "/", omittingEmptySubsequences: false).contains { $0.isEmpty || $0 == ".." },
                     "a stream ID gave the path \(target.path)")
    }

    /// A demuxer's output as an SRT publisher's stream gives it: the first byte picks video or
    /// audio for each piece (cut by the second), with growing times; formats must come before media.
    static func elementaryStreams(_ bytes: [UInt8]) {
        guard bytes.count > 2 else { return }
        // Odd lengths also hold pictures for an announced audio format.
        var streams = ElementaryStreams(awaitsAudio: bytes.count % 2 == 1)
        var sawVideoFormat = false, sawAudioFormat = false
        var time: Int64 = 0
        let pieces = Array(bytes.dropFirst(2).chunks(of: Int(bytes[1]) + 1))
        for index in 0...pieces.count {
            time += 3000
            let isVideo = (bytes[0] >> (index % 8)) & 1 == 0
            let events = index == pieces.count ? streams.finish()
                : isVideo ? streams.video(annexB: Array(pieces[index]), pts: time, isKeyframe: index % 5 == 0)
                : streams.audio(adts: Array(pieces[index]), pts: time)
            for event in events {
                switch event {
                case let .formats(video, audio):
                    sawVideoFormat = sawVideoFormat || video != nil
                    sawAudioFormat = sawAudioFormat || audio != nil
                case let .video(units, _, _):
                    precondition(sawVideoFormat && !units.isEmpty && units.allSatisfy { !$0.isEmpty }, "video before its format, or an empty NAL unit")
                case let .audio(frame, _):
                    precondition(sawAudioFormat && !frame.isEmpty, "audio before its format, or an empty frame")
                case .timelineRestarted:
                    break
                }
            }
        }
    }

    /// Inputs a target starts from: real exchanges captured from ffmpeg 5.1 and GStreamer 1.22.
    public var corpusDirectory: String { rawValue }
}

extension Collection {
    /// Consecutive pieces of at most `size` elements.
    func chunks(of size: Int) -> [SubSequence] {
        var pieces: [SubSequence] = []
        var start = startIndex
        while start != endIndex {
            let end = index(start, offsetBy: size, limitedBy: endIndex) ?? endIndex
            pieces.append(self[start..<end])
            start = end
        }
        return pieces
    }
}
