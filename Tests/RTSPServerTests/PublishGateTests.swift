import Ingest
import MediaCore
import Synchronization
import Testing

/// The admission sequence every publish protocol runs, without any protocol: credentials, the
/// node's policy, the publisher slot, and take-over of a silent publisher.
@Suite struct PublishGateTests {
    final class NullSink: MediaSink, @unchecked Sendable {
        func setFormats(video: VideoFormat?, audio: AudioFormat?) {}
        func writeVideo(_ nalUnits: [[UInt8]], time: MediaTime, isKeyframe: Bool) {}
        func writeAudio(_ frame: [UInt8], time: MediaTime) {}
        func end(reason: String) {}
    }

    /// `live/*` needs user/pass; `closed/*` is refused; the policy counts what it was asked.
    final class Policy: PublishPolicy {
        let asked = Mutex(0)
        func publisherCredentials(for path: String) -> StreamCredentials? {
            path.hasPrefix("live/") ? StreamCredentials(username: "user", password: "pass") : nil
        }
        func decide(_ request: PublishRequest) -> PublishDecision {
            asked.withLock { $0 += 1 }
            return request.path.hasPrefix("closed/") ? .refuse(status: 404, reason: "\(request.path) is not provisioned") : .accept(NullSink())
        }
    }

    static func request(_ path: String) -> PublishRequest {
        PublishRequest(path: path, remoteAddress: "127.0.0.1:5000", transport: "test", sps: nil)
    }

    /// What was revoked, in order.
    final class Revocations: Sendable {
        let all = Mutex<[String]>([])
    }

    static func claim(_ session: String, silence: Double = 0, revoked: Revocations? = nil) -> PublishGate.Claim {
        PublishGate.Claim(session: session, revoke: { reason in revoked?.all.withLock { $0.append("\(session): \(reason)") } }, silence: { silence })
    }

    static func refusal(_ verdict: PublishGate.Verdict) -> PublishGate.Refusal? {
        if case let .refused(refusal) = verdict { return refusal }
        return nil
    }

    @Test func credentialsAreCheckedBeforeThePolicyIsAsked() {
        let policy = Policy()
        let gate = PublishGate(policy: policy, slots: PublisherSlots(), takeoverSilence: 5)
        #expect(Self.refusal(gate.admit(Self.request("live/a"), credentials: .presented(user: "user", password: "nope"), claim: Self.claim("1"))) == .credentials)
        #expect(Self.refusal(gate.admit(Self.request("live/a"), credentials: .presented(user: nil, password: nil), claim: Self.claim("1"))) == .credentials)
        #expect(policy.asked.withLock { $0 } == 0)
        #expect(Self.refusal(gate.admit(Self.request("live/a"), credentials: .presented(user: "user", password: "pass"), claim: Self.claim("1"))) == nil)
        // A protocol that proved them itself (RTSP's Digest) is not asked again.
        #expect(Self.refusal(gate.admit(Self.request("live/b"), credentials: .proven, claim: Self.claim("2"))) == nil)
        #expect(Self.refusal(gate.admit(Self.request("closed/c"), credentials: .proven, claim: Self.claim("3")))
                == .policy(status: 404, reason: "closed/c is not provisioned"))
    }

    @Test func oneStreamHasOnePublisherUntilItFallsSilent() {
        let slots = PublisherSlots()
        let gate = PublishGate(policy: Policy(), slots: slots, takeoverSilence: 5)
        let revoked = Revocations()
        let sending = Self.claim("first", silence: 1, revoked: revoked)
        #expect(Self.refusal(gate.admit(Self.request("open/s"), credentials: .proven, claim: sending)) == nil)
        #expect(Self.refusal(gate.admit(Self.request("open/s"), credentials: .proven, claim: Self.claim("second"))) == .alreadyPublished)
        // A handshake that cannot claim yet is told now whether it could.
        #expect(Self.refusal(gate.admit(Self.request("open/s"), credentials: .proven, claim: nil)) == .alreadyPublished)
        #expect(Self.refusal(gate.admit(Self.request("open/t"), credentials: .proven, claim: nil)) == nil)
        #expect(slots.publisherSession("open/t") == nil, "checking does not claim")
        #expect(revoked.all.withLock { $0 }.isEmpty)

        // Silent for longer than the take-over silence: the same publisher's new connection takes over.
        slots.releasePublisher("open/s", session: "first")
        #expect(gate.claim(Self.claim("quiet", silence: 6, revoked: revoked), path: "open/s") == false)
        guard case let .admitted(_, tookOver) = gate.admit(Self.request("open/s"), credentials: .proven, claim: Self.claim("back")) else {
            Issue.record("a silent publisher's stream is taken over")
            return
        }
        #expect(tookOver && slots.publisherSession("open/s") == "back")
        #expect(revoked.all.withLock { $0 } == ["quiet: a new connection of the publisher took over"])
    }
}
