import DBus
import XCTest

final class SmokeTests: DaemonTestCase {
    func testDaemonOwnsItsNameAndAnswersPing() async throws {
        let owned = try await client.nameHasOwner()
        XCTAssertTrue(owned)
        try await client.call(at: PropBusAPI.rootPath, PropBusAPI.peer, "Ping")
    }
}
