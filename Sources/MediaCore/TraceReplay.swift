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
        let total = duration
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
        BandwidthTrace(intervals: stride(from: 0.0, to: length, by: step).map { Interval(seconds: min(step, length - $0), bitRate: bitRate(at: start + $0)) })
    }
}

/// Replays a bandwidth trace through a `SwitchingPolicy` for one player of a ladder, in steps of
/// simulated time: what the player would have been sent, received, shown and missed, against an
/// oracle that knows the link's next seconds. The same model serves the policy's tests and
/// `abr-worker simulate`.
///
/// The model: the server sends the current rung's rate (plus a probe's padding while one runs)
/// into the player's queue; the link drains the queue at the trace's rate. The transport's
/// estimate is the link's rate while the queue is not empty (the sender is not the limit),
/// otherwise what was sent (app-limited). A switch takes effect at the next keyframe. The player
/// plays media as it arrives after a start-up buffer; when nothing is left to play it freezes.
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
        /// The most media queued for the player at once, in seconds.
        public var maximumLag = 0.0
        /// Seconds spent on each level.
        public var secondsPerLevel: [Int: Double] = [:]

        public var deliveredBitRate: Double { seconds > 0 ? deliveredBits / seconds : 0 }
        public var oracleBitRate: Double { seconds > 0 ? oracleBits / seconds : 0 }
        /// Delivered over the oracle's, 0 to 1 (and more where the oracle was too careful).
        public var oracleShare: Double { oracleBits > 0 ? deliveredBits / oracleBits : 1 }
    }

    /// One moment of a replay, for tests that look at reaction times.
    public struct Moment: Sendable, Equatable {
        public var time: Double
        public var linkBitRate: Double
        public var level: Int
        public var lagSeconds: Double
    }

    public var step = 0.25
    public var keyframeInterval = 2.0
    public var oracleHorizon = 3.0
    /// Media the player buffers before it starts playing (and after a skip), seconds.
    public var startupBuffer = 0.5

    public init() {}

    /// Replays `trace` from its start for `seconds` (default: its whole length).
    public func run(_ trace: BandwidthTrace, policy: SwitchingPolicy, seconds: Double? = nil,
                    moments: ((Moment) -> Void)? = nil) -> Outcome {
        var policy = policy
        let rungs = policy.rungs
        guard !rungs.isEmpty else { return Outcome() }
        let length = seconds ?? trace.duration
        var outcome = Outcome()
        var level = policy.level
        var pendingLevel: Int?
        /// Media queued for the player, oldest first: bits and the rate they were encoded at.
        var queue = Deque<(bits: Double, rate: Double)>()
        var paddingQueue = 0.0
        var probeRate: Double?, probeUntil = 0.0
        /// A flushing switch sends nothing until the target's keyframe.
        var paused = false
        var playable = 0.0, playing = false
        var time = 0.0
        func rate(_ level: Int) -> Double {
            (rungs.first { $0.level == level } ?? rungs.last!).bitRate(at: time, segmentDuration: keyframeInterval)
        }
        func flush() {
            queue.removeAll()
            paddingQueue = 0
        }

        while time < length - 1e-9 {
            let link = trace.bitRate(at: time)
            // A switch waits for the target's next keyframe.
            let intoGOP = time.truncatingRemainder(dividingBy: keyframeInterval)
            if let pending = pendingLevel, intoGOP < 1e-6 || keyframeInterval - intoGOP < 1e-6 {
                level = pending
                pendingLevel = nil
                paused = false
            }
            let mediaRate = rate(level)
            if !paused { queue.append((mediaRate * step, mediaRate)) }
            if let probe = probeRate, time < probeUntil { paddingQueue += max(0, probe - mediaRate) * step } else { probeRate = nil }
            var capacity = link * step
            var deliveredMedia = 0.0, deliveredSeconds = 0.0
            while capacity > 0, !queue.isEmpty {
                let taken = min(capacity, queue[0].bits)
                deliveredMedia += taken
                deliveredSeconds += taken / queue[0].rate
                capacity -= taken
                queue[0].bits -= taken
                if queue[0].bits <= 1e-9 { queue.removeFirst() }
            }
            let deliveredPadding = min(paddingQueue, capacity)
            paddingQueue -= deliveredPadding
            let saturated = queue.reduce(0) { $0 + $1.bits } + paddingQueue > 1
            let estimate = saturated ? link : (deliveredMedia + deliveredPadding) / step

            outcome.deliveredBits += deliveredMedia
            playable += deliveredSeconds
            if !playing, playable >= startupBuffer { playing = true }
            if playing {
                if playable >= step {
                    playable -= step
                } else {
                    outcome.freezeSeconds += step - playable
                    playable = 0
                }
            }
            if link < Double(rungs.last!.bitRate) { outcome.starvedSeconds += step }
            let lag = queue.reduce(0) { $0 + $1.bits / $1.rate }
            outcome.maximumLag = max(outcome.maximumLag, lag)
            outcome.secondsPerLevel[level, default: 0] += step
            outcome.oracleBits += oracleRate(trace, at: time, rungs: rungs) * step
            moments?(Moment(time: time, linkBitRate: link, level: pendingLevel ?? level, lagSeconds: lag))

            time += step
            let sample = SwitchingPolicy.Sample(time: time, estimate: estimate, appLimited: !saturated, lossFraction: 0, backlogSeconds: lag)
            switch policy.observe(sample) {
            case .stay:
                break
            case let .switchTo(target, flushes, _):
                if target < (pendingLevel ?? level) { outcome.switchesUp += 1 } else { outcome.switchesDown += 1 }
                pendingLevel = target
                if flushes {
                    flush()
                    paused = true
                }
            case let .probe(bitRate):
                outcome.probes += 1
                probeRate = Double(bitRate)
                probeUntil = time + policy.probeDuration
            case .skipToLiveEdge:
                outcome.skips += 1
                flush()
                // The rung's next keyframe: nothing is sent until then.
                pendingLevel = pendingLevel ?? level
                paused = true
            }
        }
        outcome.seconds = time
        return outcome
    }

    /// What an oracle receives at `time`: the highest rung the link carries over the next horizon.
    func oracleRate(_ trace: BandwidthTrace, at time: Double, rungs: [SwitchingPolicy.Rung]) -> Double {
        var least = Double.infinity
        var offset = 0.0
        while offset < oracleHorizon {
            least = min(least, trace.bitRate(at: time + offset))
            offset += step
        }
        let rates = rungs.map { $0.bitRate(at: time, segmentDuration: keyframeInterval) }
        // Where nothing fits, the oracle too sends the lowest rung, and gets what the link carries of it.
        return rates.first { $0 <= least } ?? min(rates.last ?? 0, trace.bitRate(at: time))
    }
}
