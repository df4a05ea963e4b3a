import CSRT
import FFmpegBridge
import Foundation
import Ingest
import Logging
import MediaCore

/// One SRT publisher: its MPEG-TS bytes go through a `ByteFeed` to libavformat's demuxer on a
/// thread of its own, and what comes out goes into the sink as formats, pictures and AAC frames.
final class SRTPublisher: @unchecked Sendable {
    // @unchecked: `feed` and `admission` are immutable and thread-safe; `looksLikeTransportStream`
    // and `caps` are only touched by the receive loop's thread.
    let socket: SRTSOCKET
    let admission: SRTService.Admission
    private weak var service: SRTService?
    private let feed = ByteFeed(capacity: 8 * 1024 * 1024)
    private let logger: Logger
    private let ended = NSLock()
    private var endReason: String?

    init(socket: SRTSOCKET, admission: SRTService.Admission, service: SRTService) {
        self.socket = socket
        self.admission = admission
        self.service = service
        var logger = service.logger
        logger[metadataKey: "stream.guid"] = "\(admission.target.path)"
        logger[metadataKey: "srt.peer"] = "\(admission.address)"
        self.logger = logger
    }

    func start() {
        let thread = Thread { [self] in demux() }
        thread.name = "srt-demux"
        thread.start()
    }

    /// Whether the first message looked like MPEG-TS (nil until one came).
    private var looksLikeTransportStream: Bool?
    /// The ingest caps (NAL units and bytes per access unit), applied before libavformat and its
    /// H.264 parser see a byte: they would grow on what the caps refuse.
    private var caps = TransportStreamGuard()

    /// Bytes from the connection (the receive loop). The first message must be MPEG-TS packets (a
    /// 0x47 sync byte every 188 bytes, as SRT senders send 7 to a message): anything else would only
    /// keep libavformat resynchronising until its probe gave up, holding the stream meanwhile.
    func received(_ bytes: [UInt8]) {
        if looksLikeTransportStream == nil {
            looksLikeTransportStream = !bytes.isEmpty && stride(from: 0, to: bytes.count, by: 188).allSatisfy { bytes[$0] == 0x47 }
            if looksLikeTransportStream == false {
                refuse("the SRT stream is not MPEG-TS the node can read: no 0x47 sync byte every 188 bytes in its first message")
                return
            }
        }
        do {
            try caps.inspect(bytes)
        } catch {
            refuse("the SRT stream breaks the node's ingest limits: \(error)")
            return
        }
        admission.lastMedia.touch()
        feed.push(bytes)
    }

    /// The connection is gone: the demuxer reads what is left, then the end.
    func stop(reason: String) {
        ended.lock()
        if endReason == nil { endReason = reason }
        ended.unlock()
        feed.close()
    }

    private var reason: String {
        ended.lock()
        defer { ended.unlock() }
        return endReason ?? "the stream ended"
    }

    private func demux() {
        let sink = admission.sink
        defer {
            if feed.droppedBytes > 0 { logger.warning("SRT bytes dropped while the demuxer was behind", metadata: ["bytes": "\(feed.droppedBytes)"]) }
            sink.end(reason: reason)
        }
        let input: MediaInput
        do {
            input = try MediaInput(feed: feed, format: "mpegts", name: "srt://\(admission.address)/\(admission.target.path)")
        } catch {
            refuse("the SRT stream is not MPEG-TS the node can read: \(error)")
            return
        }
        guard let video = input.streams.first(where: { $0.kind == .video }), video.codecName == "h264" else {
            let found = input.streams.map(\.codecName).joined(separator: ", ")
            refuse("the SRT stream carries no H.264 video (found: \(found.isEmpty ? "nothing" : found)); publish H.264")
            return
        }
        let audio = input.streams.first { $0.kind == .audio && $0.codecName == "aac" }
        if let other = input.streams.first(where: { $0.kind == .audio && $0.codecName != "aac" }), audio == nil {
            logger.warning("SRT audio is not AAC; it is left out", metadata: ["codec": "\(other.codecName)"])
        }
        var streams = ElementaryStreams(awaitsAudio: audio != nil)
        var judgedFormat: VideoFormat?
        let frameRate = video.frameRate.isValid ? video.frameRate.doubleValue : nil
        while true {
            let result: MediaInput.ReadResult
            do {
                result = try input.read()
            } catch {
                logger.info("SRT stream unreadable: \(error)")
                service?.close(socket, reason: "the stream became unreadable")
                return
            }
            guard case let .packet(packet) = result else {
                // Pictures held for an audio format that never came still reach the ladder.
                streams.finish().forEach { $0.deliver(to: sink) }
                return
            }
            let pts = packet.pts != noTimestamp ? packet.pts : packet.dts
            guard pts != noTimestamp else { continue }
            let ticks = packet.timeBase.rescale(pts, to: ElementaryStreams.clock)
            let events: [MediaSinkEvent]
            if packet.streamIndex == video.index {
                events = streams.video(annexB: packet.bytes, pts: ticks, isKeyframe: packet.isKeyframe, frameRate: frameRate)
            } else if packet.streamIndex == audio?.index {
                events = streams.audio(adts: packet.bytes, pts: ticks)
            } else {
                continue
            }
            // Judged as soon as its SPS is read, even while its pictures wait for the audio format.
            if let format = streams.videoFormat, format != judgedFormat {
                judgedFormat = format
                if let refusal = PublishAdmission.refusal(of: format, maximumPixels: service?.configuration.maximumPublishPixels ?? .max, sink: sink) {
                    refuse(refusal)
                    return
                }
            }
            events.forEach { $0.deliver(to: sink) }
        }
    }

    /// The stream cannot go on: its connection is closed and the log says why (SRT has no status
    /// message once connected; the publisher sees the connection end).
    private func refuse(_ reason: String) {
        ended.lock()
        let first = endReason == nil
        ended.unlock()
        // Once stopped (the connection closed, or refused already), what the demuxer then says is no news.
        guard first else { return }
        logger.warning("publish stopped: \(reason)")
        stop(reason: reason)
        service?.close(socket, reason: reason)
    }
}
