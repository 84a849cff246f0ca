import PropBus
import PropBusSystem
import XCTest

/// The user and group databases behind ``Accounts/system``.
final class AccountsTests: XCTestCase {
    func testSystemAccountsResolveRealNamesAndRefuseUnknownOnes() {
        XCTAssertEqual(Accounts.system.userID("root"), 0)
        XCTAssertEqual(Accounts.system.groupID("root"), 0)
        XCTAssertNil(Accounts.system.userID("no-such-user-propbus-test"))
        XCTAssertNil(Accounts.system.groupID("no-such-group-propbus-test"))
    }
}
