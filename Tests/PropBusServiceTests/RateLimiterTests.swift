import Dispatch
import Synchronization
@testable import PropBusService
import XCTest

final class RateLimiterTests: XCTestCase {
    /// The limiter's counters are behind its mutex (no `@unchecked Sendable`): threads that
    /// hammer it at once let exactly one action through per period, and count every other.
    func testThreadsAtOnceLetOneActionThroughPerPeriod() {
        let limiter = RateLimiter(seconds: 3600)
        let ran = Counter()
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            for _ in 0..<500 { limiter.run { held in ran.add(held) } }
        }
        XCTAssertEqual(ran.snapshot.runs, 1)
        XCTAssertEqual(ran.snapshot.held, 0)
    }

    /// Runs and what they were told, from many threads.
    private final class Counter: Sendable {
        private let state = Mutex((runs: 0, held: 0))
        func add(_ held: Int) { state.withLock { $0.runs += 1; $0.held += held } }
        var snapshot: (runs: Int, held: Int) { state.withLock { $0 } }
    }
}
