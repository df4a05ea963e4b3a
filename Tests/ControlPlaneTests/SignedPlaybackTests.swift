import Foundation
import Testing
import TestSupport

/// Who may watch: a provision that asks for signed playback is opened only by a token minted by
/// the API, over RTSP (`?token=`) and HLS (`?token=` on the multivariant playlist, carried into
/// every URL it lists); expired, forged, another stream's and a re-provisioned stream's old tokens
/// get 401 or 403 and no media; a token that expires mid-session does not cut the viewer off.
/// End to end: `abr-worker serve`, ffmpeg publishing and playing, curl.
@Suite(.serialized) struct SignedPlaybackTests {
    static let paid = """
    [{"streamGuid":"live/paid","playback":{"signed":true},"streams":[
     {"streamGuid":"live/paid_1","abrLevel":1,"videoParams":{"videoWidth":1280,"videoHeight":720,"videoBitRate":2500000}},
     {"streamGuid":"live/paid_2","abrLevel":2,"videoParams":{"videoWidth":320,"videoHeight":180,"videoBitRate":300000}}]},
     {"streamGuid":"live/other","streams":[
     {"streamGuid":"live/other_1","abrLevel":1,"videoParams":{"videoWidth":1280,"videoHeight":720,"videoBitRate":2500000}}]}]
    """

    static func mint(_ node: ServeProcess, _ auth: [String: String], _ guid: String, body: String = "{}") throws -> [String: Any] {
        let reply = try node.http("POST", "/as/v1/streams/playback-token/default/\(guid)", headers: auth, body: body)
        #expect(reply.status == 201, "\(reply.body)")
        return try #require(reply.json as? [String: Any])
    }

    static func probe(_ url: String) throws -> ProcessResult {
        try runProcess("ffprobe", ["-v", "error", "-rtsp_transport", "tcp", "-show_entries", "stream=width", "-of", "csv=p=0", url], timeout: 30)
    }

    @Test func onlyAMintedTokenOpensASignedStreamOverRTSPAndHLS() throws {
        let scratch = ServeTests.scratch()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let node = try ServeProcess(dataDirectory: scratch.appendingPathComponent("data"), environment: ServeTests.credentials)
        defer { node.stop() }
        let token = try node.login(user: "manager", password: "s3cret-pass")
        let auth = ["Authorization": "Bearer \(token)", "Content-Type": "application/json"]
        #expect(try node.http("POST", "/as/v1/streams/provision/default", headers: auth, body: Self.paid).status == 201)
        let publisher = try ServeTests.startPublishing("\(node.rtspBase)/live/paid_1", seconds: 60, loop: true)
        defer { publisher.interrupt() }
        let open = try ServeTests.startPublishing("\(node.rtspBase)/live/other_1", seconds: 60, loop: true)
        defer { open.interrupt() }
        #expect(node.waitFor(timeout: 30) { node.jobState("live/paid") == "running" && node.jobState("live/other") == "running" })
        #expect(try node.waitFor(timeout: 30) {
            try node.http("GET", "/hls/live/paid/live/paid_2/index.m3u8").status != 404
                || (try node.http("GET", "/hls/live/paid/master.m3u8").status == 401)
        })

        // Minting needs the admin's token.
        #expect(try node.http("POST", "/as/v1/streams/playback-token/default/live/paid").status == 401)
        let minted = try Self.mint(node, auth, "live/paid")
        let good = try #require(minted["token"] as? String)
        #expect((minted["rtsp"] as? String)?.hasSuffix("/live/paid_1?token=\(good)") == true, "\(minted)")
        let otherStream = try #require(try Self.mint(node, auth, "live/other")["token"] as? String)
        let elsewhere = try #require(try Self.mint(node, auth, "live/paid", body: #"{"clientAddress": "192.0.2.9"}"#)["token"] as? String)
        let rungOnly = try #require(try Self.mint(node, auth, "live/paid_2")["token"] as? String)
        var forged = Array(good)
        forged[forged.count - 2] = forged[forged.count - 2] == "A" ? "B" : "A"
        #expect(try node.http("POST", "/as/v1/streams/playback-token/default/live/nowhere", headers: auth, body: "{}").status == 404)
        #expect(try node.http("POST", "/as/v1/streams/playback-token/default/live/paid", headers: auth, body: #"{"expiresIn": -5}"#).status == 400)

        // RTSP: refused without media, with each bad token; played with a good one.
        let rtsp = "\(node.rtspBase)/live/paid_2"
        for (name, bad) in [("none", ""), ("forged", "?token=\(String(forged))"), ("other stream", "?token=\(otherStream)"),
                            ("other address", "?token=\(elsewhere)"), ("garbage", "?token=1.n.abc")] {
            let refused = try Self.probe(rtsp + bad)
            #expect(refused.status != 0 && !refused.stdout.contains("320"), "\(name): \(refused.stdout) \(refused.stderr)")
        }
        #expect(try Self.probe("\(rtsp)?token=\(good)").stdout.contains("320"))
        #expect(try Self.probe("\(rtsp)?token=\(rungOnly)").stdout.contains("320"), "a rung's token opens that rung")
        #expect(try Self.probe("\(node.rtspBase)/live/paid_1?token=\(rungOnly)").status != 0, "and no other")
        #expect(try Self.probe("\(node.rtspBase)/live/other_1").stdout.contains("1280"), "an open stream stays open")

        // A token that expires mid-session does not cut the viewer off: 6 s played on a 3-s token.
        let short = try #require(try Self.mint(node, auth, "live/paid", body: #"{"expiresIn": 3}"#)["token"] as? String)
        let played = scratch.appendingPathComponent("played.mp4")
        try ServeTests.play("\(rtsp)?token=\(short)", seconds: 6, into: played, width: 320, height: 180)
        let pictures = try MediaProbe.videoPackets(played.path).count
        #expect(pictures >= 150, "played \(pictures) pictures (6 s at 30 fps) on a token that expired after 3 s")
        #expect(try Self.probe("\(rtsp)?token=\(short)").status != 0, "an expired token opens no new session")

        // HLS: the multivariant playlist needs the token and carries a session token into its URLs.
        #expect(try node.http("GET", "/hls/live/paid/master.m3u8").status == 401)
        #expect(try node.http("GET", "/hls/live/paid/master.m3u8?token=\(String(forged))").status == 403)
        #expect(try node.http("GET", "/hls/live/paid/master.m3u8?token=\(otherStream)").status == 403)
        let master = try node.http("GET", "/hls/live/paid/master.m3u8?token=\(good)")
        #expect(master.status == 200)
        let variantURI = try #require(master.body.split(separator: "\n").first { !$0.hasPrefix("#") && $0.contains("paid_2") }.map(String.init))
        #expect(variantURI.contains("?token="), "\(master.body)")
        #expect(try node.http("GET", "/hls/live/paid/paid_2/index.m3u8").status == 401)
        let variant = try node.http("GET", "/hls/live/paid/\(variantURI)")
        #expect(variant.status == 200, "\(variant.body)")
        let segment = try #require(variant.body.split(separator: "\n").last { !$0.hasPrefix("#") && !$0.isEmpty }.map(String.init))
        #expect(segment.contains("?token="), "\(variant.body)")
        #expect(try node.http("GET", "/hls/live/paid/paid_2/\(segment)").status == 200)
        let bare = String(segment.prefix { $0 != "?" })
        #expect(try node.http("GET", "/hls/live/paid/paid_2/\(bare)").status == 401, "a segment without the token gets nothing")
        #expect(try node.http("GET", "/hls/live/other/master.m3u8").status == 200, "an open ladder's HLS is unchanged")
        // The short token's HLS session goes on after it expires.
        let shortToken = try #require(try Self.mint(node, auth, "live/paid", body: #"{"expiresIn": 2}"#)["token"] as? String)
        let shortMaster = try node.http("GET", "/hls/live/paid/master.m3u8?token=\(shortToken)")
        let shortVariant = try #require(shortMaster.body.split(separator: "\n").first { !$0.hasPrefix("#") && $0.contains("paid_2") }.map(String.init))
        // Once the token has expired (a new session with it is refused)...
        #expect(waitUntil(timeout: 10, every: 0.25) { [401, 403].contains((try? node.http("GET", "/hls/live/paid/master.m3u8?token=\(shortToken)"))?.status ?? 0) },
                "the 2-s token never expired")
        #expect(try node.http("GET", "/hls/live/paid/\(shortVariant)").status == 200, "the session outlives the viewer's token")

        // Deleted and provisioned again: every token minted before is refused.
        #expect(try node.http("DELETE", "/as/v1/streams/provision/default/live/paid", headers: auth).status == 200)
        #expect(try node.http("POST", "/as/v1/streams/provision/default", headers: auth,
                              body: "[" + Self.paid.dropFirst().prefix { $0 != "]" } + "]}]").status == 201)
        #expect(try node.http("GET", "/hls/live/paid/master.m3u8?token=\(good)").status == 403, "a re-provisioned stream's old tokens are void")
    }
}
