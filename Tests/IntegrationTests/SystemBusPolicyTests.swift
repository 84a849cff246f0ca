import DBus
import Foundation
import XCTest

/// The system bus policy `systemd/org.propbus.PropBus1.conf` loaded into a system-like bus, with the
/// daemon behind it (what the file says, read as text, is PropbusdTests.SystemBusPolicyFileTests').
final class SystemBusPolicyTests: AccessControlTestCase, @unchecked Sendable {
    func testTheBusEnforcesThePolicyAndLetsNobodysCallsReachTheDaemon() async throws {
        // Not in the policy: the bus itself refuses, so the policy really is in force here.
        let foreign = try await dbusSendAsNobody([PropBusAPI.rootPath, "org.example.NotPropbus.Hello"])
        XCTAssertFalse(foreign.succeeded)
        XCTAssertTrue(foreign.stderr.contains("Rejected send message"), "\(foreign)")
        // Listed interfaces reach the daemon, which answers even methods it lacks itself.
        let unknown = try await dbusSendAsNobody([PropBusAPI.rootPath, "\(PropBusAPI.manager).NoSuchMethod"])
        XCTAssertTrue(unknown.stderr.contains(PropBusAPI.standard("UnknownMethod")), "\(unknown)")
        let ping = try await dbusSendAsNobody([PropBusAPI.rootPath, "\(PropBusAPI.peer).Ping"])
        assertSucceeded(ping)
        // Subscribing is the bus's business, open to all.
        let monitor = try await asNobody("busctl", ["--address=\(bus.address)", "--", "call", "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                                   "org.freedesktop.DBus", "AddMatch", "s", "type='signal',sender='\(PropBusAPI.busName)'"])
        assertSucceeded(monitor)
    }
}
