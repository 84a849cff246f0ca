import DBus
import Foundation
import XCTest

/// The model-file lifecycle under access control: only the default writers may reload, see or
/// prune values without a definition (docs/security.md).
final class AccessControlModelFileTests: AccessControlTestCase, @unchecked Sendable {
    func testNobodyMayNotReloadListUnclaimedOrPrune() async throws {
        assertDenied(try await dbusSendAsNobody(["/org/propbus/PropBus1", "org.propbus.PropBus1.Manager.Reload"]), naming: "the model files")
        assertDenied(try await dbusSendAsNobody(["/org/propbus/PropBus1", "org.propbus.PropBus1.Manager.ListUnclaimed"]), naming: "unclaimed stored values")
        assertDenied(try await dbusSendAsNobody(["/org/propbus/PropBus1", "org.propbus.PropBus1.Manager.ListUnclaimedPage", "string:", "string:", "uint32:0"]), naming: "unclaimed stored values")
        assertDenied(try await dbusSendAsNobody(["/org/propbus/PropBus1", "org.propbus.PropBus1.Manager.Prune", "array:string:a.b"]), naming: "unclaimed stored values")
        // Root may (the test process).
        let reply = try await client.call(PropBusAPI.manager, "ListUnclaimed")
        XCTAssertEqual(reply.count, 1)
    }
}
