import Foundation

/// A private network namespace for one test, with its loopback shaped by `tc`: a node, its
/// publisher and its players run inside (`run`, `launcher`), so their traffic stays on that
/// namespace's 127.0.0.1 and the host's loopback is untouched. Needs root (CI runs as root).
///
/// The loopback gets an HTB root whose default class is unlimited; `shape` adds a class per
/// flow to slow down, matched on ports with u32 filters. The MTU is set to Ethernet's so that
/// packets, and so HTB's pacing, are what a real link sees rather than 64 KiB loopback frames.
public final class NetworkNamespace: @unchecked Sendable {
    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    public let name: String
    private var nextClass = 20

    public init() throws {
        guard getuid() == 0 else { throw Failure(description: "shaping a namespace's loopback needs root (ip netns, tc)") }
        name = "abr-test-\(UUID().uuidString.prefix(8).lowercased())"
        try Self.ip(["netns", "add", name])
        do {
            try Self.ip(["-n", name, "link", "set", "lo", "mtu", "1500", "up"])
            try tc(["qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb", "default", "10", "r2q", "1000"])
            try tc(["class", "add", "dev", "lo", "parent", "1:", "classid", "1:10", "htb", "rate", "10gbit"])
        } catch {
            try? Self.ip(["netns", "del", name])
            throw error
        }
    }

    deinit {
        // Whatever still runs inside (a browser's helpers outlive the script that started them)
        // would run on, unseen, once the namespace is gone.
        if let pids = try? runProcess("/usr/sbin/ip", ["netns", "pids", name], timeout: 10) {
            for pid in pids.stdout.split(whereSeparator: \.isNewline).compactMap({ Int32($0) }) { kill(pid, SIGKILL) }
        }
        try? Self.ip(["netns", "del", name])
    }

    /// Gives the namespace a network beside its loopback (a veth pair, both ends inside, and a
    /// default route over it): Chromium gathers no ICE candidates, not even loopback ones, on a
    /// host whose only interface is loopback. Traffic to 127.0.0.1 stays on the shaped loopback.
    public func addNetwork() throws {
        try Self.ip(["-n", name, "link", "add", "abr-v0", "type", "veth", "peer", "name", "abr-v1"])
        try Self.ip(["-n", name, "addr", "add", "10.77.0.1/24", "dev", "abr-v0"])
        try Self.ip(["-n", name, "addr", "add", "10.77.0.2/24", "dev", "abr-v1"])
        try Self.ip(["-n", name, "link", "set", "abr-v0", "up"])
        try Self.ip(["-n", name, "link", "set", "abr-v1", "up"])
        try Self.ip(["-n", name, "route", "add", "default", "via", "10.77.0.2", "dev", "abr-v0"])
    }

    /// What runs a command inside: `ip netns exec <name>`.
    public var launcher: [String] { ["/usr/sbin/ip", "netns", "exec", name] }

    /// A shaped class for traffic matching `filter` (u32 match words, e.g. `["ip", "sport", "554", "0xffff"]`
    /// repeated), at `kilobits` per second, with a queue of `queuePackets` (tail drop beyond it);
    /// returns its class id for `setRate`.
    @discardableResult
    public func shape(matching filters: [[String]], kilobits: Int, queuePackets: Int = 1000) throws -> String {
        let id = "1:\(nextClass)"
        nextClass += 10
        try tc(["class", "add", "dev", "lo", "parent", "1:", "classid", id, "htb", "rate", "\(kilobits)kbit", "ceil", "\(kilobits)kbit"])
        // The queue counts packets as a router on the path would. The kernel hands a qdisc a
        // segmented send (UDP GSO, TCP TSO) as one packet; a token bucket far faster than any
        // link cuts those into their packets (tbf segments what exceeds its burst) before the pfifo.
        try tc(["qdisc", "add", "dev", "lo", "parent", id, "handle", "\(splitterHandle(id)):", "tbf", "rate", "10gbit", "burst", "1600", "limit", "100000"])
        try tc(["qdisc", "add", "dev", "lo", "parent", "\(splitterHandle(id)):1", "pfifo", "limit", "\(queuePackets)"])
        let matches = filters.flatMap { ["match"] + $0 }
        try tc(["filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio", "1", "u32"] + matches + ["flowid", id])
        return id
    }

    /// Changes a shaped class's rate (a trace's next second, a step).
    public func setRate(_ id: String, kilobits: Int) throws {
        try tc(["class", "change", "dev", "lo", "parent", "1:", "classid", id, "htb", "rate", "\(kilobits)kbit", "ceil", "\(kilobits)kbit"])
    }

    /// Changes a shaped class's queue: a short one drops what does not fit (a lossy link).
    public func setQueue(_ id: String, packets: Int) throws {
        try tc(["qdisc", "replace", "dev", "lo", "parent", "\(splitterHandle(id)):1", "pfifo", "limit", "\(packets)"])
    }

    /// The handle of the packet splitter under class `1:N`: N again (hexadecimal, as tc reads handles).
    private func splitterHandle(_ id: String) -> String { String(id.dropFirst(2)) }

    /// Runs `command` inside and waits for it.
    public func run(_ command: [String], timeout: TimeInterval = 60) throws -> ProcessResult {
        try runProcess(launcher[0], Array(launcher.dropFirst()) + command, timeout: timeout)
    }

    private func tc(_ arguments: [String]) throws {
        let result = try runProcess("/usr/sbin/tc", ["-n", name] + arguments, timeout: 10)
        guard result.status == 0 else { throw Failure(description: "tc \(arguments.joined(separator: " ")): \(result.stderr)") }
    }

    private static func ip(_ arguments: [String]) throws {
        let result = try runProcess("/usr/sbin/ip", arguments, timeout: 10)
        guard result.status == 0 else { throw Failure(description: "ip \(arguments.joined(separator: " ")): \(result.stderr)") }
    }
}
