import DBus
import Etcd
import Foundation
import PropBus
import XCTest

/// `Manager.FleetRevision` is announced with PropertiesChanged, at most every 100 ms, always
/// ending at the revision the mirror reached.
final class FleetRevisionTests: FleetTestCase {
    func testABurstOfWritesIsAnnouncedUpToItsLastRevision() async throws {
        try await hostA.createFleet("lab.burst.n", "i", default: .int32(0))
        let defined = await hostB.waitFor("lab.burst.n", .int32(0))
        XCTAssertTrue(defined, diagnostics)
        let changes = try await hostB.recordManagerChanges()

        let writes = 40
        for value in 1...writes { try await hostA.client.set("lab.burst.n", .int32(Int32(value))) }
        let etcdRevision = try await hostA.etcdRevision("lab.burst.n")
        let last = try XCTUnwrap(etcdRevision)

        let seen = await changes.wait { signals in
            signals.contains { $0.changed["FleetRevision"].flatMap(Fleet.integer) == last }
        }
        let announced = seen.compactMap { $0.changed["FleetRevision"].flatMap(Fleet.integer) }
        XCTAssertEqual(announced.last, last, "B never announced the burst's last revision \(last): \(announced)\n\(diagnostics)")
        XCTAssertEqual(announced, announced.sorted(), "FleetRevision went back: \(announced)")
        // One per revision would be `writes` signals; the burst takes well under a second.
        XCTAssertLessThan(announced.count, writes, "FleetRevision was announced for every revision: \(announced)")
    }
}
