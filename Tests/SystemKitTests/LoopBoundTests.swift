import Dispatch
import XCTest
@testable import SystemKit

final class LoopBoundTests: XCTestCase {
    func testAValueMadeOnItsQueueIsReadThereAfterTravellingThroughAnotherThread() {
        let queue = DispatchQueue(label: "loop-bound")
        let done = expectation(description: "read on the queue")
        queue.async {
            let bound = LoopBound([1, 2, 3], on: queue)
            DispatchQueue.global().async {
                // Carried across threads, used only back on its queue.
                queue.async {
                    XCTAssertEqual(bound.value, [1, 2, 3])
                    XCTAssertTrue(bound.queue === queue)
                    done.fulfill()
                }
            }
        }
        wait(for: [done], timeout: 10)
    }

    /// A class that is not `Sendable`, as the daemon's and propctl's owners are.
    private final class Owner {
        var count = 0
    }

    func testAValueHandedOverFromAnotherThreadBelongsToTheQueue() {
        let queue = DispatchQueue(label: "loop-bound")
        let bound = LoopBound.handOver(Owner(), to: queue)
        let done = expectation(description: "used on the queue")
        queue.async {
            bound.value.count += 1
            XCTAssertEqual(bound.value.count, 1)
            done.fulfill()
        }
        wait(for: [done], timeout: 10)
    }

    func testAWeakBindingFindsItsObjectWhileItLivesAndNothingAfter() {
        let queue = DispatchQueue(label: "loop-bound")
        var owner: Owner? = Owner()
        let bound = queue.sync { LoopBound(weak: owner!, on: queue) }
        let alive = expectation(description: "ran while the owner lived")
        bound.async(after: .now() + .milliseconds(1)) { (owner: Owner) in
            dispatchPrecondition(condition: .onQueue(queue))
            owner.count += 1
            alive.fulfill()
        }
        wait(for: [alive], timeout: 10)
        XCTAssertEqual(owner?.count, 1)
        // The binding does not keep its object: once the owner is gone, work for it is dropped.
        queue.sync { owner = nil }
        bound.async { (_: Owner) in XCTFail("ran for an object that is gone") }
        let barrier = expectation(description: "the queue's next turn")
        queue.async {
            XCTAssertNil(bound.object() as Owner?)
            barrier.fulfill()
        }
        wait(for: [barrier], timeout: 10)
    }
}
