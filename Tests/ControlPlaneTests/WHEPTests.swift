import Foundation
import Testing
import TestSupport

/// WebRTC playback over WHEP against real peers: Debian's Chromium plays a rung from the node's
/// own player page, and what a WHEP client can get wrong is refused with its status and reason.
@Suite(.serialized) struct WHEPTests {
    @Test func chromiumPlaysARungOverWHEPAndBadOffersAreRefused() throws {
        let scratch = ServeTests.scratch()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let node = try ServeProcess(dataDirectory: scratch.appendingPathComponent("data"),
                                    arguments: ["--provision", fixture("provisions/sm2-3-level.json"),
                                                "--publish-loop", fixture("720p30-h264-aac.mp4")],
                                    environment: ServeTests.credentials)
        defer { node.stop() }

        // What a WHEP client can get wrong, while the ladder starts.
        let sdp = ["Content-Type": "application/sdp"]
        let unknown = try node.http("POST", "/whep/live/nothing_1", headers: sdp, body: "v=0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\n")
        #expect(unknown.status == 404 && unknown.body.contains("no such stream: live/nothing_1"), "\(unknown)")
        #expect(try node.http("OPTIONS", "/whep/live/stream1_1").status == 204)
        let patch = try node.http("PATCH", "/whep/session/abc", headers: ["Content-Type": "application/trickle-ice-sdpfrag"], body: "a=x")
        #expect(patch.status == 405, "\(patch)")
        #expect(try node.http("DELETE", "/whep/session/no-such-session").status == 404)
        let ready = node.waitFor(timeout: 40) {
            let playlist = try? node.http("GET", "/hls/live/stream1/stream1_3/index.m3u8")
            return playlist?.status == 200 && (playlist?.body.components(separatedBy: "#EXTINF").count ?? 0) >= 2
        }
        #expect(ready)
        let wrongType = try node.http("POST", "/whep/live/stream1_3", headers: ["Content-Type": "text/plain"], body: "v=0")
        #expect(wrongType.status == 415, "\(wrongType)")
        let garbage = try node.http("POST", "/whep/live/stream1_3", headers: sdp, body: "hello")
        #expect(garbage.status == 400 && garbage.body.contains("SDP offer, line 1"), "\(garbage)")
        let manyLines = "v=0\r\n" + String(repeating: "m=audio 9 UDP/TLS/RTP/SAVPF 111\r\n", count: 1000)
        let many = try node.http("POST", "/whep/live/stream1_3", headers: sdp, body: manyLines)
        #expect(many.status == 413 || (many.status == 400 && many.body.contains("more than 16 m-lines")), "\(many.status)")
        let noBundle = "v=0\r\na=ice-ufrag:abcd\r\na=ice-pwd:0123456789abcdefghijkl\r\na=fingerprint:sha-256 AA:BB\r\na=setup:actpass\r\n"
            + "m=video 9 UDP/TLS/RTP/SAVPF 96\r\na=mid:0\r\na=recvonly\r\na=rtpmap:96 H264/90000\r\na=fmtp:96 packetization-mode=1;profile-level-id=42e01f\r\n"
        let unbundled = try node.http("POST", "/whep/live/stream1_3", headers: sdp, body: noBundle)
        #expect(unbundled.status == 400 && unbundled.body.contains("BUNDLE"), "\(unbundled)")

        // Chromium plays the 360p rung from the node's player page, and decodes it.
        let script = fixturesDirectory.deletingLastPathComponent().appendingPathComponent("Tests/Peers/chromium-whep-check.py")
        let check = try runProcess("/usr/bin/python3", [script.path, node.httpBase + "/play/live/stream1_3", "40", "90", "audio"], timeout: 120)
        #expect(check.status == 0, "\(check.stdout.suffix(1500)) \(check.stderr.suffix(500))")
        let summary = check.stdout.split(separator: "\n").last.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        #expect(summary?["frameWidth"] as? Int == 640, "\(summary ?? [:])")
        #expect(node.log.contains("WebRTC viewer playing"))
    }
}

/// aiortc (PyPI): a WebRTC stack of its own, whose offer names Constrained Baseline only and whose
/// feedback is REMB and receiver reports, no transport-wide feedback.
@Suite(.serialized) struct WHEPSecondPeerTests {
    @Test func aiortcPlaysABaselineRungWithOpusAudioAndShowsInTheJobsPlayers() throws {
        let scratch = ServeTests.scratch()
        defer { try? FileManager.default.removeItem(at: scratch) }
        // WebRTC-safe rungs: the provision asks for Baseline, as a Red5 or OvenMediaEngine operator would for old decoders.
        let provision = scratch.appendingPathComponent("baseline.json")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        var text = try String(contentsOf: URL(fileURLWithPath: fixture("provisions/sm2-3-level.json")), encoding: .utf8)
        text = text.replacingOccurrences(of: "\"videoParams\": {", with: "\"videoParams\": {\"profile\": \"baseline\", ")
        try text.write(to: provision, atomically: true, encoding: .utf8)
        let node = try ServeProcess(dataDirectory: scratch.appendingPathComponent("data"),
                                    arguments: ["--provision", provision.path, "--publish-loop", fixture("720p30-h264-aac.mp4")],
                                    environment: ServeTests.credentials)
        defer { node.stop() }
        #expect(node.waitFor(timeout: 40) {
            let playlist = try? node.http("GET", "/hls/live/stream1/stream1_2/index.m3u8")
            return playlist?.status == 200 && (playlist?.body.components(separatedBy: "#EXTINF").count ?? 0) >= 2
        })
        let root = fixturesDirectory.deletingLastPathComponent()
        let python = root.appendingPathComponent(".build/python/bin/python").path
        let script = root.appendingPathComponent("Tests/Peers/aiortc-whep-check.py").path
        // It ends as a closing browser tab does: DTLS close_notify, no DELETE. It offers
        // AES_CM_128_HMAC_SHA1_80 alone, so SRTP's AES-ICM and HMAC-SHA1 meet a real peer too
        // (Chromium's tests negotiate AES-GCM).
        let check = try runProcess("env", ["WHEP_CLOSE_ONLY=1", "WHEP_SRTP=AES_CM_128_HMAC_SHA1_80", python, script, node.httpBase + "/whep/live/stream1_2", "40", "90",
                                           node.httpBase + "/v1/jobs/live/stream1"], timeout: 120)
        #expect(check.status == 0, "\(check.stdout.suffix(1500)) \(check.stderr.suffix(800))")
        let summary = try #require(check.stdout.split(separator: "\n").last.flatMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        })
        // A rung it can decode: the 480p it asked for, or the 360p below (never the passed-through High top).
        #expect([854, 640].contains(summary["width"] as? Int ?? 0), "\(summary)")
        #expect((summary["audioSamples"] as? Int ?? 0) >= 48000, "a second of Opus at least: \(summary)")
        let players = ((summary["nodeStatus"] as? [String: Any])?["players"] as? [[String: Any]]) ?? []
        let viewer = players.first { $0["transport"] as? String == "webrtc" }
        #expect(viewer?["requested"] as? String == "live/stream1_2", "\(players)")
        #expect(viewer?["adaptive"] as? Bool == true, "\(players)")
        #expect(viewer?["audio"] as? String == "full", "a link with room gets the full audio: \(players)")
        #expect([2, 3].contains(viewer?["abrLevel"] as? Int ?? 0), "\(players)")
        #expect(node.log.contains("WebRTC viewer playing"))
        // Its close_notify ends the session at once, not after the 30 s of silence.
        #expect(node.waitFor(timeout: 5) {
            let status = (try? node.http("GET", "/v1/jobs/live/stream1"))?.json as? [String: Any]
            let players = status?["players"] as? [[String: Any]] ?? []
            return !players.contains { $0["transport"] as? String == "webrtc" }
        }, "the viewer that closed its peer connection still plays")
        #expect(node.log.contains("the viewer closed its DTLS session"))
    }
}
