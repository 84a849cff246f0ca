import DBus
import Etcd
import Foundation
import XCTest

/// etcd goes back in time under running hosts: restored from a backup (same cluster id, a lower
/// revision) or recreated empty with the same configuration. The hosts notice it, say so, and
/// follow etcd's state; the definitions they hold that etcd lacks are offered again, without
/// their values.
final class FleetRewindTests: FleetTestCase {
    override var ownsEtcd: Bool { true }

    /// Whether etcd holds the definition of `key`.
    private func etcdDefines(_ key: String) -> Bool {
        ((try? Fleet.allEntries(etcd, prefix: prefix)) ?? []).contains {
            String(decoding: $0.key, as: UTF8.self) == "/\(prefix)/defs/\(key)"
        }
    }

    func testARestoreFromABackupIsNoticedAndEveryHostFollowsTheRestoredState() async throws {
        let key = "lab.restore.mode"
        try await hostA.createFleet(key, "s", default: .string("none"))
        try await hostA.client.set(key, .string("backed-up"))
        let arrived = await hostB.waitFor(key, .string("backed-up"))
        XCTAssertTrue(arrived, diagnostics)
        let snapshot = try makeTemporaryDirectory(prefix: "pbit-backup").appendingPathComponent("fleet.db")
        try cluster!.saveSnapshot(to: snapshot)
        for n in 1...5 { try await hostA.client.set(key, .string("after-\(n)")) }
        try await hostA.createFleet("lab.restore.late", "i", default: .int32(0))
        try await hostA.client.set("lab.restore.late", .int32(7))
        try await Fleet.barrier(from: hostA, to: hostB)
        let managerB = try await hostB.recordManagerChanges()

        try cluster!.restore(0, from: snapshot)
        try cluster!.waitUntilServing()

        // etcd is the source of truth: both hosts go back to the backup's value.
        let restoredA = await hostA.waitFor(key, .string("backed-up"), timeout: 20)
        let restoredB = await hostB.waitFor(key, .string("backed-up"), timeout: 20)
        XCTAssertTrue(restoredA && restoredB, "the hosts kept the values from after the backup\n\(diagnostics)")
        // A key defined after the backup: its definition is offered again, its value dropped.
        let lateB = await hostB.waitFor("lab.restore.late", .int32(0), timeout: 20)
        XCTAssertTrue(lateB, "B kept the value etcd no longer holds\n\(diagnostics)")
        let offered = await eventually(timeout: 15) { self.etcdDefines("lab.restore.late") }
        XCTAssertTrue(offered, "the definition etcd lost was not offered again\n\(diagnostics)")
        let signals = await managerB.wait(timeout: 15) { $0.contains { $0.changed["FleetState"] == .string("connecting") } }
        XCTAssertTrue(signals.contains { $0.changed["FleetState"] == .string("connecting") },
                      "FleetState never said B was reconnecting to the restored etcd: \(signals)\n\(diagnostics)")
        let connectedA = await hostA.waitForFleetState("connected", timeout: 20)
        let connectedB = await hostB.waitForFleetState("connected", timeout: 20)
        XCTAssertTrue(connectedA && connectedB, diagnostics)
        XCTAssertTrue(hostB.stderr.contains("went back"), "B did not log the restore\n\(hostB.stderr.suffix(3000))")

        try await hostA.client.set(key, .string("after-restore"))
        let written = await hostB.waitFor(key, .string("after-restore"))
        XCTAssertTrue(written, "an acknowledged Set on A never reached B after the restore\n\(diagnostics)")
        try await hostB.client.set("lab.restore.late", .int32(8))
        let late = await hostA.waitFor("lab.restore.late", .int32(8))
        XCTAssertTrue(late, "a write of the re-offered key never reached A\n\(diagnostics)")
    }

    func testAWipedEtcdIsNoticedAndTheHostsOfferTheirDefinitionsAgainWithoutValues() async throws {
        let key = "lab.wipe.level"
        try await hostA.createFleet(key, "i", default: .int32(1))
        try await hostA.client.set(key, .int32(5))
        let arrived = await hostB.waitFor(key, .int32(5))
        XCTAssertTrue(arrived, diagnostics)

        try cluster!.wipe(0)
        try cluster!.waitUntilServing()

        let offered = await eventually(timeout: 20) { self.etcdDefines(key) }
        XCTAssertTrue(offered, "no host offered its definitions to the wiped etcd\n\(diagnostics)")
        let droppedA = await hostA.waitFor(key, .int32(1), timeout: 20)
        let droppedB = await hostB.waitFor(key, .int32(1), timeout: 20)
        XCTAssertTrue(droppedA && droppedB, "the hosts kept a value the wiped etcd does not hold\n\(diagnostics)")
        let connectedA = await hostA.waitForFleetState("connected", timeout: 20)
        let connectedB = await hostB.waitForFleetState("connected", timeout: 20)
        XCTAssertTrue(connectedA && connectedB, diagnostics)

        try await hostA.client.set(key, .int32(6))
        let written = await hostB.waitFor(key, .int32(6))
        XCTAssertTrue(written, "a Set on A after the wipe never reached B\n\(diagnostics)")
        try await hostA.createFleet("lab.wipe.fresh", "s", default: .string("x"))
        let created = await eventually(timeout: 10) { (try? await self.hostB.client.get("lab.wipe.fresh")) == .string("x") }
        XCTAssertTrue(created, "a key created on A after the wipe never reached B\n\(diagnostics)")

        await hostB.stop()
        try await hostB.start()
        let kept = try await hostB.client.get(key)
        XCTAssertEqual(kept, .int32(6), "after a restart B differs from etcd\n\(diagnostics)")
    }

    /// etcd recreated empty and written past a host's cursor while that host was frozen: when it
    /// runs again every revision it sees looks fine, but the member answers at a raft term below
    /// the one it answered with before (its raft log started again). The host notices, says so,
    /// and follows etcd's state: a value etcd no longer holds is dropped, as on the other host.
    func testAWipeWrittenPastAFrozenHostsCursorIsNoticedByTheMembersLowerRaftTerm() async throws {
        // Each restart of a lone member is an election: its raft term goes up by one or more.
        for _ in 0..<3 {
            cluster!.kill(0)
            try cluster!.launch(0)
            try cluster!.waitUntilServing()
        }
        let connected = await hostA.waitForFleetState("connected", timeout: 20)
        XCTAssertTrue(connected, diagnostics)
        let key = "lab.term.level", other = "lab.term.kept"
        try await hostA.createFleet(key, "i", default: .int32(1))
        try await hostA.createFleet(other, "i", default: .int32(1))
        try await hostA.client.set(other, .int32(9))
        try await hostA.client.set(key, .int32(5))
        let arrived = await hostB.waitFor(key, .int32(5))
        XCTAssertTrue(arrived, diagnostics)
        let pidA = try XCTUnwrap(hostA.process?.pid)

        kill(pidA, SIGSTOP)
        try cluster!.wipe(0)
        try cluster!.waitUntilServing()
        // Past every cursor the hosts had: writes outside the fleet's prefix.
        for n in 0..<300 { try etcd.put(key: Array("/elsewhere/\(n)".utf8), value: [1]) }
        kill(pidA, SIGCONT)

        let dropped = await hostA.waitFor(other, .int32(1), timeout: 20)
        XCTAssertTrue(dropped, "A kept a value the wiped etcd does not hold\n\(diagnostics)")
        XCTAssertTrue(hostA.stderr.contains("raft term"), "A did not log the member's lower raft term\n\(hostA.stderr.suffix(3000))")
        let connectedAgain = await hostA.waitForFleetState("connected", timeout: 20)
        XCTAssertTrue(connectedAgain, diagnostics)
        try await hostA.client.set(key, .int32(6))
        let written = await hostB.waitFor(key, .int32(6))
        XCTAssertTrue(written, "a Set on A after the wipe never reached B\n\(diagnostics)")
    }

    /// A host that was down during the wipe notices it at its start (etcd's revision below its
    /// cursor), instead of resuming from a cursor the new etcd never had.
    func testAHostStoppedDuringAWipeNoticesItWhenItStarts() async throws {
        let key = "lab.wipe.down"
        try await hostA.createFleet(key, "i", default: .int32(1))
        try await hostA.client.set(key, .int32(5))
        let arrived = await hostB.waitFor(key, .int32(5))
        XCTAssertTrue(arrived, diagnostics)
        await hostB.stop()

        try cluster!.wipe(0)
        try cluster!.waitUntilServing()
        let offered = await eventually(timeout: 20) { self.etcdDefines(key) }
        XCTAssertTrue(offered, "A did not offer its definitions to the wiped etcd\n\(diagnostics)")

        try await hostB.start()
        let dropped = await hostB.waitFor(key, .int32(1), timeout: 20)
        XCTAssertTrue(dropped, "B kept the value from before the wipe\n\(diagnostics)")
        try await hostA.client.set(key, .int32(7))
        let written = await hostB.waitFor(key, .int32(7))
        XCTAssertTrue(written, "a Set on A after the wipe never reached B\n\(diagnostics)")
    }
}
