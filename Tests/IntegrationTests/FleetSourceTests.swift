import DBus
import Etcd
import Foundation
import PropBus
import XCTest

/// A mirror belongs to one etcd cluster and prefix. A host started with another (moved to
/// another fleet, or a cluster rebuilt) must mirror the new fleet: its cursor and the keys'
/// revisions count in the old one, and resuming from them would skip what the new fleet already
/// holds and keep what only the old one had.
final class FleetSourceTests: FleetTestCase {
    func testAHostMovedToAnotherPrefixMirrorsTheNewFleetNotTheOld() async throws {
        try await hostA.createFleet("lab.src.old", "i", default: .int32(1))
        let mirrored = await hostB.waitFor("lab.src.old", .int32(1))
        XCTAssertTrue(mirrored, diagnostics)

        // A moves first and defines a key in the other fleet…
        let other = prefix + "-other"
        await hostA.stop()
        try await hostA.start(endpoints: endpoints, prefix: other)
        try await hostA.createFleet("lab.src.new", "i", default: .int32(2))
        // …then B's cursor passes that revision in its own fleet (a key of no host's), and B
        // moves too.
        let passed = try etcd.put(key: Array("/\(prefix)/other/marker".utf8), value: Array("x".utf8)).header.revision
        let cursorMoved = await eventually(timeout: 10) {
            ((try? await self.hostB.managerProperty("FleetRevision")).flatMap(Fleet.integer) ?? 0) >= passed
        }
        XCTAssertTrue(cursorMoved, diagnostics)
        await hostB.stop()
        try await hostB.start(endpoints: endpoints, prefix: other)

        let arrived = await hostB.waitFor("lab.src.new", .int32(2))
        XCTAssertTrue(arrived, "B, moved to the other fleet, does not have its key\n\(diagnostics)")
        let gone = await eventually(timeout: 10) { (try? await self.hostB.client.get("lab.src.old")) == nil }
        XCTAssertTrue(gone, "B, moved to the other fleet, still has the old fleet's key\n\(diagnostics)")
        // The old fleet still has its key: moving a host deletes nothing in etcd.
        let old = try etcd.range(key: Array("/\(prefix)/defs/lab.src.old".utf8))
        XCTAssertEqual(old.kvs.count, 1)
    }
}
