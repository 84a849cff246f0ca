import XCTest

@testable import PropBusRender

/// When a render runs: its wait's quiescence, one run at a time, changes during a run, runs asked for.
final class RenderMachineTests: XCTestCase {
    private let second: UInt64 = 1_000_000_000

    func testWithoutAWaitAChangeRunsAtOnceAndChangesDuringTheRunRunAgainAfterIt() {
        var machine = RenderMachine(wait: .none)
        XCTAssertEqual(machine.handle(.changed(now: 10)), [.start])
        XCTAssertEqual(machine.handle(.changed(now: 11)), [])
        XCTAssertEqual(machine.handle(.changed(now: 12)), [])
        XCTAssertEqual(machine.handle(.finished(now: 13)), [.start])
        XCTAssertEqual(machine.handle(.finished(now: 14)), [])
    }

    func testAWaitRunsOnceTheKeysWereQuietForItsMinimum() {
        var machine = RenderMachine(wait: RenderWait(minimum: second, maximum: 4 * second))
        XCTAssertEqual(machine.handle(.changed(now: 0)), [.arm(at: second)])
        XCTAssertEqual(machine.handle(.changed(now: second / 2)), [.arm(at: 3 * second / 2)])
        // The first deadline comes: the keys changed since, so it waits for the later one.
        XCTAssertEqual(machine.handle(.deadline(now: second)), [.arm(at: 3 * second / 2)])
        XCTAssertEqual(machine.handle(.deadline(now: 3 * second / 2)), [.start])
        XCTAssertTrue(machine.running)
    }

    func testKeysThatNeverSettleAreRenderedAtTheWaitsMaximum() {
        var machine = RenderMachine(wait: RenderWait(minimum: second, maximum: 4 * second))
        var actions: [RenderMachine.Action] = []
        for step in 0..<8 { actions = machine.handle(.changed(now: UInt64(step) * second / 2)) }
        XCTAssertEqual(actions, [.arm(at: 4 * second)])
        XCTAssertEqual(machine.handle(.deadline(now: 4 * second)), [.start])
    }

    func testChangesDuringARunWaitTheirQuietTimeAfterIt() {
        var machine = RenderMachine(wait: RenderWait(minimum: second, maximum: 4 * second))
        _ = machine.handle(.changed(now: 0))
        XCTAssertEqual(machine.handle(.deadline(now: second)), [.start])
        XCTAssertEqual(machine.handle(.changed(now: 2 * second)), [])
        XCTAssertEqual(machine.handle(.finished(now: 2 * second + 1)), [.arm(at: 3 * second)])
    }

    func testARunAskedForStartsAtOnceOrRightAfterTheOneInFlight() {
        var machine = RenderMachine(wait: RenderWait(minimum: 10 * second, maximum: 40 * second))
        XCTAssertEqual(machine.handle(.runRequested(now: 0)), [.start])
        XCTAssertEqual(machine.handle(.runRequested(now: 1)), [])
        XCTAssertEqual(machine.handle(.finished(now: 2)), [.start])
        XCTAssertEqual(machine.handle(.finished(now: 3)), [])
    }

    func testADeadlineWithNothingWaitingDoesNothing() {
        var machine = RenderMachine(wait: RenderWait(minimum: second, maximum: second))
        XCTAssertEqual(machine.handle(.deadline(now: 5 * second)), [])
    }
}
