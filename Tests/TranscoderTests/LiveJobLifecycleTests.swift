import Testing
@testable import Transcoder

/// The live job's lifecycle on a clock the tests move: every transition, grace included, without sleeping.
@Suite struct LiveJobLifecycleTests {
    @Test func aPublisherRunsTheJobAndItsReturnWithinGraceResumesIt() {
        var step: LiveJobLifecycle.Step
        var accepted: Bool
        var deadline: Double?
        var life = LiveJobLifecycle(grace: 30)
        #expect(life.state == .waitingForPublisher)
        step = life.next(now: 0)
        #expect(step == .wait(until: nil))
        accepted = life.offerPublisher()
        #expect(accepted)
        // One publisher at a time.
        accepted = life.offerPublisher()
        #expect(!accepted)
        step = life.next(now: 1)
        #expect(step == .run(resuming: false))
        #expect(life.state == .running && !life.acceptsPublisher)

        deadline = life.publisherLeft(now: 100)
        #expect(deadline == 130)
        #expect(life.state == .interrupted && life.acceptsPublisher)
        step = life.next(now: 110)
        #expect(step == .wait(until: 130))
        accepted = life.offerPublisher()
        #expect(accepted)
        step = life.next(now: 129.9)
        #expect(step == .run(resuming: true))
        #expect(life.graceDeadline == nil)
    }

    @Test func graceRunsOutOnTheClockAndEndsTheJob() {
        var accepted: Bool
        var step: LiveJobLifecycle.Step
        var life = LiveJobLifecycle(grace: 5)
        accepted = life.offerPublisher()
        #expect(accepted)
        _ = life.next(now: 0)
        _ = life.publisherLeft(now: 10)
        step = life.next(now: 14.99)
        #expect(step == .wait(until: 15))
        step = life.next(now: 15)
        #expect(step == .finish(reason: "no publisher within 5 s"))
        life.finished(failed: false)
        accepted = life.offerPublisher()
        #expect(life.state == .ended && life.isFinished && !accepted)
    }

    @Test func stopEndsAWaitingJobAndARunningOneWithoutGrace() {
        var accepted: Bool
        var step: LiveJobLifecycle.Step
        var deadline: Double?
        var waiting = LiveJobLifecycle(grace: 30)
        waiting.stop()
        accepted = waiting.offerPublisher()
        #expect(!accepted)
        step = waiting.next(now: 0)
        #expect(step == .finish(reason: "stopped"))

        var running = LiveJobLifecycle(grace: 30)
        accepted = running.offerPublisher()
        #expect(accepted)
        _ = running.next(now: 0)
        running.stop()
        deadline = running.publisherLeft(now: 1)
        #expect(deadline == nil)
        running.finished(failed: true)
        #expect(running.state == .failed)
    }

    @Test func aPublisherAcceptedBeforeStopStillGetsItsSession() {
        var accepted: Bool
        var step: LiveJobLifecycle.Step
        var deadline: Double?
        // attach then stop before the job thread looked: the session runs (and ends at once, its source ended).
        var life = LiveJobLifecycle(grace: 30)
        accepted = life.offerPublisher()
        #expect(accepted)
        life.stop()
        step = life.next(now: 0)
        #expect(step == .run(resuming: false))
        deadline = life.publisherLeft(now: 0)
        #expect(deadline == nil)
    }

    @Test func notificationsGetABurstThenTheirRate() {
        var budget = RateBudget(burst: 3, perSecond: 2)
        var took: [Bool] = (0..<5).map { _ in budget.take(now: 10) }
        #expect(took == [true, true, true, false, false])
        took = [budget.take(now: 10.4), budget.take(now: 10.5)]
        #expect(took == [false, true])
        // Refill never exceeds the burst, and a clock that steps back refills nothing.
        took = (0..<5).map { _ in budget.take(now: 1000) }
        #expect(took == [true, true, true, false, false])
        took = [budget.take(now: 999)]
        #expect(took == [false])
    }
}
