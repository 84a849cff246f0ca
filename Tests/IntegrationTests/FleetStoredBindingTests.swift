import DBus
import Etcd
import Foundation
import PropBus
import PropBusSystem
import XCTest

/// A binding between a command's state key and a fleet key, stored by a build from before
/// `Bind` refused it, must not drive the fleet key on one host at start-up: the state key
/// changes outside any call, so its writes would never reach etcd (a fork).
final class FleetStoredBindingTests: FleetTestCase {
    func testAStoredBindingFromACommandsStateToAFleetKeyIsDroppedAtStartAndSaysSo() async throws {
        try await hostA.createFleet("lab.job.busy", "b", default: .boolean(false))
        let defined = await hostB.waitFor("lab.job.busy", .boolean(false))
        XCTAssertTrue(defined, diagnostics)
        try await hostB.client.createCommand("lab.run", ["exec": .array(of: .string, [.string("true")]), "persistent": .boolean(true)])

        // The row an earlier build wrote for `propctl bind lab.job.busy --to lab.run.Executing
        // --direction from --persistent` (its Bind did not refuse it yet).
        await hostB.stop()
        do {
            let store = try SQLiteStore(path: hostB.stateDirectory.appendingPathComponent(SQLiteStore.fileName).path)
            let state = try store.load()
            let id = max(state.nextBindingID, 1)
            var rows = StoreChanges()
            rows.saveBinding(Binding(id: id, key: try Key("lab.job.busy"), to: try Key("lab.run.Executing"), direction: .from, persistent: true))
            rows.saveNextBindingID(id + 1)
            try store.commit(WriteSet(store: rows), durability: .full)
        }
        try await hostB.start()

        let changes = try await hostB.client.recordChanges(ofGroup: "lab.job")
        _ = try await hostB.client.execute("lab.run")
        try await Fleet.barrier(from: hostA, to: hostB)

        XCTAssertEqual(changes.signals.map(\.changed), [], "the command's Executing drove the fleet key on B alone\n\(diagnostics)")
        XCTAssertNil(try Fleet.etcdEntry(etcd, prefix: prefix, key: "lab.job.busy"), "nothing was to reach etcd")
        XCTAssertTrue(hostB.stderr.contains("lab.job.busy") && hostB.stderr.contains("lab.run.Executing"),
                      "B's log does not name the binding it dropped:\n\(hostB.stderr)")
        let bindings = try await hostB.propctl(["bindings"])
        XCTAssertTrue(bindings.succeeded, "\(bindings)")
        XCTAssertFalse(bindings.stdout.contains("lab.job.busy"), "the binding is still listed:\n\(bindings.stdout)")

        // Dropped, not only skipped: the next start has nothing to say about it.
        await hostB.stop()
        try await hostB.start()
        let again = try await hostB.propctl(["bindings"])
        XCTAssertFalse(again.stdout.contains("lab.job.busy"), "\(again.stdout)")
    }

    func testABindingFromACommandsStateEndsWhenItsLocalKeyBecomesAFleetKey() async throws {
        // Allowed while the key is B's own.
        try await hostB.client.create("lab.task.flag", "b", default: .boolean(false))
        try await bindExecuting(of: "lab.worker.run", to: "lab.task.flag")

        // The fleet defines a key of that name: B takes the fleet's definition.
        try await hostA.createFleet("lab.task.flag", "b", default: .boolean(false))
        let shared = await eventually(timeout: 10) {
            (try? await self.hostB.client.list(prefix: "lab.task.flag").first?.metadata["scope"]) == .string("fleet")
        }
        XCTAssertTrue(shared, diagnostics)

        try await assertExecutingNoLongerDrives("lab.task.flag", command: "lab.worker.run")
        XCTAssertTrue(hostB.stderr.contains("lab.task.flag ↔ lab.worker.run.Executing"), "B's log does not name the binding it ended:\n\(hostB.stderr)")
    }

    /// As above, but this host itself makes its local key a fleet key (CreateProperty with
    /// scope fleet): its own write must end the binding too, or the command's Executing drives
    /// the fleet key on this host alone.
    func testABindingFromACommandsStateEndsWhenThisHostMakesItsLocalKeyAFleetKey() async throws {
        try await hostB.client.create("lab.chore.flag", "b", default: .boolean(false))
        try await bindExecuting(of: "lab.chore.run", to: "lab.chore.flag")

        try await hostB.createFleet("lab.chore.flag", "b", default: .boolean(false))
        let defined = await hostA.waitFor("lab.chore.flag", .boolean(false))
        XCTAssertTrue(defined, diagnostics)

        try await assertExecutingNoLongerDrives("lab.chore.flag", command: "lab.chore.run")
        XCTAssertTrue(hostB.stderr.contains("lab.chore.flag ↔ lab.chore.run.Executing"), "B's log does not name the binding it ended:\n\(hostB.stderr)")
    }
}
