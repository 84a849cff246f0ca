import DBus
import Etcd
import Foundation
import XCTest

/// `writers` of a fleet key is enforced by the host that receives the call, before anything
/// goes to etcd: a denied write reaches neither etcd nor another host. Both hosts run on a
/// private system bus with `--system-access`; the test calls as `nobody`.
final class FleetAccessControlTests: FleetSystemAccessTestCase {
    func testASetByANonWriterIsDeniedOnTheReceivingHostAndReachesNeitherEtcdNorB() async throws {
        try await hostA.createFleet("lab.lock.code", "i", default: .int32(0), options: ["writers": .array(of: .string, [.string("root")])])
        // A key nobody may write: the same path through A to etcd and B works for nobody.
        try await hostA.createFleet("lab.lock.note", "i", default: .int32(0), options: ["writers": .array(of: .string, [.string("nobody")])])
        let defined = await hostB.waitFor("lab.lock.note", .int32(0))
        XCTAssertTrue(defined, diagnostics)
        let changes = try await hostB.client.recordChanges(ofGroup: "lab.lock")

        let denied = try await setAsNobody(on: hostA, "lab.lock.code", "1234")
        XCTAssertFalse(denied.succeeded, "nobody wrote a fleet key it is not a writer of: \(denied)\n\(diagnostics)")
        XCTAssertTrue(denied.stderr.contains(PropBusAPI.standard("AccessDenied")), "\(denied)")
        XCTAssertTrue(denied.stderr.contains("uid 65534 may not write lab.lock.code"), "\(denied)")
        // B holds the fleet's definition, writers included, and enforces it too.
        let deniedOnB = try await setAsNobody(on: hostB, "lab.lock.code", "4321")
        XCTAssertTrue(deniedOnB.stderr.contains(PropBusAPI.standard("AccessDenied")), "\(deniedOnB)")

        let allowed = try await setAsNobody(on: hostA, "lab.lock.note", "7")
        XCTAssertTrue(allowed.succeeded, "\(allowed)")
        // Barrier: a later allowed write, from A, arriving on B.
        try await hostA.client.set("lab.lock.code", .int32(42))
        let arrived = await changes.wait(timeout: 15) { $0.contains { $0.changed["code"] == .int32(42) } }
        XCTAssertTrue(arrived.contains { $0.changed["code"] == .int32(42) }, "the allowed write never reached B\n\(diagnostics)")

        XCTAssertEqual(changes.signals.map(\.changed), [["note": .int32(7)], ["code": .int32(42)]], diagnostics)
        let onA = try await hostA.client.get("lab.lock.code")
        XCTAssertEqual(onA, .int32(42))
        // etcd saw one write of the key: the allowed one.
        let entry = try XCTUnwrap(try Fleet.etcdEntry(etcd, prefix: prefix, key: "lab.lock.code"), diagnostics)
        XCTAssertEqual(entry.version, 1, "etcd holds more than the one allowed write of lab.lock.code\n\(diagnostics)")
    }
}
