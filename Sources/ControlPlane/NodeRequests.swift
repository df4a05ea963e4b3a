import Foundation
import LiveNode
import MediaCore
import NIOPosix
import Store
import Transcoder

/// The node in its fleet: node requests (where to publish, where to play), the node's state and
/// its heartbeat, provisions kept in step with the shared store.
extension ControlPlane {
    // MARK: Blocking work

    /// Runs blocking work (a job finishing its last segment) on the process's one thread pool for it.
    public static func offload<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await NIOThreadPool.singleton.runIfActive { try work() }
    }

    // MARK: State

    /// Moves the node to `state`. SOFT_SUNSET takes no new publisher or job (running ones and their
    /// players go on, players may still join); HARD_SUNSET also turns new players away and ends
    /// every job (players told to leave, playlists ended), keeping publishers connected for
    /// `releasingPublishersAfter` seconds (default: the node's grace) before releasing them.
    public func setNodeState(_ state: NodeState, releasingPublishersAfter delay: Double? = nil) async {
        let previous = fleet.state.withLock { current in
            defer { current = state }
            return current
        }
        guard previous != state else { return }
        logger.notice("node state \(previous.rawValue) → \(state.rawValue)", metadata: ["node.id": "\(fleet.identity.nodeId)"])
        let rtsp = rtspService.withLock { $0 }
        rtsp?.refuseNewPlayers(state == .hardSunset ? "node \(fleet.identity.nodeId) is in HARD_SUNSET: ask the stream manager for another node" : nil)
        if state == .hardSunset {
            let node = node
            let delay = delay ?? configuration.publisherReleaseAfterHardSunset
            _ = try? await Self.offload { node.shutdown(releasingPublishersAfter: delay) }
        }
        await heartbeat()
    }

    // MARK: Registry

    /// This node as the registry shows it now.
    public func nodeRecord() -> NodeRecord {
        let identity = fleet.identity
        let ports = fleet.listeningPorts
        let snapshot = capacitySnapshot()
        let jobs = node.jobs
        let active = jobs.filter { $0.state == .running || $0.state == .interrupted }
        return NodeRecord(nodeId: identity.nodeId, nodeGroup: identity.nodeGroup, subGroup: identity.subGroup, role: identity.role,
                          state: fleet.nodeState, address: identity.address, rtspPort: ports.rtsp, httpPort: ports.http,
                          ingest: ports.ingest, capacityCores: snapshot.capacityCores, maximumLoad: snapshot.maximumLoad,
                          encodeCores: snapshot.encodeCores, publishers: jobs.filter { $0.status.publisher != nil }.count,
                          subscribers: (rtspService.withLock { $0 }?.players().count ?? 0) + (webrtcService.withLock { $0 }?.viewers.count ?? 0),
                          streams: active.map(\.ladder.streamGuid).sorted())
    }

    /// One heartbeat: the record into the store, a state asked for through another node applied,
    /// this node's streams placed on it, and provisions compared with the store.
    func heartbeat() async {
        let record = nodeRecord()
        do {
            if let requested = try await store.heartbeat(record), requested != fleet.nodeState {
                await setNodeState(requested)
            }
            for guid in record.streams {
                let cores = node.ladder(guid).map { capacity.estimatedCores($0) } ?? 0
                try await store.place(Placement(streamGuid: guid, nodeId: record.nodeId, cores: cores))
            }
        } catch {
            logger.warning("heartbeat not stored: \(String(reflecting: error))")
        }
        if let nodes = try? await fleetNodes() { metrics.recordFleet(nodes, group: record.nodeGroup) }
        await synchronizeProvisions()
    }

    /// Provisions stored or deleted through other nodes take effect here.
    func synchronizeProvisions() async {
        do {
            let provisions = provisions
            let (added, removed) = try await provisions.synchronize()
            if !added.isEmpty || !removed.isEmpty {
                logger.info("provisions from the fleet's store", metadata: ["added": "\(added)", "removed": "\(removed)"])
            }
        } catch {
            logger.warning("provisions not compared with the store: \(String(reflecting: error))")
        }
    }

    /// The registry with this node's own record fresh from memory.
    func fleetNodes() async throws -> [NodeRecord] {
        let own = nodeRecord()
        return try await store.nodes().filter { $0.nodeId != own.nodeId } + [own]
    }

    /// Why a provision under `group` cannot be placed yet, when no live node serves that group
    /// (nil when one does, or when the registry cannot be read: the provision is kept either way).
    public func unservedGroupWarning(_ group: String) async -> String? {
        guard let nodes = try? await fleetNodes() else { return nil }
        let alive = nodes.filter { PlacementPolicy.isAlive($0) }
        guard !alive.contains(where: { $0.nodeGroup == group }) else { return nil }
        let served = Set(alive.map { $0.nodeGroup }).sorted()
        return "no node serves node group \(group) (the nodes alive serve \(served.isEmpty ? "no group" : served.joined(separator: ", ")));"
            + " node requests for these streams answer 503 until a node started with --node-group \(group) joins"
    }

    /// Asks `nodeId` (this node or another) to move to `state`. False when the registry has no such node.
    public func requestNodeState(_ state: NodeState, nodeId: String) async throws -> Bool {
        if nodeId == fleet.identity.nodeId {
            await setNodeState(state)
            return true
        }
        return try await store.requestState(state, nodeId: nodeId)
    }

    // MARK: Node requests

    /// The provision and ladder `guid` names in `group`: a ladder guid (`live/stream1`) or one of
    /// its variants (`live/stream1_2`).
    func provisioned(_ guid: String, group: String) async throws(NodeRequestFailure) -> (ladder: Ladder, variant: Variant?) {
        guard ProvisionBook.isValidNodeGroup(group) else {
            throw .badRequest("node group must be 1 to 64 letters, digits, '.', '_' or '-' (got \(group.prefix(80)))")
        }
        guard StreamName.isValid(guid) else {
            throw .badRequest("stream names are 1 to 255 letters, digits, '.', '_', '-' in '/'-separated parts (got \(guid.prefix(80)))")
        }
        var candidates = [guid]
        if let underscore = guid.lastIndex(of: "_"), Int(guid[guid.index(after: underscore)...]) != nil {
            candidates.append(String(guid[..<underscore]))
        }
        do {
            for candidate in candidates {
                guard let stored = try await store.provision(candidate), stored.nodeGroup == group,
                      let ladder = try? ProvisionBook.ladder(stored) else { continue }
                if ladder.streamGuid == guid { return (ladder, nil) }
                if let variant = ladder.variants.first(where: { $0.streamGuid == guid }) { return (ladder, variant) }
            }
        } catch {
            throw .storeUnavailable("the store cannot be reached: \(error)")
        }
        throw .notFound("\(guid) is not provisioned in node group \(group) (provision it with POST /as/v1/streams/provision/\(group))")
    }

    /// `GET /as/v1/streams/stream/{group}/publish/{guid}`: the node the top variant's publisher
    /// should push to. The node already serving the stream keeps it (a publisher coming back
    /// resumes its job there); otherwise the in-service node with the most room for the ladder.
    ///
    /// Node requests are open (the seed's clients send no credentials). A placement asked with the
    /// admin's bearer token (`holdsRoom`: a stream manager dispatching a job) holds the ladder's
    /// cores on its node for `reservationLifetime`, so jobs dispatched at once spread over the
    /// fleet. An anonymous one holds no room: it names the node and routes a repeated ask there,
    /// but it can never make the fleet look full to other streams (the chosen node still refuses,
    /// at publish, a job it cannot run). `client` (the asking address) may make only so many new
    /// placements (`placementThrottle`); asking again for a stream placed or live costs nothing.
    public func publishNode(group: String, streamGuid guid: String, client: String, holdsRoom: Bool = false) async throws(NodeRequestFailure) -> NodeAnswer {
        let (ladder, variant) = try await provisioned(guid, group: group)
        if let variant, variant.level != ladder.top.level {
            throw .badRequest("\(guid) is made by the transcoder: publish the top variant, \(ladder.top.streamGuid)")
        }
        let nodes: [NodeRecord], placements: [Placement]
        do {
            nodes = try await fleetNodes()
            placements = try await store.placements()
        } catch {
            throw .storeUnavailable("the store cannot be reached: \(error)")
        }
        let groupNodes = nodes.filter { $0.nodeGroup == group }
        if let serving = PlacementPolicy.serving(ladder.streamGuid, nodes: groupNodes, placements: placements) {
            return NodeAnswer(streamGuid: ladder.top.streamGuid, role: "transcoder", node: serving)
        }
        if let wait = placementThrottle.retryAfter(client, now: configuration.clock.seconds) {
            throw .tooManyPlacements("\(client) has reserved room for too many streams of late; try again in \(wait) s", retryAfter: wait)
        }
        let cores = capacity.estimatedCores(ladder)
        guard let chosen = PlacementPolicy.rank(needing: cores, group: group, nodes: nodes, placements: placements).first else {
            let alive = groupNodes.filter { PlacementPolicy.isAlive($0) }
            let inService = alive.filter { $0.state == .inService }.count
            throw .noRoom(String(format: "no node of group %@ has room for %@ (about %.2f cores): %d node(s) alive, %d in service",
                                 group, ladder.streamGuid, cores, alive.count, inService), retryAfter: 5)
        }
        do {
            try await store.place(Placement(streamGuid: ladder.streamGuid, nodeId: chosen.nodeId, cores: holdsRoom ? cores : 0))
        } catch {
            throw .storeUnavailable("the store cannot be reached: \(error)")
        }
        placementThrottle.record(client, now: configuration.clock.seconds)
        return NodeAnswer(streamGuid: ladder.top.streamGuid, role: "transcoder", node: chosen)
    }

    /// `GET /as/v1/streams/stream/{group}/subscribe/{guid}`: the node that plays the variant out.
    public func subscribeNode(group: String, streamGuid guid: String) async throws(NodeRequestFailure) -> NodeAnswer {
        let (ladder, variant) = try await provisioned(guid, group: group)
        let nodes: [NodeRecord], placements: [Placement]
        do {
            nodes = try await fleetNodes().filter { $0.nodeGroup == group }
            placements = try await store.placements()
        } catch {
            throw .storeUnavailable("the store cannot be reached: \(error)")
        }
        guard let serving = PlacementPolicy.serving(ladder.streamGuid, nodes: nodes, placements: placements) else {
            throw .notFound("\(ladder.streamGuid) is not live on any node of group \(group): its publisher has not started")
        }
        return NodeAnswer(streamGuid: (variant ?? ladder.top).streamGuid, role: "edge", node: serving)
    }
}

/// Stream names as node requests take them: `app/stream` paths of plain characters.
enum StreamName {
    static func isValid(_ name: String) -> Bool {
        guard (1...255).contains(name.utf8.count) else { return false }
        let parts = name.split(separator: "/", omittingEmptySubsequences: false)
        return parts.allSatisfy { part in
            !part.isEmpty && part != "." && part != ".." && part.unicodeScalars.allSatisfy {
                ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || "._-".unicodeScalars.contains($0)
            }
        }
    }
}
