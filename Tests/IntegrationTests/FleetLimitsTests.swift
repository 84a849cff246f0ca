import DBus
import Etcd
import XCTest

/// A call whose fleet writes exceed what etcd takes in one txn (128 operations, 1.5 MiB) is
/// refused with LimitsExceeded saying so, and nothing of it reaches the fleet.
final class FleetLimitsTests: FleetTestCase {
    func testApplyOverMoreFleetKeysThanOneTxnTakesIsRefusedAndChangesNothing() async throws {
        let keys = (0..<129).map { String(format: "bulk.k%03d", $0) }
        for key in keys { try await hostA.createFleet(key, "i", default: .int32(0)) }
        let defined = await hostB.waitFor(keys.last!, .int32(0), timeout: 20)
        XCTAssertTrue(defined, diagnostics)
        let changes = try await hostB.client.recordChanges(ofGroup: "bulk")

        await assertDBusError(PropBusAPI.error("LimitsExceeded"), containing: ["128"]) {
            try await self.hostA.client.apply(set: keys.map { ($0, .int32(1)) })
        }
        let onA = try await hostA.client.get(keys[0])
        XCTAssertEqual(onA, .int32(0), "the refused Apply changed A")

        // Within the limit it goes through as one change on B. (The daemon compares each key's
        // definition and value, two compares per key: 64 keys fit in one txn.)
        try await hostA.client.apply(set: keys.prefix(60).map { ($0, .int32(2)) })
        try await Fleet.barrier(from: hostA, to: hostB)
        XCTAssertEqual(changes.signals.count, 1, "B: \(changes.signals.map(\.changed.count))")
        XCTAssertEqual(changes.signals.first?.changed.count, 60)
        XCTAssertFalse(changes.signals.contains { $0.changed.values.contains(.int32(1)) }, "the refused Apply reached B")
    }

    func testFleetWritesAboveEtcdsRequestSizeAreRefused() async throws {
        try await hostA.createFleet("blob.first", "s", default: .string(""))
        try await hostA.createFleet("blob.second", "s", default: .string(""))
        let defined = await hostB.waitFor("blob.second", .string(""))
        XCTAssertTrue(defined, diagnostics)
        let changes = try await hostB.client.recordChanges(ofGroup: "blob")

        // Each value is within the daemon's own 1 MiB limit; together they pass etcd's 1.5 MiB.
        let big = String(repeating: "x", count: 900_000)
        await assertDBusError(PropBusAPI.error("LimitsExceeded"), containing: ["1.5 MiB"]) {
            try await self.hostA.client.apply(set: [("blob.first", .string(big)), ("blob.second", .string(big))])
        }
        try await hostA.client.set("blob.first", .string("small"))
        try await Fleet.barrier(from: hostA, to: hostB)
        XCTAssertEqual(changes.signals.map(\.changed), [["first": .string("small")]], "the refused Apply reached B")
    }
}
