import Ingest
import MediaCore

/// Lets anyone publish any path and relays it unchanged: for tests and fuzzing, never a node's policy.
public struct RelayEverything: PublishPolicy {
    let registry: StreamRegistry

    public init(registry: StreamRegistry) {
        self.registry = registry
    }

    public func decide(_ request: PublishRequest) -> PublishDecision {
        .accept(registry.relayStream(request.path))
    }
}
