import DBus
import Etcd
import XCTest

/// Writes racing between hosts: etcd's order decides, the same way everywhere.
final class FleetConflictTests: FleetTestCase {
    func testCompareAndSetConflictsWhenAnotherHostChangedTheKey() async throws {
        let key = "lab.door.code"
        try await hostA.createFleet(key, "s", default: .string("0000"))
        let defined = await hostB.waitFor(key, .string("0000"))
        XCTAssertTrue(defined, diagnostics)
        let seenByA = try await hostA.client.getWithRevision(key)

        try await hostB.client.set(key, .string("1111"))
        // Whether or not A's mirror has seen B's write yet, the CAS is fleet-wide.
        await assertDBusError(PropBusAPI.error("Conflict")) {
            try await hostA.client.compareAndSet(key, revision: seenByA.revision, .string("2222"))
        }
        let settled = await hostA.waitFor(key, .string("1111"))
        XCTAssertTrue(settled, "A does not read B's write\n\(diagnostics)")
        try await Fleet.barrier(from: hostA, to: hostB)
        let onB = try await hostB.client.get(key)
        XCTAssertEqual(onB, .string("1111"), "the refused CAS changed B")

        // With the revision A now reads, the CAS goes through, fleet-wide.
        let fresh = try await hostA.client.getWithRevision(key)
        try await hostA.client.compareAndSet(key, revision: fresh.revision, .string("3333"))
        let arrived = await hostB.waitFor(key, .string("3333"))
        XCTAssertTrue(arrived, diagnostics)
    }

    func testConcurrentSetsFromBothHostsConvergeToEtcdsLastValue() async throws {
        let key = "lab.clock.source"
        try await hostA.createFleet(key, "s", default: .string("none"))
        let defined = await hostB.waitFor(key, .string("none"))
        XCTAssertTrue(defined, diagnostics)

        // Both hosts pipeline their writes: every call is sent before the first reply.
        let a: FleetHost = hostA, b: FleetHost = hostB
        async let fromA = a.pipelinedSets(key, (0..<25).map { .string("from-A-\($0)") })
        async let fromB = b.pipelinedSets(key, (0..<25).map { .string("from-B-\($0)") })
        let (errorsA, errorsB) = try await (fromA, fromB)
        XCTAssertEqual((errorsA + errorsB).compactMap { $0?.description }, [], "plain Sets must not fail for racing each other")
        try await Fleet.barrier(from: hostA, to: hostB)
        try await Fleet.barrier(from: hostB, to: hostA)

        let entry = try XCTUnwrap(try Fleet.etcdEntry(etcd, prefix: prefix, key: key), "no etcd key for \(key)\n\(diagnostics)")
        let onA = try await hostA.client.get(key)
        let onB = try await hostB.client.get(key)
        XCTAssertEqual(onA, onB, "the hosts did not converge")
        guard case .string(let winner) = onA else { return XCTFail("A reads \(onA)") }
        XCTAssertTrue(winner == "from-A-24" || winner == "from-B-24", "the last value is not either host's last write: \(winner)")
        // etcd's last write is the one both hold (its bytes are in etcd's value, whatever the encoding).
        let other = winner.hasPrefix("from-A") ? "from-B-24" : "from-A-24"
        XCTAssertTrue(entry.value.containsSubsequence(Array(winner.utf8)), "etcd holds \(entry.value), not \(winner)")
        XCTAssertFalse(entry.value.containsSubsequence(Array(other.utf8)))
        let revisionOnA = try await hostA.etcdRevision(key)
        let revisionOnB = try await hostB.etcdRevision(key)
        XCTAssertEqual(revisionOnA, entry.modRevision)
        XCTAssertEqual(revisionOnB, entry.modRevision)
    }
}

extension Array where Element == UInt8 {
    /// Whether `needle` occurs in these bytes.
    func containsSubsequence(_ needle: [UInt8]) -> Bool {
        guard !needle.isEmpty, needle.count <= count else { return needle.isEmpty }
        return (0...(count - needle.count)).contains { self[$0..<($0 + needle.count)].elementsEqual(needle) }
    }
}
