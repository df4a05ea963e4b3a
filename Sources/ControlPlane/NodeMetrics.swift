import Foundation
import Prometheus
import RTSPServer
import Store
import Transcoder
import WebRTCServer

/// The node's Prometheus exposition. Figures are read from the jobs at scrape time, so the
/// media path does no metrics work per frame. Labels stay bounded: per ABR level (1–10) and job
/// state, never per stream id — a fleet's stream count would explode the series.
public final class NodeMetrics: Sendable {
    public let registry: PrometheusCollectorRegistry
    private let levels = 1...10

    public init(registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry()) {
        self.registry = registry
        // Exported from the start at 0: a dashboard's rate() has a series before the first move.
        for direction in ["up", "down"] { switchCounter(direction) }
    }

    @discardableResult
    private func switchCounter(_ direction: String) -> Counter {
        registry.makeCounter(name: "abr_worker_player_switches_total", labels: [("direction", direction == "up" ? "up" : "down")],
                             help: "Moves of adaptive players between rungs, by direction.")
    }

    private func gauge(_ name: String, _ help: String, _ labels: [(String, String)] = []) -> Gauge {
        registry.makeGauge(name: name, labels: labels, help: help)
    }

    /// A player moved between rungs ("down" or "up"): counted as it happens.
    public func countPlayerSwitch(direction: String) {
        switchCounter(direction).increment()
    }

    /// The fleet as this node's last heartbeat read the shared registry: its group's live nodes by state.
    public func recordFleet(_ nodes: [NodeRecord], group: String) {
        let alive = nodes.filter { $0.nodeGroup == group && PlacementPolicy.isAlive($0) }
        for state in NodeState.allCases {
            gauge("abr_worker_fleet_nodes", "Live nodes of this node's group in the shared registry, by state.", [("state", state.rawValue)])
                .set(to: Double(alive.filter { $0.state == state }.count))
        }
    }

    /// Refreshes every gauge, then renders the registry (including whatever else reports into it).
    public func exposition(statuses: [LiveLadderJob.Status], capacity: CapacityMonitor.Snapshot, provisions: Int, nodeState: NodeState = .inService,
                           registryOfStreams: StreamRegistry, sseListeners: Int,
                           publishProtocols: [String] = ["rtsp"], webrtcViewers: [WebRTCViewer.Status] = []) -> String {
        for state in NodeState.allCases {
            gauge("abr_worker_node_state", "1 for the node's service state (INSERVICE, SOFT_SUNSET, HARD_SUNSET), 0 for the others.",
                  [("state", state.rawValue)]).set(to: state == nodeState ? 1 : 0)
        }
        for state in ["waitingForPublisher", "running", "interrupted", "ended", "failed"] {
            gauge("abr_worker_jobs", "Live ladder jobs by state.", [("state", state)])
                .set(to: Double(statuses.filter { $0.state.rawValue == state }.count))
        }
        gauge("abr_worker_provisions", "Provisioned streams.").set(to: Double(provisions))
        gauge("abr_worker_publishers", "Publishers currently sending a top variant.").set(to: Double(statuses.filter { $0.publisher != nil }.count))
        for transport in publishProtocols {
            gauge("abr_worker_publishers_by_protocol", "Publishers currently sending a top variant, by the protocol they publish with.",
                  [("protocol", transport)]).set(to: Double(statuses.filter { $0.publisher != nil && $0.publisherProtocol == transport }.count))
        }
        gauge("abr_worker_ingest_dropped_frames", "Frames dropped at ingest, summed over current jobs.")
            .set(to: Double(statuses.reduce(0) { $0 + $1.droppedAtIngest }))
        gauge("abr_worker_notifications_refused", "Publisher notifications not recorded (unknown names, over the rate limit), summed over current jobs.")
            .set(to: Double(statuses.reduce(0) { $0 + $1.notificationsRefused }))
        gauge("abr_worker_encode_cores", "Cores busy scaling and encoding, measured.").set(to: capacity.encodeCores)
        gauge("abr_worker_encode_load_ratio", "Fraction of the node's real-time encode capacity in use.").set(to: capacity.encodeLoad)
        gauge("abr_worker_accepts_jobs", "1 when the node has room for another job.").set(to: capacity.acceptsJob ? 1 : 0)
        gauge("abr_worker_sse_listeners", "Open Server-Sent-Event streams.").set(to: Double(sseListeners))
        if let usage = ProcessUsage.current() {
            gauge("abr_worker_process_cpu_seconds", "CPU time the node's process has used, user and system (take its rate for cores).")
                .set(to: usage.cpuSeconds)
            gauge("abr_worker_process_resident_bytes", "The node's resident memory.").set(to: Double(usage.residentBytes))
        }
        for phase in ["ice", "dtls", "playing"] {
            gauge("abr_worker_webrtc_viewers", "WHEP sessions by phase (ICE, DTLS, playing).", [("phase", phase)])
                .set(to: Double(webrtcViewers.filter { $0.state == phase }.count))
        }
        gauge("abr_worker_webrtc_nacked_packets", "Packets current WebRTC viewers reported lost (NACK), summed.")
            .set(to: Double(webrtcViewers.reduce(0) { $0 + $1.nacks }))
        gauge("abr_worker_webrtc_retransmitted_packets", "Packets resent to current WebRTC viewers, summed.")
            .set(to: Double(webrtcViewers.reduce(0) { $0 + $1.retransmissions }))

        for level in levels {
            let variants = statuses.filter { $0.state == .running || $0.state == .interrupted }.flatMap(\.variants).filter { $0.abrLevel == level }
            let all = statuses.flatMap(\.variants).filter { $0.abrLevel == level }
            let label = [("level", String(level))]
            gauge("abr_worker_variant_frames_out", "Frames sent by current jobs' variants at this level.", label)
                .set(to: Double(all.reduce(0) { $0 + $1.framesOut }))
            gauge("abr_worker_variant_dropped_frames", "Frames dropped by current jobs' variants at this level (encoder behind).", label)
                .set(to: Double(all.reduce(0) { $0 + $1.droppedFrames }))
            gauge("abr_worker_variant_dropped_audio_packets", "Audio packets dropped by current jobs' variants at this level (queue behind).", label)
                .set(to: Double(all.reduce(0) { $0 + $1.droppedAudioPackets }))
            gauge("abr_worker_variant_shed", "Rungs at this level the node stopped encoding because it is over capacity.", label)
                .set(to: Double(variants.filter(\.shed).count))
            gauge("abr_worker_variant_shed_frames", "Frames not encoded at this level while rungs were shed, summed over current jobs.", label)
                .set(to: Double(all.reduce(0) { $0 + $1.shedFrames }))
            gauge("abr_worker_variant_segment_write_failures", "HLS files at this level that could not be written (disk full) and were skipped, summed over current jobs.", label)
                .set(to: Double(all.reduce(0) { $0 + $1.segmentWriteFailures }))
            gauge("abr_worker_variant_bitrate_bps", "Measured average bit rate, summed over live variants at this level.", label)
                .set(to: Double(variants.reduce(0) { $0 + $1.averageBitRate }))
            gauge("abr_worker_variant_latency_p99_ms", "Worst p99 added latency among live variants at this level.", label)
                .set(to: variants.compactMap(\.latencyP99).max() ?? 0)
            gauge("abr_worker_players", "Players (RTSP and WebRTC) of variants at this level.", label)
                .set(to: Double(all.reduce(0) { $0 + (registryOfStreams.existingStream($1.streamGuid)?.playerCount ?? 0) }))
        }
        return registry.emitToString()
    }
}
