import MediaCore
import NIOCore

/// What a publisher asks for at `publish`: the stream (`app/streamKey`, without any query) and
/// the credentials it gave, on the stream key or the tcUrl (`?user=…&password=…`, as Red5 and
/// Wowza clients send them).
public struct RTMPPublishIntent: Sendable, Equatable {
    public var path: String
    public var username: String?
    public var password: String?
    public var tcUrl: String?

    public init(path: String, username: String? = nil, password: String? = nil, tcUrl: String? = nil) {
        self.path = path
        self.username = username
        self.password = password
        self.tcUrl = tcUrl
    }
}

/// One RTMP publisher's session as a value (RTMP 1.0 §7.2, and the command sequence ffmpeg,
/// OBS and GStreamer send: connect, releaseStream, FCPublish, createStream, publish, then media,
/// then FCUnpublish and deleteStream). It is fed whole messages and returns what to do: replies
/// to send, a publish to decide, media for the sink, or an end. It keeps no socket and no clock.
public struct RTMPPublishSession: Sendable {
    public enum Action: Sendable {
        case send([RTMPMessage])
        /// The node must decide the publish; answer with `accept()` or `refuse(…)`.
        case decide(RTMPPublishIntent)
        case media(MediaSinkEvent)
        /// The publisher stopped (FCUnpublish, deleteStream) or must be dropped (`reason` says why):
        /// what was sent is flushed, then the connection closes.
        case end(reason: String, closeConnection: Bool)
    }

    enum State: Equatable {
        case awaitingConnect
        case connected
        case deciding
        case publishing
        case ended
    }

    /// RTMP's clock.
    static let millisecond = Rational(1, 1000)
    /// The stream id `createStream` hands out (one publish per connection).
    public static let publishStreamID: UInt32 = 1
    /// What the node tells publishers to acknowledge after, and its peer bandwidth.
    public static let window: UInt32 = 2_500_000
    /// The chunk size of what the node sends.
    public static let outgoingChunkSize: UInt32 = 4096

    private(set) var state = State.awaitingConnect
    private var app = ""
    private var tcUrl: String?
    private var streamName = ""
    private var lengthSize = 4
    private var video: VideoFormat?
    private var audio: AudioFormat?
    private var frameRate: Double?
    private var timeline = PublisherTimeline(wrapBits: 32)

    public init() {}

    public var isPublishing: Bool { state == .publishing }
    /// The stream being published (`live/stream1_1`), once `publish` named it.
    public var path: String? { streamName.isEmpty ? nil : Self.path(app: app, stream: streamName) }

    public mutating func receive(_ message: RTMPMessage) -> [Action] {
        guard state != .ended else { return [] }
        switch message.typeID {
        case RTMPMessage.Kind.amf0Command, RTMPMessage.Kind.amf3Command:
            var payload = message.payload
            // An AMF3 command is AMF0 after a format byte (0) that says so.
            if message.typeID == RTMPMessage.Kind.amf3Command { payload.moveReaderIndex(forwardBy: min(1, payload.readableBytes)) }
            guard let values = try? AMF0.decodeAll(payload), case let .string(name)? = values.first else {
                return end("an unreadable command")
            }
            return command(name, values, streamID: message.streamID)
        case RTMPMessage.Kind.amf0Data, RTMPMessage.Kind.amf3Data:
            var payload = message.payload
            if message.typeID == RTMPMessage.Kind.amf3Data { payload.moveReaderIndex(forwardBy: min(1, payload.readableBytes)) }
            readMetadata((try? AMF0.decodeAll(payload)) ?? [])
            return []
        case RTMPMessage.Kind.video:
            return state == .publishing ? receiveVideo(message) : []
        case RTMPMessage.Kind.audio:
            return state == .publishing ? receiveAudio(message) : []
        default:
            // Protocol control and user control messages: the decoder has applied what matters.
            return []
        }
    }

    /// The node took the publish: the publisher is told, and its media goes to the sink from now on.
    public mutating func accept() -> [Action] {
        guard state == .deciding else { return [] }
        state = .publishing
        return [.send([.streamBegin(Self.publishStreamID),
                       status("NetStream.Publish.Start", "\(streamName) is now published", level: "status", details: streamName)])]
    }

    /// The node refused the publish (`code`: `NetStream.Publish.BadName`, `NetConnection.Connect.Rejected`, ...).
    public mutating func refuse(code: String, description: String) -> [Action] {
        guard state == .deciding else { return [] }
        state = .ended
        return [.send([status(code, description, level: "error")]), .end(reason: description, closeConnection: true)]
    }

    // MARK: Commands

    private mutating func command(_ name: String, _ values: [AMF0Value], streamID: UInt32) -> [Action] {
        let transaction = values.count > 1 ? values[1] : .number(0)
        let arguments = Array(values.dropFirst(3))
        switch name {
        case "connect":
            guard state == .awaitingConnect else { return [] }
            let object = values.count > 2 ? values[2] : .null
            app = object["app"]?.string ?? ""
            tcUrl = object["tcUrl"]?.string
            state = .connected
            return [.send([
                .control(RTMPMessage.Kind.windowAcknowledgementSize, Self.window),
                .peerBandwidth(Self.window),
                .control(RTMPMessage.Kind.setChunkSize, Self.outgoingChunkSize),
                .command([.string("_result"), transaction,
                          .object([("fmsVer", .string("FMS/3,5,7,7009")), ("capabilities", .number(31)), ("mode", .number(1))]),
                          .object([("level", .string("status")), ("code", .string("NetConnection.Connect.Success")),
                                   ("description", .string("Connection succeeded.")), ("objectEncoding", .number(0))])]),
            ])]
        case "releaseStream":
            return [.send([.command([.string("_result"), transaction, .null, .undefined])])]
        case "FCPublish":
            let stream = arguments.first?.string ?? ""
            return [.send([.command([.string("onFCPublish"), .number(0), .null,
                                     .object([("code", .string("NetStream.Publish.Start")), ("description", .string(stream))])])])]
        case "createStream":
            guard state != .awaitingConnect else { return end("createStream before connect") }
            return [.send([.command([.string("_result"), transaction, .null, .number(Double(Self.publishStreamID))])])]
        case "publish":
            guard state == .connected else {
                return state == .awaitingConnect ? end("publish before connect") : []
            }
            guard let name = arguments.first?.string, !name.isEmpty else {
                state = .deciding
                return refuse(code: "NetStream.Publish.BadName", description: "publish names no stream")
            }
            streamName = name
            state = .deciding
            let (stream, streamQuery) = Self.splitQuery(name)
            let (_, appQuery) = Self.splitQuery(app)
            let (_, urlQuery) = Self.splitQuery(tcUrl ?? "")
            streamName = stream
            let credentials = [streamQuery, appQuery, urlQuery].map(Self.credentials).first { $0.user != nil || $0.password != nil }
            return [.decide(RTMPPublishIntent(path: Self.path(app: app, stream: stream), username: credentials?.user,
                                              password: credentials?.password, tcUrl: tcUrl))]
        case "FCUnpublish", "deleteStream", "closeStream":
            guard state == .publishing || state == .deciding else { return [] }
            state = .ended
            return [.send([status("NetStream.Unpublish.Success", "\(streamName) is now unpublished", level: "status")]),
                    .end(reason: "the publisher sent \(name)", closeConnection: false)]
        case "play", "play2":
            return [.send([status("NetStream.Play.Failed", "this node plays streams over RTSP and HLS, not RTMP", level: "error")])]
        default:
            // _checkbw, getStreamLength and the like: a transaction gets an answer, the rest is ignored.
            if case let .number(id) = transaction, id > 0 { return [.send([.command([.string("_result"), transaction, .null, .undefined])])] }
            return []
        }
    }

    private mutating func readMetadata(_ values: [AMF0Value]) {
        // `@setDataFrame`, `onMetaData`, then the properties; or `onMetaData` alone.
        guard let properties = values.first(where: { if case .ecmaArray = $0 { true } else if case .object = $0 { true } else { false } }) else { return }
        if let rate = properties["framerate"]?.number ?? properties["videoframerate"]?.number, rate > 0, rate <= 240 {
            frameRate = rate
            video?.frameRate = rate
        }
    }

    // MARK: Media

    private mutating func receiveVideo(_ message: RTMPMessage) -> [Action] {
        let parsed: FLVVideo
        do {
            parsed = try FLVVideo.parse(message.payload, lengthSize: lengthSize)
        } catch {
            if case .malformed = error { return [] }  // one damaged picture is dropped, as RTP loss would be
            return refuseMedia(error.description)
        }
        switch parsed {
        case let .sequenceHeader(record):
            lengthSize = record.lengthSize
            guard let format = VideoFormat(sps: record.sequenceParameterSets[0], pps: record.pictureParameterSets[0], frameRate: frameRate) else {
                return refuseMedia("the AVC sequence header's SPS cannot be read")
            }
            guard format != video else { return [] }
            video = format
            return [.media(.formats(video: video, audio: audio))]
        case .picture(var units, let compositionTime, let isKeyframe):
            guard let video else { return [] }  // nothing is decodable before the sequence header
            // FLV carries the parameter sets only in sequence headers: a keyframe gets them in-band,
            // as RTP and MPEG-TS publishers send them, so a new sequence header mid-stream reaches
            // the decoder and the passed-through top at the next IDR.
            if isKeyframe, !units.contains(where: { ($0.first ?? 0) & 0x1F == H264.NALType.sps.rawValue }) {
                units.insert(contentsOf: [video.sps, video.pps], at: 0)
            }
            let (decode, restarted) = timeline.place(Int64(message.timestamp), track: 0)
            let presentation = MediaTime(ticks: decode + Int64(compositionTime), timeBase: Self.millisecond)
            return (restarted ? [.media(.timelineRestarted)] : []) + [.media(.video(units, time: presentation, isKeyframe: isKeyframe))]
        case .endOfSequence, .ignored:
            return []
        }
    }

    private mutating func receiveAudio(_ message: RTMPMessage) -> [Action] {
        let parsed: FLVAudio
        do {
            parsed = try FLVAudio.parse(message.payload)
        } catch {
            if case .malformed = error { return [] }
            return refuseMedia(error.description)
        }
        switch parsed {
        case let .configuration(config):
            let format = AudioFormat(sampleRate: config.sampleRate, channels: config.channels, config: config.bytes)
            guard format != audio else { return [] }
            audio = format
            return [.media(.formats(video: video, audio: audio))]
        case let .frame(frame):
            guard audio != nil else { return [] }
            let (time, restarted) = timeline.place(Int64(message.timestamp), track: 1)
            return (restarted ? [.media(.timelineRestarted)] : []) + [.media(.audio(frame, time: MediaTime(ticks: time, timeBase: Self.millisecond)))]
        }
    }

    /// The node stops a publish it had taken (its stream's format is refused, its provision went):
    /// the publisher is told why and the connection closes.
    public mutating func stop(_ reason: String) -> [Action] {
        guard state != .ended else { return [] }
        return refuseMedia(reason)
    }

    /// Media the node does not take ends the publish, with a status that says why.
    private mutating func refuseMedia(_ reason: String) -> [Action] {
        state = .ended
        return [.send([status("NetStream.Publish.Rejected", reason, level: "error")]), .end(reason: reason, closeConnection: true)]
    }

    private mutating func end(_ reason: String) -> [Action] {
        state = .ended
        return [.end(reason: "RTMP: \(reason)", closeConnection: true)]
    }

    private func status(_ code: String, _ description: String, level: String, details: String? = nil) -> RTMPMessage {
        var info: [(String, AMF0Value)] = [("level", .string(level)), ("code", .string(code)), ("description", .string(description))]
        if let details { info.append(("details", .string(details))) }
        return .command([.string("onStatus"), .number(0), .null, .object(info)], streamID: Self.publishStreamID)
    }

    // MARK: Names

    static func path(app: String, stream: String) -> String {
        let (app, _) = splitQuery(app)
        let trimmed = app.split(separator: "/").filter { !$0.isEmpty }.joined(separator: "/")
        return trimmed.isEmpty ? stream : "\(trimmed)/\(stream)"
    }

    static func splitQuery(_ text: String) -> (String, String) { PublishTarget.splitQuery(text) }

    static func credentials(_ query: String) -> (user: String?, password: String?) { PublishTarget.credentials(query) }
}
