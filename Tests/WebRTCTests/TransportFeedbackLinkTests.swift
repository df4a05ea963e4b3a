import Testing
@testable import WebRTC

/// Transport-wide feedback turned into the observations the switching policy takes, on made-up
/// links (no sleeping): what arrived, the queue the delays show, and loss.
@Suite struct TransportFeedbackLinkTests {
    /// Packets of 1200 bytes every 10 ms (960 kbit/s), arriving after `delay(index)` seconds on a
    /// viewer clock 1000 s ahead of the node's; feedback every 10 packets.
    static func run(_ count: Int, lost: Set<Int> = [], delay: (Int) -> Double) -> [LinkObservationSummary] {
        var link = TransportFeedbackLink()
        var summaries: [LinkObservationSummary] = []
        for batch in stride(from: 0, to: count, by: 10) {
            var packets: [TransportFeedback.Packet] = []
            for index in batch..<min(count, batch + 10) {
                let sent = Double(index) * 0.01
                link.sent(sequence: UInt16(truncatingIfNeeded: index), bytes: 1200, at: sent)
                let arrival = lost.contains(index) ? nil : Int64((1000 + sent + delay(index)) * 1e6)
                packets.append(.init(sequence: UInt16(truncatingIfNeeded: index), arrival: arrival))
            }
            let now = Double(batch + 10) * 0.01 + 0.05
            if let observation = link.receive(TransportFeedback(baseSequence: UInt16(truncatingIfNeeded: batch), feedbackCount: 0, packets: packets), at: now) {
                summaries.append(.init(delivered: observation.deliveredBytes, queue: observation.backlogSeconds,
                                       waiting: observation.senderWaiting, loss: observation.lossFraction, rate: observation.rateSample))
            }
        }
        return summaries
    }

    struct LinkObservationSummary {
        var delivered: UInt64
        var queue: Double
        var waiting: Bool
        var loss: Double
        var rate: Double?
    }

    @Test func aClearLinkShowsWhatArrivedAndNoQueue() throws {
        let observations = Self.run(200) { _ in 0.03 }
        let last = try #require(observations.last)
        #expect(last.delivered == 200 * 1200)
        #expect(observations.allSatisfy { $0.queue < 0.001 && !$0.waiting && $0.loss == 0 })
        #expect(abs((last.rate ?? 0) - 960_000) < 20_000)
    }

    /// A link that carries less than is sent: each packet waits 5 ms longer than the one before.
    @Test func aGrowingQueueReadsAsBacklogAndASaturatedLink() throws {
        let observations = Self.run(100) { index in 0.03 + Double(index) * 0.005 }
        let last = try #require(observations.last)
        #expect(abs(last.queue - 0.495) < 0.01)
        #expect(last.waiting)
        // It arrives at two thirds of the rate it was sent at.
        #expect(abs((last.rate ?? 0) - 640_000) < 20_000)
    }

    /// A link that falls while the node sends at its old rate: once feedback shows the queue,
    /// the rate its packets arrived at is the link's now, whatever arrived before the fall; it is
    /// forgotten when the queue is gone.
    @Test func aQueueShowsWhatTheLinkDrainsNow() throws {
        var link = TransportFeedbackLink()
        var sequence: UInt16 = 0
        // 1200-byte packets every 2 ms (4.8 Mbit/s); feedback every 20 packets, 30 ms later.
        func batch(at start: Double, arrivals: (Int) -> Double) {
            var packets: [TransportFeedback.Packet] = []
            for index in 0..<20 {
                let sent = start + Double(index) * 0.002
                link.sent(sequence: sequence, bytes: 1200, at: sent)
                packets.append(.init(sequence: sequence, arrival: Int64((1000 + arrivals(index)) * 1e6)))
                sequence &+= 1
            }
            _ = link.receive(TransportFeedback(baseSequence: sequence &- 20, feedbackCount: 0, packets: packets), at: start + 0.07)
        }
        // A wide link: each arrives 10 ms after it left.
        for step in 0..<8 { batch(at: Double(step) * 0.04) { Double(step) * 0.04 + Double($0) * 0.002 + 0.01 } }
        #expect(link.queuedDeliveryRate == nil)
        #expect((link.recentDeliveryRate ?? 0) > 4_000_000)
        #expect(link.carriedRate(estimate: 3_800_000) == 3_800_000, "no queue: the estimate stands")
        // The link falls to 1.2 Mbit/s (8 ms a packet): the queue grows 6 ms a packet.
        batch(at: 0.32) { 0.32 + 0.01 + Double($0) * 0.008 }
        let drained = try #require(link.queuedDeliveryRate)
        #expect(abs(drained - 1_200_000) < 20_000)
        #expect((link.recentDeliveryRate ?? 0) > 1_500_000, "the wide past is still in the half-second rate")
        // An estimate still holding what the wide link read does not pace or window the fallen one.
        #expect(abs(link.carriedRate(estimate: 3_800_000) - 1_200_000) < 20_000)
        #expect(link.carriedRate(estimate: 900_000) == 900_000, "a lower estimate stands")
        // The node stops; later packets meet no queue again.
        batch(at: 2) { 2 + 0.01 + Double($0) * 0.002 }
        #expect(link.queuedDeliveryRate == nil)
        #expect(link.carriedRate(estimate: 3_800_000) == 3_800_000)
    }

    /// The queue ahead of a packet sent now: what was sent since the newest reported packet, at
    /// the rate the queued packets arrived at once feedback shows a queue (the wide estimate the
    /// caller passes would read it as nothing), and at the caller's rate while none shows.
    @Test func theQueueAheadOfAPacketSentNowIsWhatWasSentSinceAtTheRateTheLinkDrainsNow() {
        var link = TransportFeedbackLink()
        var sequence: UInt16 = 0
        var arrival = 0.0
        // 1200-byte packets every 2 ms (4.8 Mbit/s), reported 20 at a time 70 ms after the batch starts.
        func batch(at start: Double, spacing: Double, report: Bool = true) {
            var packets: [TransportFeedback.Packet] = []
            for index in 0..<20 {
                let sent = start + Double(index) * 0.002
                link.sent(sequence: sequence, bytes: 1200, at: sent)
                arrival = max(arrival + spacing, sent + 0.01)
                packets.append(.init(sequence: sequence, arrival: Int64((1000 + arrival) * 1e6)))
                sequence &+= 1
            }
            if report { _ = link.receive(TransportFeedback(baseSequence: sequence &- 20, feedbackCount: 0, packets: packets), at: start + 0.07) }
        }
        for step in 0..<8 { batch(at: Double(step) * 0.04, spacing: 0.002) }
        let wide = 10_000_000.0
        #expect(link.queueAhead(at: 0.36, drainRate: wide) < 0.05)
        // The link falls to 400 kbit/s (24 ms a packet): one batch reported, four more sent since.
        batch(at: 0.32, spacing: 0.024)
        for step in 1...4 { batch(at: 0.32 + Double(step) * 0.04, spacing: 0.024, report: false) }
        let ahead = link.queueAhead(at: 0.5, drainRate: wide)
        // The reported batch met up to 0.45 s; 96 KB more at 400 kbit/s is 1.9 s, less the 0.11 s since.
        #expect(ahead > 2 && ahead < 2.4, "\(ahead)")
    }

    /// Packets reported lost after the newest one that arrived are not on the path: a fall with
    /// loss on a short queue does not read as a deep queue ahead.
    @Test func packetsReportedLostAreNotPartOfTheQueueAhead() {
        var link = TransportFeedbackLink()
        var sequence: UInt16 = 0
        var arrival = 0.0
        // 1200-byte packets every 2 ms; of each batch of 20 the first `arriving` arrive, `spacing` apart.
        func batch(at start: Double, spacing: Double, arriving: Int = 20, report: Bool = true) {
            var packets: [TransportFeedback.Packet] = []
            for index in 0..<20 {
                let sent = start + Double(index) * 0.002
                link.sent(sequence: sequence, bytes: 1200, at: sent)
                var arrived: Int64?
                if index < arriving {
                    arrival = max(arrival + spacing, sent + 0.01)
                    arrived = Int64((1000 + arrival) * 1e6)
                }
                packets.append(.init(sequence: sequence, arrival: arrived))
                sequence &+= 1
            }
            if report { _ = link.receive(TransportFeedback(baseSequence: sequence &- 20, feedbackCount: 0, packets: packets), at: start + 0.07) }
        }
        for step in 0..<8 { batch(at: Double(step) * 0.04, spacing: 0.002) }
        // The link falls to 400 kbit/s with a short queue: five packets arrive, fifteen are dropped.
        batch(at: 0.32, spacing: 0.024, arriving: 5)
        let wide = 10_000_000.0
        let ahead = link.queueAhead(at: 0.39, drainRate: wide)
        // The fifth met about 0.1 s and left 0.06 s ago; the fifteen dropped would add 0.36 s.
        #expect(ahead < 0.1, "\(ahead)")
        // Ten more sent and not yet reported are on the path: 96 kbit at 400 kbit/s.
        batch(at: 0.39, spacing: 0.024, arriving: 10, report: false)
        let later = link.queueAhead(at: 0.39, drainRate: wide)
        #expect(later > ahead + 0.4 && later < ahead + 0.56, "\(later)")
    }

    /// Media lost teaches how much the path holds: the least that was in flight when a lost
    /// packet of the newest feedback with losses left, less a fifth. A probe's padding lost does
    /// not, and the lesson is forgotten after `lossMemory`.
    @Test func lossBoundsWhatMayBeInFlightByWhatThePathHeldThen() throws {
        var link = TransportFeedbackLink()
        func feedback(_ range: Range<Int>, lost: Set<Int>, at now: Double) {
            let packets = range.map { TransportFeedback.Packet(sequence: UInt16($0), arrival: lost.contains($0) ? nil : Int64((1000 + Double($0) * 0.001) * 1e6)) }
            _ = link.receive(TransportFeedback(baseSequence: UInt16(range.lowerBound), feedbackCount: 0, packets: packets), at: now)
        }
        // 60 packets of 1,000 bytes leave before any feedback: the nth leaves with n KB in flight.
        for index in 0..<60 { link.sent(sequence: UInt16(index), bytes: 1000, at: Double(index) * 0.001, padding: index == 30) }
        #expect(link.inFlightLimit(at: 0.1) == nil, "nothing lost yet")
        feedback(0..<40, lost: [30], at: 0.1)
        #expect(link.inFlightLimit(at: 0.1) == nil, "padding lost is the probe's doing")
        feedback(40..<60, lost: [48, 45, 52], at: 0.2)
        #expect(link.inFlightLimit(at: 0.2) == 46_000 * 4 / 5, "the least in flight among that feedback's losses (the 46th packet's)")
        // A later feedback's loss is the newer lesson, even where the path held more.
        for index in 60..<120 { link.sent(sequence: UInt16(index), bytes: 1000, at: 0.2 + Double(index) * 0.001) }
        feedback(60..<120, lost: [119], at: 0.3)
        #expect(link.inFlightLimit(at: 0.3) == 60_000 * 4 / 5)
        #expect(link.inFlightLimit(at: 0.3 + TransportFeedbackLink.lossMemory + 0.1) == nil, "forgotten")
    }

    /// A queue counted in packets overflows once full: the deepest queue the arrivals of the
    /// newest feedback with media lost met is how deep the path goes, whatever was lost before it
    /// and not yet reported (which an in-flight count takes for the path's). Padding lost does not
    /// teach it; it is forgotten after `lossMemory`.
    @Test func lossTeachesHowDeepThePathsQueueGoes() throws {
        var link = TransportFeedbackLink()
        var sequence: UInt16 = 0
        // 1200-byte packets every 2 ms; packet i of a batch meets a queue of queue(i) seconds
        // beyond the 10 ms path (the first batch meets none, so 10 ms is the least delay).
        func batch(at start: Double, lost: Set<Int> = [], padding: Set<Int> = [], queue: (Int) -> Double) {
            var packets: [TransportFeedback.Packet] = []
            for index in 0..<20 {
                let sent = start + Double(index) * 0.002
                link.sent(sequence: sequence, bytes: 1200, at: sent, padding: padding.contains(index))
                let arrival = lost.contains(index) ? nil : Int64((1000 + sent + 0.01 + queue(index)) * 1e6)
                packets.append(.init(sequence: sequence, arrival: arrival))
                sequence &+= 1
            }
            _ = link.receive(TransportFeedback(baseSequence: sequence &- 20, feedbackCount: 0, packets: packets), at: start + 0.3)
        }
        batch(at: 0) { _ in 0 }
        #expect(link.queueAtLoss(at: 0.3) == nil, "nothing lost yet")
        // The queue fills to 0.24 s, and then what comes is dropped.
        batch(at: 0.04, lost: [15], padding: [15]) { Double($0) * 0.012 }
        #expect(link.queueAtLoss(at: 0.34) == nil, "a probe's padding lost is the probe's doing")
        batch(at: 0.08, lost: [12, 14, 16, 18], queue: { min(0.24, 0.2 + Double($0) * 0.01) })
        let deepest = try #require(link.queueAtLoss(at: 0.38))
        #expect(abs(deepest - 0.24) < 0.001, "\(deepest)")
        // A later overflow of a shallower queue (the link is faster now) is the newer lesson.
        batch(at: 0.5, lost: [19], queue: { min(0.12, Double($0) * 0.01) })
        #expect(abs(try #require(link.queueAtLoss(at: 0.8)) - 0.12) < 0.001)
        #expect(link.queueAtLoss(at: 0.8 + TransportFeedbackLink.lossMemory + 0.1) == nil, "forgotten")
    }

    /// Between two feedbacks the queue a packet would meet now is the last reported packet's,
    /// plus what was sent after it at the link's rate, less the time since it left.
    @Test func theQueueNowIsPredictedFromTheLastReportAndWhatWasSentSince() throws {
        var link = TransportFeedbackLink()
        #expect(link.predictedQueue(at: 0, bitRate: 960_000) == nil, "no feedback yet")
        // 960 kbit/s sent over a link of the same rate: each 1200-byte packet takes 10 ms, and
        // the tenth, sent at 0.09 s, met a queue of 50 ms (delays 30 ms, then 80 ms).
        var packets: [TransportFeedback.Packet] = []
        for index in 0..<10 {
            link.sent(sequence: UInt16(index), bytes: 1200, at: Double(index) * 0.01)
            let delay = index == 0 ? 0.03 : 0.08
            packets.append(.init(sequence: UInt16(index), arrival: Int64((1000 + Double(index) * 0.01 + delay) * 1e6)))
        }
        let observation = link.receive(TransportFeedback(baseSequence: 0, feedbackCount: 0, packets: packets), at: 0.2)
        #expect(abs((observation?.backlogSeconds ?? 0) - 0.05) < 0.001)
        #expect(abs(try #require(link.predictedQueue(at: 0.09, bitRate: 960_000)) - 0.05) < 0.001)
        // Twenty more packets at once, after 0.1 s: 0.05 + 0.2 − 0.1.
        for index in 10..<30 { link.sent(sequence: UInt16(index), bytes: 1200, at: 0.19) }
        #expect(abs(try #require(link.predictedQueue(at: 0.19, bitRate: 960_000)) - 0.15) < 0.001)
        // A link twice as fast drains them in half the time; after long enough, nothing waits.
        #expect(abs(try #require(link.predictedQueue(at: 0.19, bitRate: 1_920_000)) - 0.05) < 0.001)
        #expect(link.predictedQueue(at: 1, bitRate: 960_000) == 0)
    }

    /// What is in flight is what was sent after the newest packet feedback named, arrived or
    /// lost: feedback that is itself lost leaves it counted until a later one names later packets.
    @Test func bytesInFlightAreThoseSentAfterTheNewestReportedPacket() {
        var link = TransportFeedbackLink()
        for index in 0..<10 { link.sent(sequence: UInt16(index), bytes: 1000, at: Double(index) * 0.01) }
        #expect(link.inFlightBytes == 10_000)
        // Packets 0–3 reported, the fourth lost: six are still on the way.
        let first: [TransportFeedback.Packet] = (0..<4).map { index in
            .init(sequence: UInt16(index), arrival: index == 3 ? nil : 1_000_000 + Int64(index) * 10_000)
        }
        _ = link.receive(TransportFeedback(baseSequence: 0, feedbackCount: 0, packets: first), at: 0.1)
        #expect(link.inFlightBytes == 6000)
        // The feedback for 4–6 is lost; the next names 7–9, and nothing is in flight.
        let second: [TransportFeedback.Packet] = (7..<10).map { index in .init(sequence: UInt16(index), arrival: 1_000_000 + Int64(index) * 10_000) }
        _ = link.receive(TransportFeedback(baseSequence: 7, feedbackCount: 2, packets: second), at: 0.2)
        #expect(link.inFlightBytes == 0)
    }

    /// Before any receiver report, feedback shows the round trip: the least time from the newest
    /// packet a feedback names leaving to that feedback coming back, over the last ten seconds.
    @Test func feedbackShowsTheRoundTrip() throws {
        var link = TransportFeedbackLink()
        #expect(link.reportRoundTrip == nil)
        var sequence: UInt16 = 0
        // Ten packets every 10 ms from `start`; the feedback naming them comes `late` after the last.
        func batch(at start: Double, late: Double) {
            var packets: [TransportFeedback.Packet] = []
            for index in 0..<10 {
                let sent = start + Double(index) * 0.01
                link.sent(sequence: sequence, bytes: 1200, at: sent)
                packets.append(.init(sequence: sequence, arrival: Int64((500 + sent + 0.002) * 1e6)))
                sequence &+= 1
            }
            _ = link.receive(TransportFeedback(baseSequence: sequence &- 10, feedbackCount: 0, packets: packets), at: start + 0.09 + late)
        }
        batch(at: 0, late: 0.2)
        #expect(abs((link.reportRoundTrip ?? 0) - 0.2) < 1e-9)
        batch(at: 0.3, late: 0.004)
        batch(at: 0.4, late: 0.03)
        #expect(abs((link.reportRoundTrip ?? 0) - 0.004) < 1e-9, "the least, not the latest")
        // Ten seconds on, the least is forgotten for what the path gives now.
        for step in 5..<130 { batch(at: Double(step) * 0.1, late: 0.01) }
        #expect(abs((link.reportRoundTrip ?? 0) - 0.01) < 1e-9)
    }

    /// A viewer that repeats one feedback, its arrivals later each time, makes every reading of
    /// both least-delay lists larger than the last: they stay bounded, and keep their least.
    @Test func aRepeatedFeedbackDoesNotGrowTheLeastDelays() throws {
        var link = TransportFeedbackLink()
        link.sent(sequence: 1, bytes: 1000, at: 0)
        for index in 0..<5000 {
            let now = 0.01 + Double(index) * 0.001
            let packets: [TransportFeedback.Packet] = [.init(sequence: 1, arrival: Int64((1 + now) * 1e6))]
            _ = link.receive(TransportFeedback(baseSequence: 1, feedbackCount: UInt8(truncatingIfNeeded: index), packets: packets), at: now)
        }
        #expect(link.leastDelay.count <= TransportFeedbackLink.leastEntries)
        #expect(link.leastReportDelays.count <= TransportFeedbackLink.leastEntries)
        #expect(abs((link.reportRoundTrip ?? 0) - 0.01) < 1e-9)
    }

    @Test func lossIsCountedOverTheLastSecondAndLostPacketsAreNotDelivered() throws {
        // Feedback every 100 ms: two of the first ten lost.
        let observations = Self.run(200, lost: [3, 5]) { _ in 0.03 }
        #expect(observations.first?.loss == 0.2 && observations.first?.waiting == true)
        // The next feedback, clean, still counts them: two of twenty over the last second.
        #expect(observations[1].loss == 0.1 && observations[1].waiting == false)
        // A second later they are forgotten.
        #expect(observations.last?.loss == 0 && observations.last?.delivered == 198 * 1200)
        // One packet of the few a feedback names on a low rung is not a third of the link lost.
        let sparse = Self.run(200, lost: [195]) { _ in 0.03 }
        #expect(sparse.last.map { $0.loss < 0.02 } == true)
    }

    /// Feedback about packets the node never sent, or the same packets twice, adds nothing.
    @Test func feedbackThatNamesNothingOrRepeatsItselfAddsNothing() {
        var link = TransportFeedbackLink()
        link.sent(sequence: 1, bytes: 1000, at: 0)
        let strangers = TransportFeedback(baseSequence: 500, feedbackCount: 0, packets: [.init(sequence: 500, arrival: 1)])
        #expect(link.receive(strangers, at: 1) == nil)
        let once = TransportFeedback(baseSequence: 1, feedbackCount: 0, packets: [.init(sequence: 1, arrival: 10_000)])
        #expect(link.receive(once, at: 1)?.deliveredBytes == 1000)
        #expect(link.receive(once, at: 2)?.deliveredBytes == 1000)
    }
}
