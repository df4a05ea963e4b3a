import Foundation
import Ingest
import MediaCore
import NIOCore
import NIOEmbedded
import RTSP
@testable import RTSPServer
import Synchronization
import Testing

/// The RTSP requests' side of a connection, without a socket: `RTSPServerConnection` on an
/// `EmbeddedChannel`, from ANNOUNCE to the sink's first picture, and its refusals.
@Suite struct RTSPServerConnectionTests {
    /// Everything a publish handed its sink, in order.
    final class RecordingSink: MediaSink, @unchecked Sendable {
        let events = Mutex<[String]>([])
        func setFormats(video: VideoFormat?, audio: AudioFormat?) {
            events.withLock { $0.append("formats \(video.map { "\($0.width)x\($0.height)" } ?? "-")") }
        }
        func writeVideo(_ nalUnits: [[UInt8]], time: MediaTime, isKeyframe: Bool) {
            events.withLock { $0.append("video \(nalUnits.count) \(isKeyframe ? "key" : "delta") \(time.ticks)") }
        }
        func writeAudio(_ frame: [UInt8], time: MediaTime) {}
        func receiveNotification(name: String, value: String) { events.withLock { $0.append("note \(name)=\(value)") } }
        func end(reason: String) { events.withLock { $0.append("end \(reason)") } }
    }

    /// Accepts `live/*` into one recording sink; refuses the rest.
    struct RecordingPolicy: PublishPolicy {
        let sink: RecordingSink
        func decide(_ request: PublishRequest) -> PublishDecision {
            request.path.hasPrefix("live/") ? .accept(sink) : .refuse(status: 404, reason: "\(request.path) is not provisioned")
        }
    }

    static let sps = Array(Data(base64Encoded: "Z2QAH6y0AoAt2AiAAAADAIAAAB4HjBlQ")!)
    static let pps = Array(Data(base64Encoded: "aO88sA==")!)
    static let sdp = """
        v=0\r
        o=- 0 0 IN IP4 127.0.0.1\r
        s=test\r
        t=0 0\r
        m=video 0 RTP/AVP 96\r
        a=rtpmap:96 H264/90000\r
        a=fmtp:96 packetization-mode=1\r
        a=control:streamid=0\r

        """

    let sink = RecordingSink()
    let time = ManualClock()
    let service: RTSPService

    init() {
        var configuration = RTSPService.Configuration()
        configuration.clock = time.clock
        service = RTSPService(configuration: configuration, registry: StreamRegistry(), policy: RecordingPolicy(sink: sink))
    }

    func connection() throws -> (RTSPServerConnection, EmbeddedChannel) {
        let channel = EmbeddedChannel()
        channel.remoteAddress = try SocketAddress(ipAddress: "127.0.0.9", port: 40000)
        return (RTSPServerConnection(server: service, channel: channel, counter: nil, logger: service.logger), channel)
    }

    static func request(_ method: String, _ uri: String, _ headers: [(String, String)] = [], body: String = "") -> RTSPRequest {
        var all = RTSPHeaders()
        all.add("CSeq", "1")
        for (name, value) in headers { all.add(name, value) }
        return RTSPRequest(method: method, uri: uri, headers: all, body: Array(body.utf8))
    }

    static func rtp(_ nal: [UInt8], sequence: UInt16, timestamp: UInt32, marker: Bool) -> ByteBuffer {
        var out = ByteBuffer()
        RTPPacket(marker: marker, payloadType: 96, sequenceNumber: sequence, timestamp: timestamp, ssrc: 0x1234,
                  payload: ByteBuffer(bytes: nal)).write(to: &out)
        return out
    }

    /// ANNOUNCE, SETUP (interleaved) and RECORD; returns the session id.
    func publish(_ connection: RTSPServerConnection, path: String = "live/cam_1") throws -> String {
        let url = "rtsp://127.0.0.1/\(path)"
        let announced = connection.answer(Self.request("ANNOUNCE", url, [("Content-Type", "application/sdp")], body: Self.sdp)).response
        #expect(announced.status == 200, "\(String(decoding: announced.body, as: UTF8.self))")
        let session = try #require(announced.headers["Session"]?.split(separator: ";").first.map(String.init))
        let setUp = connection.answer(Self.request("SETUP", url + "/streamid=0", [("Session", session),
                                                                                    ("Transport", "RTP/AVP/TCP;unicast;interleaved=0-1;mode=record")])).response
        #expect(setUp.status == 200 && setUp.headers["Transport"]?.contains("interleaved=0-1") == true)
        #expect(connection.answer(Self.request("RECORD", url, [("Session", session)])).response.status == 200)
        return session
    }

    @Test func aPublishRunsFromAnnounceToTheSinksFirstPicture() throws {
        let (connection, _) = try connection()
        _ = try publish(connection)
        time.advance(seconds: 0.5)
        var sequence: UInt16 = 7
        func send(_ nal: [UInt8], _ timestamp: UInt32, marker: Bool) {
            #expect(connection.receiveInterleaved(channel: 0, payload: Self.rtp(nal, sequence: sequence, timestamp: timestamp, marker: marker)) == nil)
            sequence &+= 1
        }
        send(Self.sps, 5000, marker: false)
        send(Self.pps, 5000, marker: false)
        send([0x65, 0x88, 0x84, 0x00, 0x33], 5000, marker: true)
        send([0x41, 0x9A, 0x02, 0x04], 8000, marker: true)
        // An RTCP frame on the odd channel is only a keep-alive; another channel is nobody's.
        #expect(connection.receiveInterleaved(channel: 1, payload: ByteBuffer(bytes: [0x80, 0xC9, 0, 1, 0, 0, 0, 1])) == nil)
        #expect(connection.receiveInterleaved(channel: 9, payload: Self.rtp([0x65, 1], sequence: 1, timestamp: 1, marker: true)) == nil)
        let events = sink.events.withLock { $0 }
        #expect(events.first == "formats 1280x720", "\(events)")
        #expect(events.dropFirst().first == "video 3 key 45000", "the IDR with its parameter sets, where it arrived after RECORD: \(events)")
        #expect(events.dropFirst(2).first == "video 1 delta 48000", "\(events)")

        // SET_PARAMETER reaches the sink; the connection closing ends the publish.
        let session = try #require(service.sessions.all.first?.id)
        _ = connection.answer(Self.request("SET_PARAMETER", "rtsp://127.0.0.1/live/cam_1", [("Session", session)],
                                           body: "publisherBackground: true\r\npublisherForeground\r\n"))
        connection.endSessions()
        #expect(Array(sink.events.withLock { $0 }.suffix(3)) == ["note publisherBackground=true", "note publisherForeground=", "end connection closed"])
        #expect(!connection.hasLiveSessions && service.sessionCount == 0)
    }

    @Test func aPathHasOnePublisherAndItsRefusalsSayWhy() throws {
        let (first, _) = try connection()
        _ = try publish(first)
        let (second, _) = try connection()
        let taken = second.answer(Self.request("ANNOUNCE", "rtsp://127.0.0.1/live/cam_1", body: Self.sdp)).response
        #expect(taken.status == 403 && String(decoding: taken.body, as: UTF8.self).contains("already has a publisher"))
        let unprovisioned = second.answer(Self.request("ANNOUNCE", "rtsp://127.0.0.1/other/cam", body: Self.sdp)).response
        #expect(unprovisioned.status == 404 && String(decoding: unprovisioned.body, as: UTF8.self).contains("not provisioned"))
        let notSDP = second.answer(Self.request("ANNOUNCE", "rtsp://127.0.0.1/live/cam_2", [("Content-Type", "text/plain")], body: "x")).response
        #expect(notSDP.status == 415 && String(decoding: notSDP.body, as: UTF8.self).contains("application/sdp"))
        let noCSeq = second.answer(RTSPRequest(method: "OPTIONS", uri: "*")).response
        #expect(noCSeq.status == 400)
    }

    @Test func setupRefusesWhatItCannotServeInTheRequestsTerms() throws {
        let (connection, _) = try connection()
        let url = "rtsp://127.0.0.1/live/cam_1"
        let announced = connection.answer(Self.request("ANNOUNCE", url, body: Self.sdp)).response
        let session = try #require(announced.headers["Session"]?.split(separator: ";").first.map(String.init))
        // The service never bound its UDP pair: a UDP-only offer cannot be served.
        let udpOnly = connection.answer(Self.request("SETUP", url + "/streamid=0", [("Session", session),
                                                                                      ("Transport", "RTP/AVP;unicast;client_port=5000-5001")])).response
        #expect(udpOnly.status == 461)
        let noTrack = connection.answer(Self.request("SETUP", url + "/streamid=3", [("Session", session),
                                                                                      ("Transport", "RTP/AVP/TCP;unicast;interleaved=0-1")])).response
        #expect(noTrack.status == 404)
        let play = connection.answer(Self.request("PLAY", url, [("Session", session)])).response
        #expect(play.status == 455, "a publisher's session does not play")
        let unknown = connection.answer(Self.request("PLAY", url, [("Session", "NOSUCH")])).response
        #expect(unknown.status == 454)
    }
}
