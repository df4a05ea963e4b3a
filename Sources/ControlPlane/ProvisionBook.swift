import Foundation
import LiveNode
import MediaCore
import Store

/// Accepted provisions: validated, stored, then handed to the live node — in that order, so
/// what the API confirmed is stored, and what is stored comes back after a restart. In a fleet
/// every node provisions what any node stored (`synchronize`).
public final class ProvisionBook: Sendable {
    public enum Failure: Error, Sendable, Equatable {
        /// Every problem with its JSON path (`$[0].streams[1].videoParams.videoBitRate`).
        case invalid([ProvisionProblem])
        case alreadyProvisioned([String])
        case notFound(String)
    }

    public static let maximumBatch = 100
    public static let sm1NodeGroup = "streammanager1"

    public let store: any NodeStore
    public let node: LiveNode

    public init(store: any NodeStore, node: LiveNode) {
        self.store = store
        self.node = node
    }

    /// Node groups name a fleet's region or role: letters, digits, `.`, `_`, `-`.
    public static func isValidNodeGroup(_ name: some StringProtocol) -> Bool {
        (1...64).contains(name.count) && name.unicodeScalars.allSatisfy { ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || "._-".unicodeScalars.contains($0) }
    }

    /// Stream Manager 2.0: the body is an array of provisions; all are accepted or none.
    public func add(streamManager2 body: [UInt8], nodeGroup: String) async throws(Failure) -> [StoredProvision] {
        let document = try Self.json(body)
        guard case let .array(elements) = document else {
            throw .invalid([ProvisionProblem(path: "$", message: "expected an array of provisions (got \(document.shortDescription))")])
        }
        guard (1...Self.maximumBatch).contains(elements.count) else {
            throw .invalid([ProvisionProblem(path: "$", message: "expected 1 to \(Self.maximumBatch) provisions (got \(elements.count))")])
        }
        var problems: [ProvisionProblem] = []
        var accepted: [(ladder: Ladder, document: JSONValue)] = []
        var firstIndex: [String: Int] = [:]
        for (index, element) in elements.enumerated() {
            do {
                let ladder = try ProvisionParser.parseStreamManager2(element, path: "$[\(index)]")
                if let earlier = firstIndex[ladder.streamGuid] {
                    problems.append(ProvisionProblem(path: "$[\(index)]", message: "\(ladder.streamGuid) is already provisioned by $[\(earlier)] of this request"))
                } else {
                    firstIndex[ladder.streamGuid] = index
                    accepted.append((ladder, element))
                }
            } catch {
                problems += error.problems
            }
        }
        guard problems.isEmpty else { throw .invalid(problems) }
        let now = Date().timeIntervalSince1970
        return try await commit(accepted.map { ($0.ladder, StoredProvision(
            streamGuid: $0.ladder.streamGuid, nodeGroup: nodeGroup, format: .streamManager2, document: $0.document.jsonText, createdAt: now)) })
    }

    /// Stream Manager 1.0: a `meta` document for `app/stream`.
    public func add(streamManager1 body: [UInt8], streamGuid: String) async throws(Failure) -> StoredProvision {
        let ladder: Ladder
        let document = try Self.json(body)
        guard document["meta"] != nil else {
            throw .invalid([ProvisionProblem(path: "$.meta", message: "missing (a Stream Manager 1.0 provision is a meta document)")])
        }
        do {
            ladder = try ProvisionParser.parse(document, streamGuid: streamGuid)
        } catch {
            throw .invalid(error.problems)
        }
        let stored = StoredProvision(streamGuid: ladder.streamGuid, nodeGroup: Self.sm1NodeGroup, format: .streamManager1,
                                               document: document.jsonText, createdAt: Date().timeIntervalSince1970)
        return try await commit([(ladder, stored)])[0]
    }

    private static func json(_ body: [UInt8]) throws(Failure) -> JSONValue {
        do {
            return try JSONReader.parse(body)
        } catch {
            throw .invalid([ProvisionProblem(path: "$", message: "not JSON: \(error.description)")])
        }
    }

    /// The store's transaction decides between two requests for one guid, on one node or two.
    private func commit(_ batch: [(Ladder, StoredProvision)]) async throws(Failure) -> [StoredProvision] {
        let taken = batch.map(\.0.streamGuid).filter { node.ladder($0) != nil }
        guard taken.isEmpty else { throw .alreadyProvisioned(taken) }
        do {
            try await store.insert(batch.map(\.1))
        } catch let StoreFailure.alreadyStored(guids) {
            throw .alreadyProvisioned(guids)
        } catch {
            throw .invalid([ProvisionProblem(path: "$", message: "the store refused it: \(error)")])
        }
        for (ladder, stored) in batch { try? node.provision(Self.scoped(ladder, stored)) }
        return batch.map(\.1)
    }

    public func list(nodeGroup: String) async throws -> [StoredProvision] {
        try await store.provisions(nodeGroup: nodeGroup)
    }

    public func get(_ streamGuid: String, nodeGroup: String) async throws -> StoredProvision? {
        try await store.provision(streamGuid).flatMap { $0.nodeGroup == nodeGroup ? $0 : nil }
    }

    /// Deletes it from the store, then stops its job cleanly (playlists ended, players closed).
    /// Blocks while the job finishes its last segment: call it off the event loops.
    public func remove(_ streamGuid: String, nodeGroup: String) async throws -> StoredProvision {
        guard let stored = try await get(streamGuid, nodeGroup: nodeGroup), try await store.deleteProvision(streamGuid) else {
            throw Failure.notFound(streamGuid)
        }
        try? node.removeProvision(streamGuid)
        return stored
    }

    /// The ladder a stored provision describes.
    public static func ladder(_ stored: StoredProvision) throws -> Ladder {
        scoped(try ProvisionParser.parse(Array(stored.document.utf8), streamGuid: stored.format == .streamManager1 ? stored.streamGuid : nil),
               stored)
    }

    /// The ladder bound to its stored provision: its node group, and the time it was stored (what
    /// its playback tokens are bound to, so every node of the fleet computes the same).
    static func scoped(_ ladder: Ladder, _ stored: StoredProvision) -> Ladder {
        var ladder = ladder
        ladder.scope = ProvisionScope(nodeGroup: stored.nodeGroup, epoch: Int64((stored.createdAt * 1000).rounded()))
        return ladder
    }

    /// Makes the node's ladders what the store holds: provisions stored through another node are
    /// provisioned here, and those deleted elsewhere are removed (their jobs end cleanly).
    /// Returns the guids added and removed. Removal blocks like `remove`.
    @discardableResult
    public func synchronize() async throws -> (added: [String], removed: [String]) {
        // Read before the store: a ladder provisioned here after this point is stored already and
        // is never mistaken for one deleted elsewhere.
        let before = Set(node.ladders.map(\.streamGuid))
        let stored = try await store.provisions(nodeGroup: nil)
        var added: [String] = []
        for provision in stored where node.ladder(provision.streamGuid) == nil {
            guard let ladder = try? Self.ladder(provision) else { continue }
            if (try? node.provision(ladder)) != nil { added.append(ladder.streamGuid) }
        }
        let kept = Set(stored.map(\.streamGuid))
        let removed = before.subtracting(kept).sorted()
        for guid in removed { try? node.removeProvision(guid) }
        return (added, removed)
    }

    /// Hands every stored provision to the node (start-up). Returns the problems of those that
    /// no longer validate; they stay stored, untouched, for an operator to look at.
    public func restore() async throws -> (restored: [String], problems: [String]) {
        var restored: [String] = [], problems: [String] = []
        for stored in try await store.provisions(nodeGroup: nil) {
            do {
                let ladder = try Self.ladder(stored)
                try node.provision(ladder)
                restored.append(ladder.streamGuid)
            } catch let error as ProvisionError {
                problems.append("\(stored.streamGuid): \(error)")
            } catch {
                problems.append("\(stored.streamGuid): \(error)")
            }
        }
        return (restored, problems)
    }
}
