import Testing
@testable import WebRTC

/// When audio leaves, on made-up arrivals (no sleeping): a steady publisher's packets at once,
/// a bursty one's spread over the time each burst covers from the first burst on, and a stall's
/// backlog at once past the most a burst may cover.
@Suite struct AudioSmootherTests {
    /// 20 ms of Opus at 48 kHz.
    static let step: UInt32 = 960

    @Test func aSteadyPublishersAudioIsNotHeld() {
        var smoother = AudioSmoother()
        for index in 0..<300 {
            // Arrivals 20 ms apart with up to 3 ms of jitter.
            let now = 10 + Double(index) * 0.02 + Double(index % 4) * 0.001
            let due = smoother.due(timestamp: 5000 &+ UInt32(index) * Self.step, at: now)
            #expect(due - now < 0.0035, "packet \(index) held \(due - now) s")
        }
    }

    /// ffmpeg's RTSP muxer: five packets (100 ms) at once, every 100 ms.
    @Test func burstsAreSpreadOverTheTimeTheyCover() {
        var smoother = AudioSmoother()
        var held: [Double] = []
        for burst in 0..<50 {
            let now = 3 + Double(burst) * 0.1
            for index in 0..<5 {
                let packet = burst * 5 + index
                let due = smoother.due(timestamp: UInt32(packet) * Self.step, at: now)
                if burst >= 2 { held.append(due - now) }
            }
        }
        // From the second burst on: the first of each leaves at once, the next 20 ms later, and so on.
        for (offset, hold) in held.enumerated() {
            #expect(abs(hold - Double(offset % 5) * 0.02) < 1e-6, "packet \(offset) of a burst held \(hold) s")
        }
    }

    /// ffmpeg's MPEG-TS muxer over SRT at 64 kbit/s: 15 packets (0.3 s) every 0.3 s, reaching
    /// the pacer 0.4 ms apart as the node encodes them one by one.
    @Test func mpegTSBurstsOfAThirdOfASecondAreSpreadToo() {
        var smoother = AudioSmoother()
        for burst in 0..<20 {
            for index in 0..<15 {
                let now = 7 + Double(burst) * 0.3 + Double(index) * 0.0004
                let due = smoother.due(timestamp: UInt32(burst * 15 + index) * Self.step, at: now)
                // 20 ms apart, from when the burst's last packet came (the least lateness is its).
                let expected = 7 + Double(burst) * 0.3 + 14 * 0.0004 + Double(index) * 0.02
                if burst >= 2 { #expect(abs(due - expected) < 1e-6, "burst \(burst), packet \(index) due \(due - now) s after it came") }
            }
        }
    }

    /// A stall's backlog (two seconds of audio at once), then live audio in bursts: the backlog
    /// is spread for its first `maximumSpread` and due at once past it, and sets no spread for
    /// the live audio after it.
    @Test func aStallsBacklogIsNotHeldPastTheMostASpreadMayBeAndSetsNoSpread() {
        var smoother = AudioSmoother()
        // Timestamps that wrap past 2^32 on the way.
        let start = UInt32.max - 40 * Self.step
        for index in 0..<100 {
            let due = smoother.due(timestamp: start &+ UInt32(index) * Self.step, at: 100)
            let expected = index <= 20 ? 100 + Double(index) * 0.02 : 100
            #expect(abs(due - expected) < 1e-6, "backlog packet \(index) held \(due - 100) s")
        }
        for burst in 0..<20 {
            let now = 100 + Double(burst + 1) * 0.1
            for index in 0..<5 {
                let due = smoother.due(timestamp: start &+ UInt32(100 + burst * 5 + index) * Self.step, at: now)
                // The first live burst is spread as it comes (at most 20 ms apart); from the second on, exactly.
                if burst == 0 { #expect(due <= now + Double(index) * 0.02 + 1e-6, "packet \(index) held \(due - now) s") } else { #expect(abs(due - now - Double(index) * 0.02) < 1e-6, "burst \(burst), packet \(index)") }
            }
        }
    }
}
