import MediaCore

/// Why an announced SDP cannot be published; the server answers ANNOUNCE with `status` and this text.
public struct PublishedMediaProblem: Error, Sendable, Equatable, CustomStringConvertible {
    /// 400 for a description that is wrong, 415 for one the node cannot take.
    public var status: Int
    public var description: String

    init(_ status: Int, _ description: String) {
        self.status = status
        self.description = description
    }
}

extension SessionDescription.Media {
    /// `a=framerate:` when it is a usable rate (finite, above zero, at most 240), nil otherwise.
    public var frameRate: Double? {
        guard let text = attributes.first(where: { $0.hasPrefix("framerate:") })?.dropFirst("framerate:".count),
              let rate = Double(text.trimmed), rate.isFinite, rate > 0, rate <= SessionDescription.maximumFrameRate else { return nil }
        return rate
    }

    /// The SPS from `sprop-parameter-sets`, when the SDP carries one.
    public var spropSPS: [UInt8]? {
        formatParameters["sprop-parameter-sets"].flatMap { sprop in
            H264.parameterSets(fromSprop: sprop).first { ($0.first ?? 0) & 0x1F == H264.NALType.sps.rawValue }
        }
    }
}

extension SessionDescription {
    public static let maximumFrameRate = 240.0
    /// AAC's sampling frequency table (ISO/IEC 14496-3 §1.6.3.4) runs from 7350 Hz to 96 kHz.
    public static let aacSampleRates = 7350...96000

    /// Checks, before anything is set up, every number the media path will trust: one H.264 track
    /// at 90 kHz, a sane frame rate, AAC (RFC 3640 or LATM) at a real sample rate and channel
    /// count with a config the node can read, and a picture no
    /// larger than `maximumPixels` when the SPS is in the SDP. Problems name the media section.
    public func validateForPublishing(maximumPixels: Int) throws(PublishedMediaProblem) {
        let videoTracks = media.filter(\.isH264)
        guard !videoTracks.isEmpty else {
            throw PublishedMediaProblem(415, "the node needs an H.264 video track (got \(media.map { $0.encoding.isEmpty ? $0.kind : $0.encoding }))")
        }
        guard videoTracks.count == 1 else { throw PublishedMediaProblem(415, "SDP has \(videoTracks.count) H.264 tracks; the node takes one") }
        for (index, section) in media.enumerated() {
            let name = "SDP media \(index + 1) (m=\(section.kind))"
            if section.isH264 {
                guard section.clockRate == 90000 else { throw PublishedMediaProblem(400, "\(name): H.264 clock rate must be 90000 (got \(section.clockRate))") }
                if let text = section.attributes.first(where: { $0.hasPrefix("framerate:") }), section.frameRate == nil {
                    throw PublishedMediaProblem(400, "\(name): a=\(text.prefix(40)) is not a frame rate between 0 and \(Int(Self.maximumFrameRate))")
                }
                if section.formatParameters["sprop-parameter-sets"] != nil {
                    guard let sps = section.spropSPS, let parsed = H264SPS(sps) else {
                        throw PublishedMediaProblem(400, "\(name): sprop-parameter-sets holds no readable H.264 SPS")
                    }
                    guard parsed.width * parsed.height <= maximumPixels else {
                        throw PublishedMediaProblem(415, "\(name): picture \(parsed.width)x\(parsed.height) is larger than the node's limit of \(maximumPixels) pixels")
                    }
                }
            } else if section.isAAC || section.isLATM {
                guard Self.aacSampleRates.contains(section.clockRate) else {
                    throw PublishedMediaProblem(400, "\(name): AAC sample rate must be \(Self.aacSampleRates.lowerBound)-\(Self.aacSampleRates.upperBound) Hz (got \(section.clockRate))")
                }
                if let channels = section.channels, !(1...Self.maximumChannels).contains(channels) {
                    throw PublishedMediaProblem(400, "\(name): AAC channels must be 1-\(Self.maximumChannels) (got \(channels))")
                }
                if section.isAAC, (section.formatParameters["mode"] ?? "").lowercased() == "aac-hbr" {
                    guard let config = section.aacConfig, config.count >= 2, config.count <= 64 else {
                        throw PublishedMediaProblem(400, "\(name): config= must be an AudioSpecificConfig in hex (2-64 bytes)")
                    }
                }
                if section.isLATM {
                    guard section.formatParameters["cpresent"] == "0" else {
                        throw PublishedMediaProblem(415, "\(name): MP4A-LATM needs its StreamMuxConfig out of band (cpresent=0 with config=); in-band configs are not supported")
                    }
                    guard section.latmConfig != nil else {
                        throw PublishedMediaProblem(415, "\(name): config= is not an LATM StreamMuxConfig the node takes (version 0, one program and layer, AAC Main/LC/LTP with 1-8 channels)")
                    }
                }
            }
        }
    }

    /// What an ANNOUNCE carries (its Content-Type and body), parsed and checked for publishing:
    /// 415 when it is not SDP, 400 when it does not parse, else `validateForPublishing`'s problem.
    public static func announced(contentType: String?, body: [UInt8], maximumPixels: Int) throws(PublishedMediaProblem) -> SessionDescription {
        let type = contentType ?? "application/sdp"
        guard type.lowercased().hasPrefix("application/sdp") else {
            throw PublishedMediaProblem(415, "an ANNOUNCE carries application/sdp (got \(type.prefix(60)))")
        }
        let description: SessionDescription
        do {
            description = try parse(String(decoding: body, as: UTF8.self))
        } catch {
            throw PublishedMediaProblem(400, "\(error)")
        }
        try description.validateForPublishing(maximumPixels: maximumPixels)
        return description
    }
}
