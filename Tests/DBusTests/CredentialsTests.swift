import DBus
import XCTest

/// Credentials read from a bus's `GetConnectionCredentials` reply (DBus), apart from the value
/// the access policy uses (DBusValues).
final class CredentialsTests: XCTestCase {
    func testCredentialsFromABusReplyUseUnixGroupIDs() throws {
        let credentials = try Credentials(reply: [
            "UnixUserID": .variant(.uint32(1000)),
            "UnixGroupIDs": .variant(.array(of: .uint32, [.uint32(1000), .uint32(29)])),
            "ProcessID": .variant(.uint32(42)),
        ])
        XCTAssertEqual(credentials, Credentials(userID: 1000, groupIDs: [1000, 29], processID: 42))
    }

    func testCredentialsWithoutGroupsFallBackToTheGroupDatabase() throws {
        let credentials = try Credentials(reply: ["UnixUserID": .variant(.uint32(0))])
        XCTAssertEqual(credentials.userID, 0)
        XCTAssertTrue(credentials.groupIDs.contains(0), "root's groups from getgrouplist: \(credentials.groupIDs)")
        XCTAssertNil(credentials.processID)
        XCTAssertEqual(Credentials.groups(ofUser: 4_000_000_000), [], "a uid without a passwd entry has no groups")
    }

    func testCredentialsWithoutAUserAreRefused() {
        XCTAssertThrowsError(try Credentials(reply: ["ProcessID": .variant(.uint32(1))]))
    }
}
