import MediaCore

/// The checks every publish protocol makes the same way, whatever its wire: the provision's
/// credentials, and the picture a publisher announces in-band. Each protocol then answers a
/// refusal in its own terms (RTSP's status, RTMP's `onStatus` code, SRT's reject reason).
public enum PublishAdmission {
    /// The largest picture a publisher may send (4096×2304), unless the node is told otherwise.
    public static let defaultMaximumPixels = 4096 * 2304

    /// Whether a publisher presenting `user` and `password` (RTMP's query or stream key, SRT's
    /// stream ID) may publish `path`: true when the policy asks for no credentials.
    public static func credentialsAccepted(for path: String, user: String?, password: String?, policy: any PublishPolicy) -> Bool {
        guard let required = policy.publisherCredentials(for: path) else { return true }
        guard let user, let password else { return false }
        // Both compared, whatever the first gives: the time taken says nothing about either.
        let userMatches = constantTimeEqual(user, required.username)
        let passwordMatches = constantTimeEqual(password, required.password)
        return userMatches && passwordMatches
    }

    /// Why a picture format read from the stream itself (an SPS in-band) cannot be published:
    /// larger than `maximumPixels`, or refused by the sink (a ladder that cannot take it); nil when it can.
    public static func refusal(of format: VideoFormat, maximumPixels: Int, sink: (any MediaSink)?) -> String? {
        if format.width * format.height > maximumPixels {
            return "the stream's SPS announces a \(format.width)x\(format.height) picture, larger than the node's limit of \(maximumPixels) pixels"
        }
        return sink?.refusal(of: format)
    }
}
