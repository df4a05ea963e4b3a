import DequeModule
/// A link's bandwidth over time, as measured second by second (the sabre/HSDPA trace format: a
/// JSON array of `{"duration_ms", "bandwidth_kbps", "latency_ms"}`).
public struct BandwidthTrace: Sendable, Equatable {
    public struct Interval: Sendable, Equatable {
        public var seconds: Double
        /// bit/s; an outage (0) is kept as 0.
        public var bitRate: Double

        public init(seconds: Double, bitRate: Double) {
            self.seconds = seconds
            self.bitRate = bitRate
        }
    }

    public var intervals: [Interval]

    public init(intervals: [Interval]) {
        self.intervals = intervals.filter { $0.seconds > 0 }
    }

    public struct ParseError: Error, Sendable, CustomStringConvertible {
        public var description: String
    }

    /// Reads the JSON format; says which entry is wrong and why.
    public static func parse(_ bytes: some Sequence<UInt8>) throws(ParseError) -> BandwidthTrace {
        let document: JSONValue
        do {
            document = try JSONReader.parse(bytes)
        } catch {
            throw ParseError(description: error.description)
        }
        guard case let .array(entries) = document else { throw ParseError(description: "a trace is a JSON array (got \(document.typeName))") }
        var intervals: [Interval] = []
        for (index, entry) in entries.enumerated() {
            func number(_ key: String) throws(ParseError) -> Double {
                switch entry[key] {
                case let .integer(value)?: return Double(value)
                case let .number(value)?: return value
                default: throw ParseError(description: "$[\(index)].\(key): expected a number (got \(entry[key]?.typeName ?? "nothing"))")
                }
            }
            let milliseconds = try number("duration_ms"), kbps = try number("bandwidth_kbps")
            guard milliseconds.isFinite, milliseconds >= 0, milliseconds <= 3_600_000 else {
                throw ParseError(description: "$[\(index)].duration_ms: must be 0 to 3600000 (got \(milliseconds))")
            }
            guard kbps.isFinite, kbps >= 0, kbps <= 100_000_000 else {
                throw ParseError(description: "$[\(index)].bandwidth_kbps: must be 0 to 1e8 (got \(kbps))")
            }
            intervals.append(Interval(seconds: milliseconds / 1000, bitRate: kbps * 1000))
        }
        let trace = BandwidthTrace(intervals: intervals)
        guard trace.duration > 0 else { throw ParseError(description: "the trace is empty") }
        return trace
    }

    public var duration: Double { intervals.reduce(0) { $0 + $1.seconds } }

    /// The bit rate at `time` seconds (the trace repeats past its end).
    public func bitRate(at time: Double) -> Double {
        bitRate(at: time, duration: duration)
    }

    /// The bit rate at each time, the trace's length summed once: summed at every time, it was a
    /// quarter of a replay's work (a 120-s window read at 12,000 steps).
    public func bitRates(at times: some Sequence<Double>) -> [Double] {
        let total = duration
        return times.map { bitRate(at: $0, duration: total) }
    }

    private func bitRate(at time: Double, duration total: Double) -> Double {
        guard total > 0 else { return 0 }
        var offset = time.truncatingRemainder(dividingBy: total)
        if offset < 0 { offset += total }
        for interval in intervals {
            if offset < interval.seconds { return interval.bitRate }
            offset -= interval.seconds
        }
        return intervals.last?.bitRate ?? 0
    }

    /// `length` seconds of the trace from `start`, as a trace of its own.
    public func window(from start: Double, length: Double, step: Double = 1) -> BandwidthTrace {
        let offsets = Array(stride(from: 0.0, to: length, by: step))
        return BandwidthTrace(intervals: zip(offsets, bitRates(at: offsets.lazy.map { start + $0 })).map { Interval(seconds: min(step, length - $0), bitRate: $1) })
    }
}

/// How a link between the node and a player carries data, beyond its rate: what a real shaper
/// and a real bottleneck do that a smooth model hides.
public struct LinkModel: Sendable, Equatable, CustomStringConvertible {
    /// Bytes the shaper lets through at once after a quiet spell (a token bucket: htb's `burst`,
    /// a cellular scheduler's grant); 0 for a smooth link.
    public var burstBytes: Double
    /// Bytes the bottleneck's queue holds (its packets × 1500). What the node has sent waits
    /// there out of its reach: a skip or a flush cannot take it back.
    public var queueBytes: Double

    public init(burstBytes: Double = 0, queueBytes: Double = 100 * 1500) {
        self.burstBytes = max(0, burstBytes)
        self.queueBytes = max(1500, queueBytes)
    }

    public static let smooth = LinkModel()

    /// The models the edge benchmark and the policy's tests run under: bursts from one packet to
    /// 64 KB, queues from 10 to 1000 packets.
    public static let variety: [LinkModel] = [
        LinkModel(burstBytes: 1500, queueBytes: 100 * 1500),
        LinkModel(burstBytes: 16 * 1024, queueBytes: 100 * 1500),
        LinkModel(burstBytes: 64 * 1024, queueBytes: 100 * 1500),
        LinkModel(burstBytes: 16 * 1024, queueBytes: 10 * 1500),
        LinkModel(burstBytes: 16 * 1024, queueBytes: 1000 * 1500),
    ]

    public var description: String { "burst \(Int(burstBytes / 1024)) KB, queue \(Int(queueBytes / 1500)) packets" }
}

extension BandwidthTrace {
    /// The mean rate over the trace, bit/s.
    public var meanBitRate: Double {
        let total = duration
        return total > 0 ? intervals.reduce(0) { $0 + $1.bitRate * $1.seconds } / total : 0
    }

    /// The same trace with every rate multiplied so its mean is `mean`: its dips go as far below
    /// the mean as they did before, in proportion.
    public func scaled(toMean mean: Double) -> BandwidthTrace {
        let current = meanBitRate
        guard current > 0, mean > 0 else { return self }
        return BandwidthTrace(intervals: intervals.map { Interval(seconds: $0.seconds, bitRate: $0.bitRate * mean / current) })
    }
}

/// Replays a bandwidth trace through a `SwitchingPolicy` for one player of a ladder, in steps of
/// simulated time: what the player would have been sent, received, shown and missed, against an
/// oracle that knows the link's next seconds. The same model serves the policy's tests and
/// `abr-worker simulate`.
///
/// The model, as the node's TCP players run: the node queues the current rung's media (and a
/// probe's padding) in its own queue, and hands it to the network while what is outstanding
/// stays under `LinkEstimator.outstandingLimit`; the network holds it in the bottleneck's queue
/// (`LinkModel.queueBytes`) and delivers at the trace's rate, a burst at a time after a quiet
/// spell (`LinkModel.burstBytes`). Every `sampleInterval` the transport's view (bytes delivered,
/// whether data waited, the age of the oldest media not delivered, a per-step rate sample that
/// bursts inflate, as TCP's `delivery_rate` is) goes through the same `LinkEstimator` as a live
/// player's. A switch takes effect at the next keyframe; a flush or a skip empties the node's
/// queue only. The player plays media as it arrives after a start-up buffer; when nothing is left
/// to play it freezes.
public struct TraceReplay: Sendable {
    public struct Outcome: Sendable, Equatable {
        public var seconds = 0.0
        /// Media bits the player received.
        public var deliveredBits = 0.0
        /// Media bits an oracle knowing the next `oracleHorizon` seconds would have had sent.
        public var oracleBits = 0.0
        public var freezeSeconds = 0.0
        /// Seconds in which the link could not carry even the lowest rung.
        public var starvedSeconds = 0.0
        public var switchesUp = 0
        public var switchesDown = 0
        public var skips = 0
        public var probes = 0
        /// The longest any media waited to reach the player, in seconds, outside the link's
        /// outages (from a second after the link carries the lowest rung again).
        public var maximumLag = 0.0
        /// Seconds spent on each level.
        public var secondsPerLevel: [Int: Double] = [:]
        /// The policy's decisions with their reasons, for a test's message.
        public var log: [String] = []

        public var deliveredBitRate: Double { seconds > 0 ? deliveredBits / seconds : 0 }
        public var oracleBitRate: Double { seconds > 0 ? oracleBits / seconds : 0 }
        /// Delivered over the oracle's, 0 to 1 (and more where the oracle was too careful).
        public var oracleShare: Double { oracleBits > 0 ? deliveredBits / oracleBits : 1 }
        /// Freezes beyond the seconds the link could not carry the lowest rung.
        public var avoidableFreezeSeconds: Double { max(0, freezeSeconds - starvedSeconds) }
    }

    /// One moment of a replay, for tests that look at reaction times.
    public struct Moment: Sendable, Equatable {
        public var time: Double
        public var linkBitRate: Double
        public var level: Int
        public var lagSeconds: Double
        /// The player had nothing to show in this step.
        public var frozen = false
    }

    public var step = 0.05
    /// How often the transport is read and the policy asked (a TCP player's is 0.5 s).
    public var sampleInterval = 0.5
    /// How often while a probe runs (a live player's is 0.1 s: its probe's slices).
    public var probeSampleInterval = 0.1
    public var keyframeInterval = 2.0
    public var oracleHorizon = 3.0
    /// Media the player buffers before it starts playing, seconds (the edge benchmark's player
    /// waits for a second, as most players wait for at least that).
    public var startupBuffer = 1.0
    public var link = LinkModel.smooth

    public init(link: LinkModel = .smooth) {
        self.link = link
    }

    /// Data on its way to the player: media (with the rate it was encoded at) or padding.
    private struct Chunk {
        var bits: Double
        /// 0 for padding.
        var rate: Double
        var enqueuedAt: Double
    }

    /// Replays `trace` from its start for `seconds` (default: its whole length).
    public func run(_ trace: BandwidthTrace, policy: SwitchingPolicy, seconds: Double? = nil,
                    moments: ((Moment) -> Void)? = nil) -> Outcome {
        var policy = policy
        var estimator = LinkEstimator()
        let rungs = policy.rungs
        guard !rungs.isEmpty else { return Outcome() }
        let length = seconds ?? trace.duration
        var outcome = Outcome()
        var level = policy.level
        var pendingLevel: Int?
        /// The node's queue (which a flush empties) and the bottleneck's (which nothing empties).
        var sender = Deque<Chunk>(), network = Deque<Chunk>()
        var networkBits = 0.0
        var tokens = link.burstBytes * 8
        var probeRate: Double?, probeUntil = 0.0
        /// A flushing switch sends nothing until the target's keyframe.
        var paused = false
        var playable = 0.0, playing = false
        var time = 0.0, nextSample = sampleInterval
        var deliveredBytes = 0.0
        var rateSample: Double?, rateSampleAppLimited = true
        var lastStarved = -Double.infinity
        func rate(_ level: Int) -> Double {
            (rungs.first { $0.level == level } ?? rungs.last!).bitRate(at: time, segmentDuration: keyframeInterval)
        }
        // As the node's outbox reads it: the oldest media it still holds, or the oldest bytes it
        // wrote that have not arrived, padding included (a socket is one queue: media written
        // after a probe's padding waits behind it).
        func age() -> Double {
            let oldest = [sender.first { $0.rate > 0 }, network.first].compactMap { $0?.enqueuedAt }.min()
            return oldest.map { time - $0 } ?? 0
        }
        let steps = Int((length / step).rounded(.up))
        // The link's rate at every step, and as far ahead as the oracle looks.
        let horizonSteps = max(1, Int((oracleHorizon / step).rounded()))
        let linkRates = trace.bitRates(at: (0..<(steps + horizonSteps)).lazy.map { Double($0) * step })
        let oracleStride = max(1, Int((0.25 / step).rounded()))
        for index in 0..<steps {
            time = Double(index) * step
            let linkRate = linkRates[index]
            // A switch waits for the target's next keyframe.
            let intoGOP = time.truncatingRemainder(dividingBy: keyframeInterval)
            if let pending = pendingLevel, intoGOP < step / 2 || keyframeInterval - intoGOP < step / 2 {
                level = pending
                pendingLevel = nil
                paused = false
            }
            let mediaRate = rate(level)
            if !paused { sender.append(Chunk(bits: mediaRate * step, rate: mediaRate, enqueuedAt: time)) }
            if let probe = probeRate, time < probeUntil {
                sender.append(Chunk(bits: max(0, probe - mediaRate) * step, rate: 0, enqueuedAt: time))
            } else {
                probeRate = nil
            }
            // Into the network while the node's limit on what is outstanding and the bottleneck's queue allow.
            let limit = min(link.queueBytes, Double(LinkEstimator.outstandingLimit(
                receivedBitRate: estimator.receivedRate(over: 2), sendingBitRate: max(mediaRate, probeRate ?? 0), probing: probeRate != nil))) * 8
            // Media first: padding goes only when no media waits (as the node's outbox sends).
            while networkBits < limit, let index = sender.firstIndex(where: { $0.rate > 0 }) ?? (sender.isEmpty ? nil : 0) {
                var chunk = sender[index]
                let taken = min(chunk.bits, limit - networkBits)
                chunk.bits = taken
                network.append(chunk)
                networkBits += taken
                sender[index].bits -= taken
                if sender[index].bits <= 1e-9 { sender.remove(at: index) }
            }
            // The link: its rate, and a burst of what the bucket saved while it had nothing to carry.
            var capacity = linkRate * step + tokens
            var deliveredMedia = 0.0, deliveredSeconds = 0.0, deliveredAll = 0.0
            while capacity > 1e-9, !network.isEmpty {
                let taken = min(capacity, network[0].bits)
                if network[0].rate > 0 {
                    deliveredMedia += taken
                    deliveredSeconds += taken / network[0].rate
                }
                deliveredAll += taken
                capacity -= taken
                networkBits -= taken
                network[0].bits -= taken
                if network[0].bits <= 1e-9 { network.removeFirst() }
            }
            networkBits = max(0, networkBits)
            // What the link could have carried and did not is saved, up to the bucket's size.
            tokens = min(link.burstBytes * 8, max(0, capacity))
            deliveredBytes += deliveredAll / 8
            let waiting = !sender.isEmpty || networkBits > linkRate * step
            // TCP's per-acknowledgement rate sample: a step's delivery, bursts and all.
            if deliveredAll > 0 {
                rateSample = deliveredAll / step
                rateSampleAppLimited = !waiting
            }

            outcome.deliveredBits += deliveredMedia
            playable += deliveredSeconds
            if !playing, playable >= startupBuffer { playing = true }
            var frozen = false
            if playing {
                if playable >= step {
                    playable -= step
                } else {
                    outcome.freezeSeconds += step - playable
                    playable = 0
                    frozen = true
                }
            }
            if linkRate < Double(rungs.last!.bitRate) { outcome.starvedSeconds += step }
            let lag = age()
            // While the link carries nothing, what the node already sent waits in its queues and
            // ages by the second, whatever a sender does: lag counts from a second after the link
            // carries the lowest rung again.
            if linkRate < Double(rungs.last!.bitRate) { lastStarved = time }
            if time - lastStarved > 1 { outcome.maximumLag = max(outcome.maximumLag, lag) }
            outcome.secondsPerLevel[level, default: 0] += step
            let least = stride(from: index, to: index + horizonSteps, by: oracleStride).reduce(Double.infinity) { min($0, linkRates[$1]) }
            outcome.oracleBits += oracleRate(least: least, link: linkRate, at: time, rungs: rungs) * step
            moments?(Moment(time: time, linkBitRate: linkRate, level: pendingLevel ?? level, lagSeconds: lag, frozen: frozen))

            guard time + step >= nextSample - 1e-9 else { continue }
            // A probe is watched closely: the sooner a queue is seen building, the less it delays the media.
            nextSample += policy.isProbing ? probeSampleInterval : sampleInterval
            let now = time + step
            let sample = estimator.observe(LinkObservation(time: now, deliveredBytes: UInt64(deliveredBytes), senderWaiting: waiting,
                                                           backlogSeconds: lag, rateSample: rateSample,
                                                           rateSampleAppLimited: rateSampleAppLimited))
            let decision = policy.observe(sample)
            if probeRate != nil, !policy.isProbing {
                // The probe ended (a queue began to build): its padding still waiting goes with it.
                probeRate = nil
                sender.removeAll { $0.rate == 0 }
            }
            switch decision {
            case .stay:
                break
            case let .switchTo(target, flushes, reason):
                if target < (pendingLevel ?? level) { outcome.switchesUp += 1 } else { outcome.switchesDown += 1 }
                outcome.log.append("\(format(now)) s: \(level) → \(target) (\(reason))")
                pendingLevel = target
                if flushes {
                    sender.removeAll()
                    paused = true
                }
            case let .probe(bitRate):
                outcome.probes += 1
                probeRate = Double(bitRate)
                probeUntil = now + policy.probeDuration
            case .skipToLiveEdge:
                outcome.skips += 1
                outcome.log.append("\(format(now)) s: skip on \(level), \(format(lag)) s behind")
                sender.removeAll()
                // The rung's next keyframe: nothing is sent until then.
                pendingLevel = pendingLevel ?? level
                paused = true
            }
        }
        outcome.seconds = Double(steps) * step
        return outcome
    }

    private func format(_ value: Double) -> String { String((value * 10).rounded() / 10) }

    /// What an oracle receives at `time`: the highest rung the link carries over the next horizon
    /// (`least`: the link's lowest rate over it).
    func oracleRate(least: Double, link: Double, at time: Double, rungs: [SwitchingPolicy.Rung]) -> Double {
        let rates = rungs.map { $0.bitRate(at: time, segmentDuration: keyframeInterval) }
        // Where nothing fits, the oracle too sends the lowest rung, and gets what the link carries of it.
        return rates.first { $0 <= least } ?? min(rates.last ?? 0, link)
    }
}
