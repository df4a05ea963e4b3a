/// Which requests an RTSP session accepts in which state (RFC 2326 Appendix A), as a value:
/// the server asks it before acting and answers 455 when it says no.
public struct RTSPSessionStateMachine: Sendable, Equatable {
    public enum Role: Sendable, Equatable { case publisher, player }

    public enum State: Sendable, Equatable {
        /// Described or announced; no track set up yet.
        case initial
        /// At least one track set up; not flowing.
        case ready
        /// Media flowing: a player after PLAY, a publisher after RECORD.
        case active
        case closed
    }

    public enum Decision: Sendable, Equatable {
        case accept(next: State)
        /// 455 Method Not Valid in This State.
        case notValidInState
    }

    public let role: Role
    public private(set) var state: State = .initial

    public init(role: Role) {
        self.role = role
    }

    public func decide(_ method: String) -> Decision {
        switch (method, state) {
        case (_, .closed):
            return .notValidInState
        case ("OPTIONS", _), ("GET_PARAMETER", _), ("SET_PARAMETER", _), ("DESCRIBE", _):
            return .accept(next: state)
        case ("SETUP", .initial), ("SETUP", .ready):
            return .accept(next: .ready)
        // A player may add tracks while playing only if the server supports it; we do not.
        case ("SETUP", .active):
            return .notValidInState
        case ("PLAY", .ready), ("PLAY", .active):
            return role == .player ? .accept(next: .active) : .notValidInState
        case ("RECORD", .ready), ("RECORD", .active):
            return role == .publisher ? .accept(next: .active) : .notValidInState
        // RFC 2326 §10.6: PAUSE interrupts playing or recording alike (rtspclientsink sends it at EOS).
        case ("PAUSE", .ready), ("PAUSE", .active):
            return .accept(next: .ready)
        case ("TEARDOWN", _):
            return .accept(next: .closed)
        default:
            return .notValidInState
        }
    }

    /// Applies a decision the server acted on.
    public mutating func apply(_ method: String) -> Decision {
        let decision = decide(method)
        if case let .accept(next) = decision { state = next }
        return decision
    }
}
