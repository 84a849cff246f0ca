import Glibc
import SystemKit
import XCTest

final class EnvironmentTests: XCTestCase {
    func testEnvironmentIsReadFromEnviron() {
        setenv("SYSTEMKIT_TEST", "a=b", 1)
        defer { unsetenv("SYSTEMKIT_TEST") }
        XCTAssertEqual(Environment.current["SYSTEMKIT_TEST"], "a=b")
        XCTAssertEqual(Environment.value("SYSTEMKIT_TEST"), "a=b")
        unsetenv("SYSTEMKIT_TEST")
        XCTAssertNil(Environment.current["SYSTEMKIT_TEST"])
        XCTAssertNil(Environment.value("SYSTEMKIT_TEST"))
    }

    func testADetachedThreadRuns() {
        let ran = expectation(description: "thread ran")
        XCTAssertTrue(DetachedThread.start { ran.fulfill() })
        wait(for: [ran], timeout: 10)
    }
}
