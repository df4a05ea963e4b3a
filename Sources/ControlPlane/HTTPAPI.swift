import AccessTokens
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import TLSTransport
import Logging
import MediaCore
import NIOCore
import ServiceLifecycle
import Store

/// The control plane on HTTP, shaped like Red5 Pro Stream Manager 2.0 (`/as/v1/...`) plus the
/// node's own read-only views (`/v1/...`), HLS, metrics and a status page.
///
/// Errors are `{"error":{"message": ...}}` with the matching status; validation errors add
/// `"problems": [{"path", "message"}]`. Only `/as/v1/streams/...` and the 1.0 meta API change
/// anything, and only with a valid token.
public enum HTTPAPI {
    public static let maximumBodyBytes = 1 << 20

    public static func makeRouter(_ plane: ControlPlane) -> Router<NodeRequestContext> {
        let router = Router(context: NodeRequestContext.self)
        // Request counts and durations per route pattern (bounded), when metrics are bootstrapped.
        router.add(middleware: MetricsMiddleware())

        // MARK: Stream Manager 2.0
        router.put("/as/v1/auth/login") { request, context in
            let address = context.clientAddress
            if let wait = plane.loginThrottle.retryAfter(address, now: plane.configuration.clock.seconds) {
                var response = error(.tooManyRequests, "too many failed logins from \(address); try again in \(wait) s")
                response.headers[.retryAfter] = "\(wait)"
                return response
            }
            guard let (user, password) = basicCredentials(request) else {
                return error(.unauthorized, "send the admin user and password with HTTP Basic authentication", challenge: "Basic realm=\"abr-worker\"")
            }
            let credentials = plane.configuration.credentials
            // Both compared, always: the time taken says nothing about which one was wrong.
            let userMatches = constantTimeEqual(user, credentials.adminUser)
            let passwordMatches = constantTimeEqual(password, credentials.adminPassword)
            guard userMatches && passwordMatches else {
                plane.loginThrottle.record(address, now: plane.configuration.clock.seconds)
                plane.refusals.log(plane.logger, "login refused", kind: "login", metadata: ["user": "\(user.prefix(64))", "http.address": "\(address)"])
                return error(.unauthorized, "wrong user or password", challenge: "Basic realm=\"abr-worker\"")
            }
            let token = try plane.tokens.issue(subject: user)
            return json(["token": token, "expiresIn": "\(Int(plane.tokens.lifetime))"])
        }

        // Provisions and the fleet's admin API: a valid bearer token, checked by the groups' middleware.
        let provisions = router.group("/as/v1/streams/provision").add(middleware: BearerTokenAuthenticator(plane: plane))
        let admin = router.group("/as/v1/admin").add(middleware: BearerTokenAuthenticator(plane: plane))
        provisions.post("{nodeGroup}") { request, context in
            let nodeGroup = try nodeGroup(context)
            let body = try await collectBody(request)
            do {
                let stored = try await plane.provisions.add(streamManager2: body, nodeGroup: nodeGroup)
                plane.logger.info("provisioned over HTTP", metadata: ["node.group": "\(nodeGroup)", "streams": "\(stored.map(\.streamGuid))"])
                guard let warning = await plane.unservedGroupWarning(nodeGroup) else {
                    return rawJSON("[" + stored.map(\.document).joined(separator: ",") + "]", status: .created)
                }
                // Kept (nodes of the group may come later), but said now, not first at publish time:
                // in each document's `warnings` (SM 2.0 clients read the fields they know), a
                // Warning header, and the log.
                plane.logger.warning("provisioned under a node group no node serves", metadata: [
                    "node.group": "\(nodeGroup)", "streams": "\(stored.map(\.streamGuid))", "warning": "\(warning)"])
                let documents = stored.map { provision in
                    guard case let .object(fields)? = try? JSONReader.parse(provision.document) else { return provision.document }
                    return JSONValue.object(fields + [(key: "warnings", value: .array([.string(warning)]))]).jsonText
                }
                var response = rawJSON("[" + documents.joined(separator: ",") + "]", status: .created)
                response.headers[HTTPField.Name("Warning")!] = "299 abr-worker \"\(warning.replacingOccurrences(of: "\"", with: "'"))\""
                return response
            } catch {
                return provisionFailure(error)
            }
        }

        // Signed playback: a token for a ladder (every rung) or one rung, for RTSP, HLS and WHEP.
        router.group("/as/v1/streams/playback-token").add(middleware: BearerTokenAuthenticator(plane: plane))
            .post("{nodeGroup}/**") { request, context in
                try await mintPlaybackToken(plane, group: try nodeGroup(context), guid: catchAllGuid(context), body: try await collectBody(request))
            }

        provisions.get("{nodeGroup}") { _, context in
            let stored = try await plane.provisions.list(nodeGroup: try nodeGroup(context))
            return rawJSON("[" + stored.map(\.document).joined(separator: ",") + "]")
        }

        provisions.get("{nodeGroup}/**") { _, context in
            let group = try nodeGroup(context)
            let guid = catchAllGuid(context)
            guard let stored = try await plane.provisions.get(guid, nodeGroup: group) else {
                return error(.notFound, "\(guid) is not provisioned in node group \(group)")
            }
            return rawJSON(stored.document)
        }

        provisions.delete("{nodeGroup}/**") { _, context in
            let group = try nodeGroup(context)
            let guid = catchAllGuid(context)
            do {
                let removed = try await plane.provisions.remove(guid, nodeGroup: group)
                plane.logger.info("provision removed over HTTP", metadata: ["stream.guid": "\(guid)"])
                return rawJSON(removed.document)
            } catch ProvisionBook.Failure.notFound {
                return error(.notFound, "\(guid) is not provisioned in node group \(group)")
            }
        }

        // MARK: Stream Manager 1.0 (its meta API takes the shared accessToken, checked by the group's middleware)
        let meta = router.group("/streammanager/api/4.0/admin/event/meta").add(middleware: StreamManager1AccessTokenAuthenticator(plane: plane))
        meta.post("{app}/{stream}") { request, context in
            do {
                let stored = try await plane.provisions.add(streamManager1: try await collectBody(request), streamGuid: sm1Guid(context))
                return rawJSON(stored.document, status: .created)
            } catch {
                return provisionFailure(error)
            }
        }
        meta.get("{app}/{stream}") { _, context in
            guard let stored = try await plane.provisions.get(sm1Guid(context), nodeGroup: ProvisionBook.sm1NodeGroup) else {
                return error(.notFound, "\(sm1Guid(context)) has no Stream Manager 1.0 meta")
            }
            return rawJSON(stored.document)
        }
        meta.delete("{app}/{stream}") { _, context in
            do {
                let removed = try await plane.provisions.remove(sm1Guid(context), nodeGroup: ProvisionBook.sm1NodeGroup)
                return rawJSON(removed.document)
            } catch ProvisionBook.Failure.notFound {
                return error(.notFound, "\(sm1Guid(context)) has no Stream Manager 1.0 meta")
            }
        }

        // MARK: Node requests (public, as the seed's clients call them) and the fleet's admin API
        for action in ["publish", "subscribe"] {
            router.get("/as/v1/streams/stream/{nodeGroup}/\(action)/**") { request, context in
                let group = context.parameters.get("nodeGroup") ?? ""
                let guid = catchAllGuid(context)
                do {
                    let answer = action == "publish"
                        ? try await plane.publishNode(group: group, streamGuid: guid, client: context.clientAddress,
                                                      holdsRoom: try await holdsRoom(request, context: context, plane: plane))
                        : try await plane.subscribeNode(group: group, streamGuid: guid)
                    return json([answer])
                } catch let failure as NodeRequestFailure {
                    return nodeRequestFailure(failure)
                }
            }
        }
        // Stream Manager 1.0's node request: `?action=broadcast` (publish) or `subscribe`.
        router.get("/streammanager/api/4.0/event/{app}/{stream}") { request, context in
            guard plane.configuration.sm1AccessToken != nil else { throw streamManager1Off }
            let app = context.parameters.get("app") ?? "", stream = context.parameters.get("stream") ?? ""
            let action = request.uri.queryParameters.get("action") ?? ""
            do {
                let answer: NodeAnswer
                switch action {
                case "broadcast":
                    answer = try await plane.publishNode(group: ProvisionBook.sm1NodeGroup, streamGuid: "\(app)/\(stream)", client: context.clientAddress)
                case "subscribe": answer = try await plane.subscribeNode(group: ProvisionBook.sm1NodeGroup, streamGuid: "\(app)/\(stream)")
                default: return error(.badRequest, "action must be broadcast or subscribe (got \(action.prefix(40)))")
                }
                let name = answer.streamGuid.split(separator: "/").last.map(String.init) ?? stream
                return json(["serverAddress": answer.serverAddress, "scope": "/\(app)", "name": name, "rtsp": answer.rtsp])
            } catch let failure as NodeRequestFailure {
                return nodeRequestFailure(failure)
            }
        }
        admin.get("nodes") { _, _ in
            json(try await plane.fleetNodes())
        }
        admin.get("nodes/{nodeId}") { _, context in
            let named = context.parameters.get("nodeId") ?? ""
            let id = named == "self" ? plane.fleet.identity.nodeId : named
            guard let node = try await plane.fleetNodes().first(where: { $0.nodeId == id }) else { return error(.notFound, "no node \(id.prefix(80)) in the registry") }
            return json(node)
        }
        // `self` names the node answering (a Kubernetes preStop hook calls its own pod).
        admin.put("nodes/{nodeId}/state") { request, context in
            let named = context.parameters.get("nodeId") ?? ""
            let id = named == "self" ? plane.fleet.identity.nodeId : named
            let body = try await collectBody(request)
            guard case let JSONValue.string(name)? = (try? JSONReader.parse(body))?["state"],
                  let state = NodeState(rawValue: name) else {
                return error(.badRequest, "send {\"state\": \"INSERVICE\" | \"SOFT_SUNSET\" | \"HARD_SUNSET\"}")
            }
            guard try await plane.requestNodeState(state, nodeId: id) else { return error(.notFound, "no node \(id.prefix(80)) in the registry") }
            plane.logger.notice("node state requested over HTTP", metadata: ["node.id": "\(id)", "state": "\(state.rawValue)",
                                                                              "by": "\(context.identity?.subject ?? "?")"])
            // Another node applies it at its next heartbeat (about 2 s).
            let own = id == plane.fleet.identity.nodeId
            return json(["nodeId": id, "state": state.rawValue, "applied": own ? "now" : "at the node's next heartbeat"],
                        status: own ? .ok : .accepted)
        }

        // MARK: The node's own views
        router.get("/v1/jobs") { _, _ in json(plane.jobViews()) }
        router.get("/v1/jobs/**") { _, context in
            let guid = catchAllGuid(context)
            guard let view = await plane.jobView(guid) else { return error(.notFound, "\(guid) is not provisioned") }
            return json(view)
        }
        router.get("/v1/streams/**") { _, context in
            var parts = context.parameters.getCatchAll().map { String($0).removingPercentEncoding ?? String($0) }
            let what = parts.popLast() ?? ""
            let guid = parts.joined(separator: "/")
            guard let ladder = plane.ladder(containing: guid) else { return error(.notFound, "\(guid) is not provisioned") }
            switch what {
            case "abr":
                guard let hints = plane.node.job(ladder.streamGuid)?.hints else { return error(.notFound, "\(guid) has no job") }
                return json(hints)
            case "events":
                return eventStream(plane, ladderGuid: ladder.streamGuid)
            default:
                return error(.notFound, "no such view: \(what) (try /v1/streams/\(guid)/abr or /events)")
            }
        }
        router.get("/v1/capacity") { _, _ in json(plane.capacitySnapshot()) }
        router.get("/v1/history") { request, _ in
            json(plane.history.window(since: request.uri.queryParameters.get("since").flatMap(Double.init)))
        }
        router.get("/health") { _, _ in json(["status": "ok"]) }
        router.get("/ready") { _, _ in
            plane.isReady ? json(["status": "ready", "nodeState": plane.fleet.nodeState.rawValue])
                : error(.serviceUnavailable, "not ready: node \(plane.fleet.identity.nodeId) is \(plane.fleet.nodeState.rawValue) or its RTSP server is not listening")
        }
        router.get("/metrics") { _, _ in
            Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                     body: .init(byteBuffer: ByteBuffer(string: plane.metricsExposition())))
        }
        router.get(RouterPath(StatusPage.hlsScriptPath)) { _, _ in
            guard let script = plane.configuration.hlsPlayerScript, let data = try? Data(contentsOf: script) else {
                return error(.notFound, "no hls.js on this node (--hls-js)")
            }
            return Response(status: .ok, headers: [.contentType: "text/javascript", .cacheControl: "max-age=3600"],
                            body: .init(byteBuffer: ByteBuffer(bytes: data)))
        }
        router.get("/") { _, _ in
            Response(status: .ok, headers: [.contentType: "text/html; charset=utf-8", .cacheControl: "no-cache"],
                     body: .init(byteBuffer: ByteBuffer(string: StatusPage.render(plane))))
        }

        addWHEPRoutes(router, plane: plane)
        addPlayerPage(router, plane: plane)

        // MARK: HLS, for players on any origin
        let hls = router.group(RouterPath(HLSLayout.liveRoot)).add(middleware: CORSMiddleware(allowOrigin: .all, allowHeaders: [.range, .accept, .origin],
                                                                    allowMethods: [.get, .head, .options], maxAge: .seconds(3600)))
        // Preflight requests: the middleware answers them once a route matches.
        hls.on("**", method: .options) { _, _ in Response(status: .noContent) }
        hls.get("**") { request, context in
            let prefix = "/\(HLSLayout.liveRoot)/"
            let raw = request.uri.path
            guard raw.hasPrefix(prefix) else { return error(.notFound, "no such HLS file") }
            // Access first: a signed ladder says nothing, not even which files exist, without a token.
            let encoded = raw.dropFirst(prefix.count)
            let path = encoded.utf8.contains(UInt8(ascii: "%")) ? String(encoded).removingPercentEncoding ?? "" : String(encoded)
            let access = hlsAccess(plane, path: path, request: request, context: context)
            if case let .refused(response) = access { return response }
            if let answer = await lowLatencyHLS(plane, rawPath: raw.dropFirst(prefix.count), request: request, access: access) { return answer }
            guard let file = plane.hlsFiles.resolve(rawPath: raw.dropFirst(prefix.count)), let data = try? Data(contentsOf: file.url) else { return error(.notFound, "no such HLS file") }
            var body = ByteBuffer(bytes: data)
            if case let .carry(token) = access, !token.isEmpty, file.url.pathExtension == "m3u8" {
                body = ByteBuffer(string: PlaylistTokens.carrying(token, in: String(decoding: data, as: UTF8.self)))
            }
            return Response(status: .ok, headers: [.contentType: file.contentType, .cacheControl: file.cacheControl], body: .init(byteBuffer: body))
        }
        return router
    }

    /// The HTTP server as a lifecycle service: plain HTTP/1.1, or with `tls` HTTPS offering
    /// HTTP/2 and HTTP/1.1 (ALPN). Over HTTP/2 each request is a stream, and each stream counts
    /// against the connection limits as a connection does over HTTP/1.1, so requests held by a
    /// blocking playlist reload are bounded the same way whichever version the player speaks.
    public static func makeApplication(_ plane: ControlPlane, host: String, port: Int, tls: TLSContext? = nil,
                                       onListening: @escaping @Sendable (Int) async -> Void = { _ in }) throws -> some ApplicationProtocol {
        let limiter = plane.httpConnections
        let idle = Duration.seconds(plane.configuration.httpIdleTimeout)
        let plain = HTTP1Channel.Configuration(additionalChannelHandlers: [HTTPConnectionGuard(limiter: limiter)], idleTimeout: .seconds(plane.configuration.httpIdleTimeout))
        let server: HTTPServerBuilder = tls.map { tls in
            HTTPServerBuilder { responder in
                SecureHTTPChannel(tls: tls, limiter: limiter, idleTimeout: idle, streamConfiguration: plain, responder: responder)
            }
        } ?? .http1(configuration: plain)
        return Application(router: makeRouter(plane),
                    server: server,
                    configuration: .init(address: .hostname(host, port: port), serverName: "abr-worker"),
                    onServerRunning: { channel in await onListening(channel.localAddress?.port ?? port) },
                    logger: Logger(label: "abr.http"))
    }

    /// The server's TLS from PEM files: the certificate chain (leaf first) and its private key,
    /// offering HTTP/2 and HTTP/1.1 by ALPN. Throws a sentence naming the file that cannot be used.
    public static func tlsContext(certificate: String, key: String) throws -> TLSContext {
        do {
            return try TLSContext.server(certificatePath: certificate, privateKeyPath: key, applicationProtocols: ["h2", "http/1.1"])
        } catch {
            switch error.part {
            case .certificate: throw TLSFileProblem(description: "--tls-cert \(certificate): \(error.reason)")
            case .privateKey: throw TLSFileProblem(description: "--tls-key \(key): \(error.reason)")
            case .keyDoesNotMatch: throw TLSFileProblem(description: "--tls-key \(key) is not the key of --tls-cert \(certificate) (\(error.reason))")
            case .other: throw TLSFileProblem(description: "HTTPS cannot start: \(error.reason)")
            }
        }
    }

    public struct TLSFileProblem: Error, CustomStringConvertible {
        public var description: String
    }

    // MARK: Helpers

    static func json(_ value: some Encodable, status: HTTPResponse.Status = .ok) -> Response {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let data = (try? encoder.encode(value)) ?? Data("{}".utf8)
        return Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

    static func rawJSON(_ text: String, status: HTTPResponse.Status = .ok) -> Response {
        Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: text)))
    }

    struct ErrorBody: Encodable {
        struct Detail: Encodable {
            var message: String
            var problems: [Problem]?
        }

        struct Problem: Encodable {
            var path: String
            var message: String
        }

        var error: Detail
    }

    static func error(_ status: HTTPResponse.Status, _ message: String, problems: [ProvisionProblem]? = nil, challenge: String? = nil) -> Response {
        var response = json(ErrorBody(error: .init(message: message, problems: problems?.map { .init(path: $0.path, message: $0.message) })),
                            status: status)
        if let challenge { response.headers[.wwwAuthenticate] = challenge }
        return response
    }

    static func provisionFailure(_ failure: Error) -> Response {
        switch failure {
        case let ProvisionBook.Failure.invalid(problems):
            let summary = problems.count == 1 ? problems[0].description : "\(problems.count) problems: " + problems.map(\.description).joined(separator: "; ")
            return error(.badRequest, summary, problems: problems)
        case let ProvisionBook.Failure.alreadyProvisioned(guids):
            return error(.conflict, "already provisioned: \(guids.joined(separator: ", ")) (DELETE it first)")
        case let ProvisionBook.Failure.notFound(guid):
            return error(.notFound, "\(guid) is not provisioned")
        default:
            return error(.internalServerError, "\(failure)")
        }
    }

    // Not hummingbird-auth's `headers.basic`: it splits with empty parts dropped, so `user:` (an
    // empty password) would read as no credentials at all, and it wants "Basic" in that case only.
    static func basicCredentials(_ request: Request) -> (String, String)? {
        guard let header = request.headers[.authorization], header.lowercased().hasPrefix("basic "),
              let data = Data(base64Encoded: String(header.dropFirst(6)).trimmingCharacters(in: .whitespaces)),
              let text = String(data: data, encoding: .utf8), let colon = text.firstIndex(of: ":") else { return nil }
        return (String(text[..<colon]), String(text[text.index(after: colon)...]))
    }

    /// Whether a node request may hold room on the node it is given: only with the admin's bearer
    /// token. Without an Authorization header it is anonymous; with a bad one it is refused (401,
    /// saying why) rather than quietly served as anonymous.
    static func holdsRoom(_ request: Request, context: NodeRequestContext, plane: ControlPlane) async throws -> Bool {
        guard request.headers[.authorization] != nil else { return false }
        _ = try await BearerTokenAuthenticator(plane: plane).authenticate(request: request, context: context)
        return true
    }

    static func nodeGroup(_ context: NodeRequestContext) throws -> String {
        let group = context.parameters.get("nodeGroup") ?? ""
        guard ProvisionBook.isValidNodeGroup(group) else {
            throw HTTPError(.badRequest, message: "node group must be 1 to 64 letters, digits, '.', '_' or '-' (got \(group))")
        }
        return group
    }

    /// Stream guids hold slashes (`live/stream1`): the rest of the path, decoded.
    static func catchAllGuid(_ context: NodeRequestContext) -> String {
        context.parameters.getCatchAll().map { String($0).removingPercentEncoding ?? String($0) }.joined(separator: "/")
    }

    /// Stream Manager 1.0 names a stream by scope and name: `/{app}/{stream}`.
    static func sm1Guid(_ context: NodeRequestContext) -> String {
        "\(context.parameters.get("app") ?? "")/\(context.parameters.get("stream") ?? "")"
    }

    static let streamManager1Off = HTTPError(.notFound, message: "the Stream Manager 1.0 API is off: set ABR_WORKER_SM1_ACCESS_TOKEN to turn it on")

    static func collectBody(_ request: Request) async throws -> [UInt8] {
        do {
            let buffer = try await request.body.collect(upTo: maximumBodyBytes)
            return Array(buffer.readableBytesView)
        } catch {
            throw HTTPError(.contentTooLarge, message: "the body is larger than \(maximumBodyBytes) bytes")
        }
    }

    static func nodeRequestFailure(_ failure: NodeRequestFailure) -> Response {
        switch failure {
        case let .badRequest(message): return error(.badRequest, message)
        case let .notFound(message): return error(.notFound, message)
        case let .storeUnavailable(message): return error(.serviceUnavailable, message)
        case let .noRoom(message, retryAfter):
            var response = error(.serviceUnavailable, message)
            response.headers[.retryAfter] = "\(retryAfter)"
            return response
        case let .tooManyPlacements(message, retryAfter):
            var response = error(.tooManyRequests, message)
            response.headers[.retryAfter] = "\(retryAfter)"
            return response
        }
    }

    /// Server-Sent Events: first the job's current state, then every event as it happens, with a
    /// comment line every 15 s so proxies keep the stream open and a gone client is noticed.
    static func eventStream(_ plane: ControlPlane, ladderGuid: String) -> Response {
        guard let events = plane.events.listen(streamGuid: ladderGuid, keepalive: .seconds(15)) else {
            return error(.serviceUnavailable, "too many event listeners; try again later")
        }
        let state = plane.node.job(ladderGuid)?.state.rawValue ?? "provisioned"
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let initial = EventHub.Event(id: 0, streamGuid: ladderGuid, time: Date().timeIntervalSince1970, kind: "state", detail: state)
        return Response(status: .ok, headers: [.contentType: "text/event-stream", .cacheControl: "no-cache"], body: .init { writer in
            func frame(_ event: EventHub.Event) -> ByteBuffer {
                if event.kind == EventHub.keepaliveKind { return ByteBuffer(string: ": keepalive\n\n") }
                var data = (try? encoder.encode(event)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
                if event.kind == "hintsUpdated", let hints = plane.hints(ladderGuid), let encoded = try? encoder.encode(hints) {
                    data = String(decoding: encoded, as: UTF8.self)
                }
                return ByteBuffer(string: (event.id > 0 ? "id: \(event.id)\n" : "") + "event: \(event.kind)\ndata: \(data)\n\n")
            }
            try await writer.write(ByteBuffer(string: "retry: 2000\n\n"))
            try await writer.write(frame(initial))
            // Draining the node ends every event stream, so open ones can't hold the server up.
            try await withGracefulShutdownHandler {
                for await event in events {
                    try await writer.write(frame(event))
                }
            } onGracefulShutdown: { [events = plane.events] in events.finishAll() }
            try await writer.finish(nil)
        })
    }
}
