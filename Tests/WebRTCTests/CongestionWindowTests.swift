import Testing
import WebRTC
import WebRTCTransport
@testable import WebRTCServer

/// The congestion window a viewer's pacer sends under, on made-up feedback (no sockets): the
/// round trip it takes before the browser's first receiver report, and after.
@Suite struct CongestionWindowTests {
    /// A viewer's state with 1200-byte packets sent every 5 ms (1.92 Mbit/s) for a second, each
    /// feedback naming the last 50 ms of packets and coming back 2 ms after the newest.
    static func viewer() throws -> WebRTCViewer.State {
        var state = WebRTCViewer.State(dtls: try DTLSSession(identity: DTLSIdentity()), created: 0, lastHeard: 0)
        var pending: [TransportFeedback.Packet] = []
        for index in 0..<200 {
            let time = Double(index) * 0.005
            state.link.sent(sequence: UInt16(index), bytes: 1200, at: time)
            pending.append(.init(sequence: UInt16(index), arrival: Int64((100 + time + 0.001) * 1e6)))
            if pending.count == 10 {
                _ = state.link.receive(TransportFeedback(baseSequence: pending[0].sequence, feedbackCount: 0, packets: pending), at: time + 0.002)
                pending.removeAll()
            }
        }
        state.pacer.linkRate = 1_920_000
        return state
    }

    @Test func aNewViewerWithoutAnEstimateHasTheInitialWindow() throws {
        var state = try Self.viewer()
        state.pacer.linkRate = nil
        #expect(WebRTCViewer.congestionWindow(state, at: 1) == WebRTCViewer.initialWindow)
    }

    /// A path of 2 ms before any receiver report: the window is what the link drains in that and
    /// the window's queue, 61 KB at 1.92 Mbit/s. With the 0.1 s it took for the round trip until
    /// the first report, it was 84 KB: more than a router's 30 packets (36 KB) and the path hold.
    /// Once reports give a round trip, that one counts.
    @Test func beforeTheFirstReportTheWindowTakesTheRoundTripFeedbackShows() throws {
        var state = try Self.viewer()
        #expect(state.leastRoundTrip == nil)
        #expect(abs(WebRTCViewer.roundTrip(state) - 0.002) < 1e-6)
        let window = WebRTCViewer.congestionWindow(state, at: 1)
        let expected = 240_000 * (0.002 + WebRTCViewer.windowQueue)
        #expect(abs(Double(window) - expected) < 1500, "\(window) bytes, not \(expected)")
        state.leastRoundTrip = 0.04
        #expect(WebRTCViewer.roundTrip(state) == 0.04)
        #expect(abs(Double(WebRTCViewer.congestionWindow(state, at: 1)) - 240_000 * (0.04 + WebRTCViewer.windowQueue)) < 1500)
    }
}
