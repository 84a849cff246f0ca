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
}
