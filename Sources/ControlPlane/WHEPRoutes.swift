import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import WebRTCServer

/// WHEP (RFC 9725) on the HTTP port: `POST /whep/{app}/{stream}` with an SDP offer answers 201
/// with the SDP answer and the session's resource; `DELETE` on that resource ends it. Any origin
/// may call it (a page on another site playing the node), as for HLS.
extension HTTPAPI {
    static let whepRoot = "whep"
    static let whepSessions = "session"

    static func addWHEPRoutes(_ router: Router<NodeRequestContext>, plane: ControlPlane) {
        let whep = router.group(RouterPath(whepRoot)).add(middleware: CORSMiddleware(
            allowOrigin: .all, allowHeaders: [.contentType, .authorization, .ifMatch, .accept, .origin],
            allowMethods: [.post, .delete, .patch, .options], exposedHeaders: ["Location", "ETag", "Accept-Post", "Link"], maxAge: .seconds(3600)))
        whep.on("**", method: .options) { _, _ in
            Response(status: .noContent, headers: [.acceptPost: "application/sdp", .allow: "OPTIONS, POST, DELETE, PATCH"])
        }
        whep.post("**") { request, context in
            let prefix = "/\(whepRoot)/"
            let path = String(request.uri.path.dropFirst(prefix.count)).removingPercentEncoding ?? ""
            guard let webrtc = plane.webrtcService.withLock({ $0 }) else {
                return error(.serviceUnavailable, "WebRTC playback is off on this node (--webrtc-port -1)")
            }
            guard request.headers[.contentType]?.lowercased().hasPrefix("application/sdp") == true else {
                return error(.unsupportedMediaType, "a WHEP offer is sent as application/sdp")
            }
            // Signed playback, as for RTSP and HLS: the token in `Authorization: Bearer` (WHEP's
            // way) or `?token=`.
            let bearer = request.headers[.authorization].flatMap { $0.hasPrefix("Bearer ") ? String($0.dropFirst(7)) : nil }
            let token = bearer ?? request.uri.queryParameters.get("token")
            if let ladder = plane.ladder(containing: path), ladder.requiresSignedPlayback,
               let refusal = plane.playback.refusal(path: path, token: token, clientAddress: context.clientAddress) {
                plane.refusals.log(plane.logger, "WHEP refused: \(refusal)", kind: "playback \(refusal.status)",
                                   metadata: ["stream.guid": "\(path)", "http.address": "\(context.clientAddress)"])
                return error(refusal.status == 401 ? .unauthorized : .forbidden, refusal.description)
            }
            let body = try await request.body.collect(upTo: 64 * 1024 + 1)
            guard body.readableBytes <= 64 * 1024 else { return error(.contentTooLarge, "an SDP offer of more than 64 KiB") }
            let abr = request.uri.queryParameters.get("abr")?.lowercased()
            do throws(WebRTCService.Refusal) {
                let (id, answer) = try webrtc.offer(String(buffer: body), path: path, pinned: abr == "off" || abr == "0",
                                                    from: context.clientAddress)
                return Response(status: .created,
                                headers: [.contentType: "application/sdp", .location: "/\(whepRoot)/\(whepSessions)/\(id)", .eTag: "\"\(id)\""],
                                body: .init(byteBuffer: ByteBuffer(string: answer)))
            } catch {
                return HTTPAPI.error(HTTPResponse.Status(code: error.status), error.reason)
            }
        }
        whep.delete("\(whepSessions)/:id") { _, context in
            guard let id = context.parameters.get("id"), let webrtc = plane.webrtcService.withLock({ $0 }), webrtc.end(id: id) else {
                return error(.notFound, "no such WHEP session")
            }
            return Response(status: .ok)
        }
        // Trickle ICE and ICE restarts (PATCH) are not supported: a lite agent's candidates are all
        // in the answer.
        @Sendable func patchRefused(_: Request, _: NodeRequestContext) -> Response {
            var response = error(.methodNotAllowed, "this node does not take trickle ICE or ICE restarts (PATCH); its answer carries every candidate")
            response.headers[.allow] = "OPTIONS, POST, DELETE"
            return response
        }
        // The session's own path as well: the router matches it before the wildcard.
        whep.patch("\(whepSessions)/:id", use: patchRefused)
        whep.patch("**", use: patchRefused)
    }
}

extension HTTPField.Name {
    static let acceptPost = Self("Accept-Post")!
}

/// The node's own WebRTC player: a `<video>` and a few dozen lines of WHEP, for any stream
/// (`/play/live/stream1_2`), so an operator can watch a rung with nothing but a browser.
enum WHEPPlayerPage {
    static let root = "play"

    static func render(stream: String) -> String {
        let escaped = stream.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: "\"", with: "&quot;")
        let literal = String(decoding: (try? JSONSerialization.data(withJSONObject: [stream])) ?? Data("[\"\"]".utf8), as: UTF8.self)
            .replacingOccurrences(of: "</", with: "<\\/")
        return """
        <!doctype html>
        <html><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
        <title>\(escaped) over WebRTC</title>
        <style>body{font:14px system-ui,sans-serif;margin:1em;background:#111;color:#ddd}video{width:100%;max-width:1280px;background:#000}</style>
        </head><body>
        <video id="video" autoplay muted playsinline controls></video>
        <div id="status">connecting…</div>
        <script>
        const stream = \(literal)[0];
        const status = document.getElementById('status');
        const video = document.getElementById('video');
        let resource = null;
        // A session whose ICE failed (an outage longer than the browser's consent checks allow)
        // is ended and a new one posted two seconds later, as MediaMTX's and OvenPlayer's pages do.
        // Either way the old connection is closed and its session ended first, so a retry
        // leaves nothing behind on the node.
        function restart(pc) {
          if (pc !== window.pc) return;
          end();
          window.restarts = (window.restarts || 0) + 1;
          status.textContent = 'reconnecting…';
          setTimeout(() => play().catch(failed), 2000);
        }
        function failed(error) {
          end();
          status.textContent = String(error) + ' (trying again)';
          setTimeout(() => play().catch(failed), 2000);
        }
        function end() {
          window.pc?.close();
          if (resource) fetch(resource, {method: 'DELETE'}).catch(() => {});
          resource = null;
        }
        async function play() {
          const pc = new RTCPeerConnection();
          window.pc = pc;
          pc.addTransceiver('video', {direction: 'recvonly'});
          pc.addTransceiver('audio', {direction: 'recvonly'});
          const media = new MediaStream();
          pc.ontrack = (event) => {
            media.addTrack(event.track);
            video.srcObject = media;
          };
          pc.onconnectionstatechange = () => { if (pc.connectionState === 'failed') restart(pc); };
          await pc.setLocalDescription(await pc.createOffer());
          const posted = performance.now();
          // WHEP (RFC 9725): the offer as application/sdp, the answer back with the session's Location.
          const response = await fetch('/whep/' + stream + location.search, {method: 'POST', headers: {'Content-Type': 'application/sdp'}, body: pc.localDescription.sdp});
          // A refusal (an unknown stream, an offer the node cannot serve) is shown, not retried.
          if (response.status !== 201) { status.textContent = 'WHEP ' + response.status + ': ' + await response.text(); pc.close(); return; }
          resource = response.headers.get('Location');
          window.whepResource = resource;
          await pc.setRemoteDescription({type: 'answer', sdp: await response.text()});
          if (window.firstDecodedAfterPost === undefined) {
            window.firstDecodedAfterPost = null;
            video.requestVideoFrameCallback?.(() => { window.firstDecodedAfterPost = (performance.now() - posted) / 1000; });
          }
        }
        addEventListener('pagehide', () => { if (resource) fetch(resource, {method: 'DELETE', keepalive: true}); });
        setInterval(async () => {
          const pc = window.pc;
          if (!pc || !resource) return;
          let line = pc.connectionState;
          (await pc.getStats()).forEach((s) => {
            if (s.type === 'inbound-rtp' && s.kind === 'video') line += ` · ${s.frameWidth || 0}×${s.frameHeight || 0} · ${s.framesDecoded || 0} pictures · ${s.packetsLost || 0} lost`;
          });
          if (window.restarts) line += ` · ${window.restarts} reconnection${window.restarts > 1 ? 's' : ''}`;
          status.textContent = line;
        }, 1000);
        play().catch(failed);
        </script>
        </body></html>
        """
    }
}

extension HTTPAPI {
    static func addPlayerPage(_ router: Router<NodeRequestContext>, plane: ControlPlane) {
        router.get("\(WHEPPlayerPage.root)/**") { request, _ in
            let stream = String(request.uri.path.dropFirst(WHEPPlayerPage.root.count + 2)).removingPercentEncoding ?? ""
            guard plane.webrtcService.withLock({ $0 }) != nil else { return error(.notFound, "WebRTC playback is off on this node") }
            return Response(status: .ok, headers: [.contentType: "text/html; charset=utf-8", .cacheControl: "no-cache"],
                            body: .init(byteBuffer: ByteBuffer(string: WHEPPlayerPage.render(stream: stream))))
        }
    }
}
