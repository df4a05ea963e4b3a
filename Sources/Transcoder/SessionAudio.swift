import FFmpegBridge
import MediaCore

/// One publisher session's audio, as the job's audio track takes it.
///
/// A live job opens its outputs once, with its first publisher's audio: each rung's HLS init
/// segment, its RTSP description, the Opus encoder for browsers. A publisher who comes back
/// within the grace period may send another rate or layout (a phone at 44.1 kHz mono after a
/// desktop encoder at 48 kHz stereo), or the same audio over another protocol, with other framing
/// and another stream index. So a session's packets are read by its own stream's index and
/// framing; audio in the job's format goes on as it is, and other AAC is decoded and encoded
/// again as AAC-LC in the job's rate and layout, so players keep their sound. (Left out, as it
/// was before, the job's every output went silent for the rest of the job, and nothing said so.)
final class SessionAudio {
    /// The job's track, whose format every output was opened with.
    let job: AudioTrack
    /// The session's audio stream, in its packets.
    let streamIndex: Int
    /// The session's own stream, for its framing (ADTS or not).
    private let framing: AudioTrack
    private let reencoder: AudioReencoder?

    /// How a session's audio reaches the job's outputs.
    enum Fit: Equatable {
        case asIs
        /// Encoded again: what it was and what the job's is.
        case reencoded(from: String, to: String)
        case leftOut(reason: String)
    }

    /// The job's first session: its audio is the job's track.
    convenience init(track: AudioTrack) {
        self.init(job: track, framing: track, reencoder: nil)
    }

    private init(job: AudioTrack, framing: AudioTrack, reencoder: AudioReencoder?) {
        self.job = job
        self.framing = framing
        self.reencoder = reencoder
        streamIndex = framing.stream.index
    }

    /// A later session's audio stream against the job's track: nil audio (and no fit) when the
    /// session has none; nil audio and `leftOut` when it cannot be carried.
    static func fit(_ stream: StreamInfo?, to job: AudioTrack?) -> (audio: SessionAudio?, fit: Fit?) {
        guard let stream else { return (nil, nil) }
        guard let job else { return (nil, .leftOut(reason: "the job's outputs were opened without audio; it returns when the job starts again")) }
        let framing: AudioTrack
        do {
            guard let track = try AudioTrack(stream: stream) else {
                return (nil, .leftOut(reason: "\(stream.codecName) audio cannot be carried in the job's outputs"))
            }
            framing = track
        } catch {
            return (nil, .leftOut(reason: "its \(stream.codecName) audio cannot be read: \(error)"))
        }
        let session = framing.parameters
        let target = job.parameters
        if session.codecName == target.codecName, framing.codecsEntry == job.codecsEntry,
           session.sampleRate == target.sampleRate, session.channelCount == target.channelCount {
            return (SessionAudio(job: job, framing: framing, reencoder: nil), .asIs)
        }
        // libavcodec's own AAC encoder makes LC only: a job opened with HE-AAC or another codec
        // cannot be given it.
        guard target.isAAC, job.codecsEntry == "mp4a.40.2" else {
            return (nil, .leftOut(reason: "it is \(describe(framing)), and the job's \(describe(job)) is not AAC-LC, which the node can encode"))
        }
        let bitRate = target.bitRate > 0 ? target.bitRate : 64_000 * max(1, target.channelCount)
        do {
            let reencoder = try AudioReencoder(parameters: session, timeBase: stream.timeBase,
                                               target: .aac(sampleRate: target.sampleRate, channels: target.channelCount, bitRate: bitRate))
            return (SessionAudio(job: job, framing: framing, reencoder: reencoder), .reencoded(from: describe(framing), to: describe(job)))
        } catch {
            return (nil, .leftOut(reason: "it is \(describe(framing)), and encoding it as the job's \(describe(job)) failed: \(error)"))
        }
    }

    /// `packet`, one of the session's audio packets on the job's timeline, as the job's track's
    /// packets: itself, without ADTS framing; or what the encoder made of it so far (none, one,
    /// or a few; before the first picture of a timeline there may be none).
    func packets(for packet: Packet) -> [Packet] {
        framing.prepare(packet)
        guard let reencoder else { return [packet] }
        let timeBase = Rational(1, Int32(reencoder.target.sampleRate))
        return reencoder.encode(packet).compactMap { output in
            // The encoder's priming dates its first packet before the session's first sample.
            guard output.ticks >= 0, let made = try? Packet(bytes: output.bytes, timeBase: timeBase) else { return nil }
            made.pts = output.ticks
            made.dts = output.ticks
            made.duration = Int64(reencoder.frameSamples)
            made.streamIndex = packet.streamIndex
            return made
        }
    }

    /// Audio the encoder could not decode in this session.
    var decodeErrors: Int { reencoder?.decodeErrors ?? 0 }

    private static func describe(_ track: AudioTrack) -> String {
        let parameters = track.parameters
        let layout = parameters.channelCount == 1 ? "mono" : parameters.channelCount == 2 ? "stereo" : "\(parameters.channelCount) channels"
        return "\(track.codecsEntry.map { $0 == "mp4a.40.2" ? "AAC-LC" : "AAC (\($0))" } ?? parameters.codecName) at \(parameters.sampleRate) Hz \(layout)"
    }
}
