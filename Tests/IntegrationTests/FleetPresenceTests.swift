import DBus
import Etcd
import Foundation
import XCTest

/// Presence: a host is listed by `propctl status --fleet` while its lease lives. A host that
/// stops cleanly revokes it and leaves at once; a killed one leaves when the lease (10 s)
/// expires.
final class FleetPresenceTests: FleetTestCase {
    /// The host names `propctl status --fleet` prints on A.
    private func listedOnA() async throws -> String {
        let status = try await hostA.propctl(["status", "--fleet"])
        guard status.succeeded else { throw TestSetupError("propctl status --fleet failed: \(status)") }
        return status.stdout
    }

    func testACleanlyStoppedHostLeavesStatusFleetAtOnce() async throws {
        let before = try await listedOnA()
        XCTAssertTrue(before.contains(hostA.name) && before.contains(hostB.name), "\(before)\n\(diagnostics)")

        // SIGTERM; stop() returns once B's name is gone, which B releases after revoking its lease.
        await hostB.stop()
        let after = try await listedOnA()
        XCTAssertTrue(after.contains(hostA.name), after)
        XCTAssertFalse(after.contains(hostB.name), "B is still listed right after a clean stop: its lease was not revoked\n\(after)\n\(diagnostics)")
    }

    func testAKilledHostLeavesStatusFleetWhenItsLeaseExpires() async throws {
        let before = try await listedOnA()
        XCTAssertTrue(before.contains(hostB.name), "\(before)\n\(diagnostics)")

        await hostB.kill()
        // Nobody revoked it: B stays until etcd expires the 10 s lease. A generous deadline
        // (etcd checks expiry on its own clock, on a loaded machine).
        // Each poll spawns propctl: a quarter second apart, not eventually()'s 5 ms.
        var listed = ""
        var left = false
        let deadline = Date().addingTimeInterval(40)
        while !left, Date() < deadline {
            listed = (try? await listedOnA()) ?? ""
            left = listed.contains(hostA.name) && !listed.contains(hostB.name)
            if !left { try await Task.sleep(nanoseconds: 250_000_000) }
        }
        XCTAssertTrue(left, "the killed host B is still listed 40 s later:\n\(listed)\n\(diagnostics)")

        // And it comes back with its next start.
        try await hostB.start()
        let back = await eventually(timeout: 10) { ((try? await self.listedOnA()) ?? "").contains(self.hostB.name) }
        XCTAssertTrue(back, "B is not listed again after a restart\n\(diagnostics)")
    }
}
