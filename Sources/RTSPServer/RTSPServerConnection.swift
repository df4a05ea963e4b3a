import AccessTokens
import Ingest
import Logging
import MediaCore
import NIOCore
import RTSP

/// One RTSP connection's requests, apart from its socket: what it asked for and owns (its
/// sessions, the streams it pinned or opened with a token), each request's answer, and its
/// interleaved media. `RTSPConnectionHandler` frames the bytes, writes the answers and runs what
/// comes after them; this keeps no `ChannelHandlerContext`, so a whole publish or play can be
/// driven through it on an `EmbeddedChannel`.
final class RTSPServerConnection {
    private let server: RTSPService
    /// The connection: sessions it creates remember it, interleaved players write to it.
    private let channel: Channel
    private var ownedSessions: Set<String> = []
    /// Streams this connection asked for with `?abr=off` (clients drop the query after DESCRIBE:
    /// their SETUP and PLAY go to the Content-Base).
    private var pinnedPaths: Set<String> = []
    /// Streams this connection opened with a valid playback token (at DESCRIBE, whose query the
    /// client then drops), so its SETUPs need not carry it again.
    private var grantedPaths: Set<String> = []
    /// The client's IP address: what an address-bound playback token is checked against.
    private let remoteIP: String
    private let logger: Logger
    /// The connection's written bytes, which a TCP player's outbox lines up with its acknowledgements.
    private let counter: WrittenBytesCounter?

    init(server: RTSPService, channel: Channel, counter: WrittenBytesCounter?, logger: Logger) {
        self.server = server
        self.channel = channel
        self.counter = counter
        self.logger = logger
        remoteIP = channel.remoteAddress?.ipAddress ?? "?"
    }

    /// One request's answer, and what to run once it is written.
    struct Outcome {
        var response: RTSPResponse
        /// Runs after the reply is written (a PLAY starts media only once its answer is out).
        var after: (() -> Void)?
    }

    /// Whether a session this connection created is still live (an idle connection without one is closed).
    var hasLiveSessions: Bool { ownedSessions.contains { server.sessions.session($0) != nil } }

    /// Ends every session the connection created: it closed.
    func endSessions() {
        for id in ownedSessions {
            if let session = server.sessions.session(id) { server.end(session, reason: "connection closed") }
        }
        ownedSessions.removeAll()
    }

    /// An interleaved frame: a publisher's RTP or RTCP, or a player's receiver report. Returns why
    /// the connection must close: the publisher switched to a picture the node refuses.
    func receiveInterleaved(channel number: UInt8, payload: ByteBuffer) -> String? {
        for id in ownedSessions {
            guard let session = server.sessions.session(id), let (track, isRTCP) = session.track(forChannel: number) else { continue }
            if isRTCP {
                session.touch()
            } else if let refusal = session.receiveRTP(payload, track: track, maximumPixels: server.configuration.maximumPublishPixels) {
                // The publisher switched to a picture the node refuses: its publish ends, and so does the connection.
                logger.warning("publish stopped: \(refusal)", metadata: ["stream.guid": "\(session.path)"])
                server.end(session, reason: refusal)
                return refusal
            }
            return nil
        }
        // A player's RTCP receiver reports arrive here too: they keep its session alive.
        for id in ownedSessions { server.sessions.session(id)?.touch() }
        return nil
    }

    /// CSeq is echoed in every answer, so only what RFC 2326 allows in it (1*DIGIT) is.
    static func isSequenceNumber(_ value: String) -> Bool {
        !value.isEmpty && value.utf8.count <= 10 && value.utf8.allSatisfy { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
    }

    /// Answers one request. The handler adds the CSeq (when it is a number) and the Server header.
    func answer(_ request: RTSPRequest) -> Outcome {
        if RTSPURL.pinsRung(request.uri), let path = RTSPURL.path(of: request.uri), pinnedPaths.count < 16 {
            pinnedPaths.insert(RTSPURL.stripControl(path))
        }
        guard let cseq = request.cseq else {
            return Outcome(response: RTSPResponse(status: 400, body: Array("missing CSeq\n".utf8)))
        }
        guard Self.isSequenceNumber(cseq) else {
            return Outcome(response: RTSPResponse(status: 400, body: Array("CSeq must be a decimal number of at most 10 digits\n".utf8)))
        }
        let session: ServerSession?
        if let id = request.headers.sessionID {
            guard !id.isEmpty else { return Outcome(response: RTSPResponse(status: 454, body: Array("empty Session header\n".utf8))) }
            guard let found = server.sessions.session(id) else { return Outcome(response: RTSPResponse(status: 454)) }
            session = found
            found.touch()
        } else {
            session = nil
        }
        if let session, request.method != "OPTIONS" {
            let decision = session.state.withLock { $0.machine.decide(request.method) }
            if decision == .notValidInState, !["SETUP", "PLAY", "RECORD", "PAUSE", "TEARDOWN", "GET_PARAMETER", "SET_PARAMETER", "DESCRIBE"].contains(request.method) {
                return Outcome(response: RTSPResponse(status: 501))
            }
            if decision == .notValidInState { return Outcome(response: RTSPResponse(status: 455, headers: ["Allow": allowed(for: session)])) }
        }
        switch request.method {
        case "OPTIONS":
            return Outcome(response: RTSPResponse(status: 200, headers: ["Public": RTSPService.supportedMethods]))
        case "DESCRIBE":
            return describe(request)
        case "ANNOUNCE":
            return announce(request)
        case "SETUP":
            return setup(request, session: session)
        case "PLAY":
            return play(request, session: session)
        case "RECORD":
            return record(session: session)
        case "PAUSE":
            return pause(session: session)
        case "TEARDOWN":
            return teardown(session: session)
        case "GET_PARAMETER":
            return Outcome(response: RTSPResponse(status: 200, headers: sessionHeader(session)))
        case "SET_PARAMETER":
            return setParameter(request, session: session)
        default:
            return Outcome(response: RTSPResponse(status: 501, headers: ["Public": RTSPService.supportedMethods]))
        }
    }

    private func allowed(for session: ServerSession) -> String {
        let machine = session.state.withLock { $0.machine }
        return RTSPService.supportedMethods.split(separator: ",").map(\.trimmed)
            .filter { machine.decide($0) != .notValidInState }.joined(separator: ", ")
    }

    private func sessionHeader(_ session: ServerSession?) -> RTSPHeaders {
        guard let session else { return [:] }
        return ["Session": "\(session.id);timeout=\(server.configuration.sessionTimeout)"]
    }

    /// nil when the stream at `path` is open, or the request's `?token=` opens it (checked once
    /// per connection and stream: a token that expires later does not end what it began);
    /// otherwise the 401 (no token) or 403 (a refused one) to send, saying why.
    private func playbackRefusal(_ request: RTSPRequest, path: String) -> Outcome? {
        guard let playback = server.configuration.playback else { return nil }
        let streamPath = RTSPURL.stripControl(path)
        if grantedPaths.contains(streamPath) { return nil }
        if let refusal = playback.refusal(path: streamPath, token: RTSPURL.queryValue(request.uri, name: "token"), clientAddress: remoteIP) {
            server.refusals.log(logger, "playback refused: \(refusal)", kind: "playback \(refusal.status)", metadata: ["stream.guid": "\(streamPath)", "rtsp.address": "\(remoteIP)"])
            return Outcome(response: RTSPResponse(status: refusal.status, body: Array("\(refusal)\n".utf8)))
        }
        if grantedPaths.count < 16 { grantedPaths.insert(streamPath) }
        return nil
    }

    /// nil when `request` proves `credentials` (or none are required); otherwise the 401 to send.
    private func unauthorized(_ request: RTSPRequest, credentials: StreamCredentials?, path: String) -> Outcome? {
        guard let credentials else { return nil }
        let now = server.configuration.clock.nanoseconds / 1_000_000_000
        if server.authenticator.verify(request.headers["Authorization"], method: request.method, requestURI: request.uri,
                                       credentials: credentials, now: now) { return nil }
        if request.headers["Authorization"] != nil {
            server.refusals.log(logger, "authentication failed", kind: "authentication", metadata: ["stream.guid": "\(path)", "method": "\(request.method)"])
        }
        var headers = RTSPHeaders()
        for challenge in server.authenticator.challenges(now: now) { headers.add("WWW-Authenticate", challenge) }
        return Outcome(response: RTSPResponse(status: 401, headers: headers, body: Array("\(request.method) \(path) needs credentials\n".utf8)))
    }

    private func describe(_ request: RTSPRequest) -> Outcome {
        guard let path = RTSPURL.path(of: request.uri) else { return Outcome(response: RTSPResponse(status: 400)) }
        if let refusal = unauthorized(request, credentials: server.configuration.playerCredentials, path: path) { return refusal }
        if let refusal = playbackRefusal(request, path: path) { return refusal }
        if let reason = server.newPlayerRefusal {
            return Outcome(response: RTSPResponse(status: 503, body: Array("\(reason)\n".utf8)))
        }
        guard let stream = server.registry.existingStream(path), stream.isPlayable, let sdp = stream.sessionDescription() else {
            return Outcome(response: RTSPResponse(status: 404, body: Array("no stream is playing at \(path)\n".utf8)))
        }
        let base = RTSPURL.base(of: request.uri, path: path)
        return Outcome(response: RTSPResponse(status: 200, headers: ["Content-Type": "application/sdp", "Content-Base": base + "/"],
                                              body: Array(sdp.render().utf8)))
    }

    private func announce(_ request: RTSPRequest) -> Outcome {
        guard let path = RTSPURL.path(of: request.uri), !path.isEmpty else { return Outcome(response: RTSPResponse(status: 400)) }
        if let refusal = unauthorized(request, credentials: server.gate.policy.publisherCredentials(for: path), path: path) { return refusal }
        let description: SessionDescription
        do {
            description = try SessionDescription.announced(contentType: request.headers["Content-Type"], body: request.body,
                                                            maximumPixels: server.configuration.maximumPublishPixels)
        } catch {
            logger.info("announce refused", metadata: ["stream.guid": "\(path)", "reason": "\(error.description)"])
            return Outcome(response: RTSPResponse(status: error.status, body: Array("\(error.description)\n".utf8)))
        }
        let session = ServerSession(id: SessionTable.newIdentifier(), path: path, role: .publisher, connection: channel, clock: server.configuration.clock)
        let server = self.server
        // The same publisher (it passed the same credentials) may take over from its own
        // session once that has gone silent.
        let claim = PublishGate.Claim(session: session.id, revoke: { [id = session.id] reason in
            guard let revoked = server.sessions.session(id) else { return }
            server.logger.notice("publish revoked: \(reason)", metadata: ["stream.guid": "\(path)", "session": "\(id)"])
            server.end(revoked, reason: reason)
            revoked.connection.close(promise: nil)
        }, silence: { [weak session] in
            session.map { Double($0.mediaIdleNanoseconds) / 1e9 } ?? .infinity
        })
        let request = PublishRequest(path: path, remoteAddress: channel.remoteAddress?.description ?? "?", transport: "rtsp",
                                     sps: description.media.first(where: \.isH264)?.spropSPS.flatMap { H264SPS($0) })
        switch server.gate.admit(request, credentials: .proven, claim: claim) {
        case .refused(.credentials):
            return Outcome(response: RTSPResponse(status: 401, body: Array("\(path) needs credentials\n".utf8)))
        case let .refused(.policy(status, reason)):
            logger.info("publish refused", metadata: ["stream.guid": "\(path)", "status": "\(status)", "reason": "\(reason)"])
            return Outcome(response: RTSPResponse(status: status, body: Array("\(reason)\n".utf8)))
        case .refused(.alreadyPublished):
            return Outcome(response: RTSPResponse(status: 403, body: Array("\(path) already has a publisher\n".utf8)))
        case let .admitted(sink, tookOver):
            if tookOver { logger.info("publisher takes over a silent session", metadata: ["stream.guid": "\(path)"]) }
            session.state.withLock { state in
                state.sink = sink
                state.reception = PublisherReception(media: description.media)
            }
            if let refusal = server.sessions.insert(session, limits: server.sessionLimits(for: .publisher)) {
                server.registry.publishers.releasePublisher(path, session: session.id)
                return Outcome(response: RTSPResponse(status: 503, body: Array("\(refusal)\n".utf8)))
            }
            ownedSessions.insert(session.id)
            logger.info("publisher announced", metadata: ["stream.guid": "\(path)", "session": "\(session.id)"])
            return Outcome(response: RTSPResponse(status: 200, headers: sessionHeader(session)))
        }
    }

    private func setup(_ request: RTSPRequest, session existing: ServerSession?) -> Outcome {
        guard let urlPath = RTSPURL.path(of: request.uri) else { return Outcome(response: RTSPResponse(status: 400)) }
        guard let header = request.headers["Transport"] else { return Outcome(response: RTSPResponse(status: 461)) }
        let offers = RTSPTransport.parseAlternatives(header).filter { !$0.isMulticast }
        guard !offers.isEmpty else { return Outcome(response: RTSPResponse(status: 461)) }

        let session: ServerSession
        switch existing.map(PlayerSessionOpening.opened) ?? openPlayerSession(request, urlPath: urlPath) {
        case let .opened(opened): session = opened
        case let .refused(refusal): return refusal
        }
        guard urlPath == session.path || urlPath.hasPrefix(session.path + "/") else {
            return Outcome(response: RTSPResponse(status: 459))  // a SETUP for another stream inside this session
        }
        let controls: [String?]
        switch session.role {
        case .publisher:
            controls = session.state.withLock { $0.reception.tracks.map(\.media.control) }
        case .player:
            let count = session.state.withLock { ($0.stream?.audio != nil) ? 2 : 1 }
            controls = (0..<count).map { "trackID=\($0)" }
        }
        guard let track = RTSPURL.trackIndex(requestURI: request.uri, urlPath: urlPath, sessionPath: session.path, controls: controls) else {
            return Outcome(response: RTSPResponse(status: 404, body: Array("no such track in \(request.uri)\n".utf8)))
        }
        // The first transport we can serve, in the client's order of preference.
        let serverPorts = server.udpPorts.map { UInt16($0.rtp)...UInt16($0.rtcp) }
        for offer in offers {
            switch offer.answer(track: track, isRecord: session.role == .publisher, serverPorts: serverPorts) {
            case .skip: continue
            case let .refuse(problem): return Outcome(response: RTSPResponse(status: 461, body: Array("\(problem)\n".utf8)))
            case let .serve(reply): return setUp(reply, track: track, in: session)
            }
        }
        return Outcome(response: RTSPResponse(status: 461))
    }

    private enum PlayerSessionOpening {
        case opened(ServerSession)
        case refused(Outcome)
    }

    /// A player's first SETUP opens its session on the stream the URL names.
    private func openPlayerSession(_ request: RTSPRequest, urlPath: String) -> PlayerSessionOpening {
        let path = RTSPURL.stripControl(urlPath)
        if let refusal = unauthorized(request, credentials: server.configuration.playerCredentials, path: path) { return .refused(refusal) }
        if let refusal = playbackRefusal(request, path: path) { return .refused(refusal) }
        guard let stream = server.registry.existingStream(path), stream.isPlayable else {
            return .refused(Outcome(response: RTSPResponse(status: 404)))
        }
        let session = ServerSession(id: SessionTable.newIdentifier(), path: path, role: .player, connection: channel, clock: server.configuration.clock)
        session.state.withLock { $0.stream = stream }
        if let refusal = server.sessions.insert(session, limits: server.sessionLimits(for: .player)) {
            return .refused(Outcome(response: RTSPResponse(status: 503, body: Array("\(refusal)\n".utf8))))
        }
        ownedSessions.insert(session.id)
        return .opened(session)
    }

    /// Takes the transport `reply` for `track` into the session: the session's state first (a
    /// SETUP it cannot take adds no route), then a UDP peer's routes, then the transport.
    private func setUp(_ reply: RTSPTransport, track: Int, in session: ServerSession) -> Outcome {
        let valid: Bool = session.state.withLock { state in
            state.machine.decide("SETUP") != .notValidInState && (session.role == .player || track < state.reception.tracks.count)
        }
        guard valid else { return Outcome(response: RTSPResponse(status: 455)) }
        if case let .udp(clientPorts?, _) = reply.lower, let ip = channel.remoteAddress?.ipAddress {
            // A publisher's RTP and RTCP; a UDP player's receiver reports (they keep it alive
            // and drive its adaptation). Ports another session's datagrams come from are refused.
            let routed = session.role == .publisher
                ? server.sessions.addRoute(from: "\(ip):\(clientPorts.lowerBound)", session: session, track: track, isRTCP: false)
                    && server.sessions.addRoute(from: "\(ip):\(clientPorts.upperBound)", session: session, track: track, isRTCP: true)
                : server.sessions.addRoute(from: "\(ip):\(clientPorts.upperBound)", session: session, track: track, isRTCP: true)
            guard routed else {
                return Outcome(response: RTSPResponse(status: 461, body: Array("client_port \(clientPorts.lowerBound)-\(clientPorts.upperBound) is in use by another session\n".utf8)))
            }
        }
        let accepted: Bool = session.state.withLock { state in
            guard state.machine.apply("SETUP") != .notValidInState else { return false }
            if session.role == .publisher {
                guard track < state.reception.tracks.count else { return false }
                state.trackTransports[track] = reply
            } else {
                state.playerTransports[track] = reply
            }
            return true
        }
        guard accepted else { return Outcome(response: RTSPResponse(status: 455)) }
        var headers = sessionHeader(session)
        headers.add("Transport", reply.headerValue)
        return Outcome(response: RTSPResponse(status: 200, headers: headers))
    }

    private func play(_ request: RTSPRequest, session: ServerSession?) -> Outcome {
        guard let session else { return Outcome(response: RTSPResponse(status: 454)) }
        guard session.role == .player else { return Outcome(response: RTSPResponse(status: 455)) }
        let (stream, transports, alreadyPlaying) = session.state.withLock { ($0.stream, $0.playerTransports, $0.subscriber != nil) }
        guard let stream, !transports.isEmpty, !stream.isEnded else { return Outcome(response: RTSPResponse(status: 455)) }
        _ = session.state.withLock { $0.machine.apply("PLAY") }
        var headers = sessionHeader(session)
        headers.add("Range", "npt=0.000-")
        if alreadyPlaying { return Outcome(response: RTSPResponse(status: 200, headers: headers)) }
        guard let transport = playerTransport(transports) else { return Outcome(response: RTSPResponse(status: 461)) }

        let server = self.server
        let subscriber = MediaSubscriber(transport: transport, hasVideo: transports[0] != nil, hasAudio: transports[1] != nil,
                                         audioRate: stream.audio?.sampleRate ?? 0,
                                         maximumBacklog: server.configuration.playerBacklogLimit) { [id = session.id] in
            if let session = server.sessions.session(id) { server.end(session, reason: "stream ended") }
        }
        // A player of a ladder's rung follows its link unless it asked to be pinned (`?abr=off`).
        let adaptive = !pinnedPaths.contains(session.path) && !RTSPURL.pinsRung(request.uri)
        let adaptation = adaptive ? self.adaptation(of: session, on: stream, subscriber: subscriber, transport: transport) : nil
        session.state.withLock {
            $0.subscriber = subscriber
            $0.adaptation = adaptation
            $0.outbox = (transport as? InterleavedTransport)?.outbox
        }
        let info = subscriber.rtpInfo(videoTicks: stream.startTicks.video)
        let base = RTSPURL.base(of: request.uri, path: session.path)
        var rtpInfo = ["url=\(base)/trackID=0;seq=\(info.video.0);rtptime=\(info.video.1)"]
        if transports[1] != nil { rtpInfo.append("url=\(base)/trackID=1;seq=\(info.audio.0);rtptime=\(info.audio.1)") }
        headers.add("RTP-Info", rtpInfo.joined(separator: ","))
        logger.info("player started", metadata: ["stream.guid": "\(session.path)", "session": "\(session.id)",
                                                  "transport": "\(transports.values.first?.isTCP == true ? "tcp" : "udp")"])
        return Outcome(response: RTSPResponse(status: 200, headers: headers)) {
            stream.subscribe(subscriber)
            adaptation?.start()
        }
    }

    /// Interleaved on this connection when every track is TCP; else datagrams from the server's
    /// UDP pair to the client's ports; nil when neither can be served.
    private func playerTransport(_ transports: [Int: RTSPTransport]) -> PlayerTransport? {
        if transports.values.allSatisfy(\.isTCP) {
            var channels: [Int: UInt8] = [:]
            for (track, spec) in transports { if case let .tcp(range?) = spec.lower { channels[track] = range.lowerBound } }
            return InterleavedTransport(channel: channel, channels: channels, counter: counter, clock: server.configuration.clock)
        }
        guard let udp = server.udpChannels, let ip = channel.remoteAddress?.ipAddress else { return nil }
        var destinations: [Int: (rtp: SocketAddress, rtcp: SocketAddress)] = [:]
        for (track, spec) in transports {
            guard case let .udp(client?, _) = spec.lower,
                  let rtp = try? SocketAddress(ipAddress: ip, port: Int(client.lowerBound)),
                  let rtcp = try? SocketAddress(ipAddress: ip, port: Int(client.upperBound)) else { continue }
            destinations[track] = (rtp, rtcp)
        }
        return DatagramTransport(sockets: server, destinations: destinations, eventLoop: udp.rtp.eventLoop, clock: server.configuration.clock)
    }

    /// What moves a player of a ladder's rung between rungs by its link; nil for a stream that is not a ladder.
    private func adaptation(of session: ServerSession, on stream: LiveStream, subscriber: MediaSubscriber, transport: PlayerTransport) -> PlayerAdaptation? {
        guard let ladder = stream.ladder, ladder.count > 1 else { return nil }
        var playerLogger = logger
        playerLogger[metadataKey: "session"] = "\(session.id)"
        playerLogger[metadataKey: "stream.guid"] = "\(session.path)"
        let server = self.server
        return PlayerAdaptation(subscriber: subscriber, transport: transport, registry: server.registry, ladder: ladder,
                                logger: playerLogger) { [id = session.id, requested = session.path] move in
            server.playerSwitched(PlayerSwitchEvent(session: id, requested: requested, from: ladder[move.from] ?? "", to: ladder[move.to] ?? "",
                                                    fromLevel: move.from, toLevel: move.to, reason: move.reason))
        }
    }

    private func record(session: ServerSession?) -> Outcome {
        guard let session else { return Outcome(response: RTSPResponse(status: 454)) }
        let ok: Bool = session.state.withLock { state in
            guard session.role == .publisher, !state.trackTransports.isEmpty, state.machine.apply("RECORD") != .notValidInState else { return false }
            if state.recordStarted == nil { state.recordStarted = server.configuration.clock.nanoseconds }
            return true
        }
        guard ok else { return Outcome(response: RTSPResponse(status: 455)) }
        return Outcome(response: RTSPResponse(status: 200, headers: sessionHeader(session)))
    }

    private func pause(session: ServerSession?) -> Outcome {
        guard let session else { return Outcome(response: RTSPResponse(status: 454)) }
        let (subscriber, adaptation) = session.state.withLock { state -> (MediaSubscriber?, PlayerAdaptation?) in
            _ = state.machine.apply("PAUSE")
            defer {
                state.subscriber = nil
                state.adaptation = nil
            }
            return (state.subscriber, state.adaptation)
        }
        adaptation?.stop()
        subscriber?.leave()
        return Outcome(response: RTSPResponse(status: 200, headers: sessionHeader(session)))
    }

    private func teardown(session: ServerSession?) -> Outcome {
        guard let session else { return Outcome(response: RTSPResponse(status: 454)) }
        server.end(session, reason: "teardown")
        ownedSessions.remove(session.id)
        return Outcome(response: RTSPResponse(status: 200))
    }

    private func setParameter(_ request: RTSPRequest, session: ServerSession?) -> Outcome {
        // Publishers report app state (`publisherBackground`, ...) as `name: value` lines or bare names.
        if let session, session.role == .publisher, let sink = session.state.withLock({ $0.sink }) {
            for parameter in request.parameters { sink.receiveNotification(name: parameter.name, value: parameter.value) }
        }
        return Outcome(response: RTSPResponse(status: 200, headers: sessionHeader(session)))
    }
}
