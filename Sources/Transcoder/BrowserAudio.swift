import FFmpegBridge
import Logging
import MediaCore

/// The job's audio once more, as Opus for WebRTC viewers (browsers take no AAC over RTP):
/// encoded once, on the ingest thread, in both renditions (`BrowserAudioRendition`), and the same
/// packets written to every rung's sink, so a viewer's audio goes on unchanged when it is moved
/// between rungs.
final class BrowserAudio {
    private let encoder: AudioReencoder
    /// The light rendition; nil (the full one alone) if libopus would not open at its rate.
    private let lightEncoder: AudioReencoder?
    private let sinks: [any MediaSink]
    private let logger: Logger
    private var reportedErrors = 0

    /// nil, with the reason logged, when libavcodec cannot decode the track or has no libopus:
    /// browsers then get video alone and everything else goes on.
    init?(track: AudioTrack, sinks: [any MediaSink], logger: Logger) {
        guard !sinks.isEmpty else { return nil }
        do {
            encoder = try AudioReencoder(parameters: track.parameters, timeBase: track.stream.timeBase,
                                         target: .opus(bitRate: BrowserAudioRendition.full.bitRate))
        } catch {
            logger.warning("no Opus for browsers: \(error)")
            return nil
        }
        lightEncoder = try? AudioReencoder(parameters: track.parameters, timeBase: track.stream.timeBase,
                                           target: .opus(bitRate: BrowserAudioRendition.light.bitRate))
        self.sinks = sinks
        self.logger = logger
    }

    /// One of the publisher's audio packets, on the job's timeline (ADTS already removed).
    func write(_ packet: Packet) {
        // Both encoders take the same samples in the same 20 ms frames: their packets pair up by time.
        let light = Dictionary((lightEncoder?.encode(packet) ?? []).map { ($0.ticks, $0.bytes) }, uniquingKeysWith: { first, _ in first })
        for output in encoder.encode(packet) {
            let time = MediaTime(ticks: output.ticks, timeBase: Rational(1, Int32(AudioReencoder.opusSampleRate)))
            for sink in sinks { sink.writeOpus(output.bytes, light: light[output.ticks], time: time) }
        }
        if encoder.decodeErrors > reportedErrors {
            // Once per power of two: a publisher sending bad audio for hours must not flood the log.
            if reportedErrors == 0 || encoder.decodeErrors >= 2 * reportedErrors {
                logger.warning("audio packets that did not decode for Opus", metadata: ["count": "\(encoder.decodeErrors)"])
            }
            reportedErrors = encoder.decodeErrors
        }
    }
}
