import Dispatch
import Synchronization
import XCTest

@testable import PropBusRender

/// The renders' file work: in the order given, on a thread that outlives a pause in the work
/// and is made again after a longer one.
final class InstallThreadTests: XCTestCase {
    func testWorkRunsInOrderAcrossPausesOfTheThread() {
        let thread = InstallThread()
        let done = Mutex<[Int]>([])
        let finished = DispatchSemaphore(value: 0)
        func give(_ range: Range<Int>) {
            for index in range {
                thread.async {
                    done.withLock { $0.append(index) }
                    if index == range.upperBound - 1 { finished.signal() }
                }
            }
            XCTAssertEqual(finished.wait(timeout: .now() + 10), .success)
        }
        give(0..<500)
        // The thread is still waiting for more.
        give(500..<600)
        // It ended meanwhile: the next work starts another.
        usleep(1_300_000)
        give(600..<700)
        XCTAssertEqual(done.withLock { $0 }, Array(0..<700))
    }
}
