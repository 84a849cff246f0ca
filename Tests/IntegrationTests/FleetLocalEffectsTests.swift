import DBus
import Etcd
import PropBus
import XCTest

/// A remote change is applied as one model round on the receiving host: bindings from the
/// fleet key to local keys run, and command predicates reading it are evaluated again; what
/// follows stays local.
final class FleetLocalEffectsTests: FleetTestCase {
    func testAFleetChangeDrivesBBindingIntoALocalKey() async throws {
        try await hostA.createFleet("lab.screen.level", "i", default: .int32(0))
        let defined = await hostB.waitFor("lab.screen.level", .int32(0))
        XCTAssertTrue(defined, diagnostics)
        try await hostB.client.create("host.screen.brightness", "i", default: .int32(0))
        let bound = try await hostB.client.call(PropBusAPI.manager, "Bind",
                                                [.string("host.screen.brightness"), .string("lab.screen.level"), .vardict([:])])
        XCTAssertEqual(bound.count, 1, "Bind replied \(bound)")
        let local = try await hostB.client.recordChanges(ofGroup: "host.screen")

        try await hostA.client.set("lab.screen.level", .int32(70))
        try await Fleet.barrier(from: hostA, to: hostB)

        XCTAssertEqual(local.signals.map(\.changed), [["brightness": .int32(70)]], "the binding did not run on B\n\(diagnostics)")
        let written = Fleet.dump(etcd, prefix: prefix)
        XCTAssertFalse(written.contains("host.screen"), "B's local key reached etcd:\n\(written)")
        let onA = try await hostA.client.list(prefix: "host.")
        XCTAssertEqual(onA.map(\.key), [], "B's local key appeared on A")
    }

    func testACommandPredicateOnBReadsTheFleetKey() async throws {
        try await hostA.createFleet("lab.job.allowed", "b", default: .boolean(false))
        let defined = await hostB.waitFor("lab.job.allowed", .boolean(false))
        XCTAssertTrue(defined, diagnostics)
        try await hostB.client.createCommand("host.job", ["exec": .array(of: .string, [.string("true")]),
                                                           "enabled_when": .string("lab.job.allowed")])
        let disabled = try await hostB.client.commandProperty("host.job", "Enabled")
        XCTAssertEqual(disabled, .boolean(false))
        let changes = try await hostB.client.record(path: Key.objectPath(ofGroup: "host.job"), interface: PropBusAPI.properties,
                                                    member: "PropertiesChanged")

        try await hostA.client.set("lab.job.allowed", .boolean(true))
        try await Fleet.barrier(from: hostA, to: hostB)

        XCTAssertTrue(changes.signals.contains { $0.changed["Enabled"] == .boolean(true) },
                      "B's command was not enabled by the fleet change: \(changes.signals)\n\(diagnostics)")
        let enabled = try await hostB.client.commandProperty("host.job", "Enabled")
        XCTAssertEqual(enabled, .boolean(true))
    }

    func testAFleetToFleetBindingRunsOnlyOnTheWritingHostInsideItsTxn() async throws {
        try await hostA.createFleet("lab.pair.source", "i", default: .int32(0))
        try await hostA.createFleet("lab.pair.copy", "i", default: .int32(0))
        let defined = await hostB.waitFor("lab.pair.copy", .int32(0))
        XCTAssertTrue(defined, diagnostics)
        _ = try await hostA.client.call(PropBusAPI.manager, "Bind", [.string("lab.pair.copy"), .string("lab.pair.source"), .vardict([:])])
        let changes = try await hostB.client.recordChanges(ofGroup: "lab.pair")

        // A writes the source: its binding writes the copy in the same txn, one change on B.
        try await hostA.client.set("lab.pair.source", .int32(5))
        try await Fleet.barrier(from: hostA, to: hostB)
        XCTAssertEqual(changes.signals.map(\.changed), [["source": .int32(5), "copy": .int32(5)]], diagnostics)
        let source = try await hostB.etcdRevision("lab.pair.source")
        let copy = try await hostB.etcdRevision("lab.pair.copy")
        XCTAssertEqual(source, copy, "the binding's write was not in the writer's txn")

        // B writes the source: B has no binding, and A does not run its own on a remote change.
        try await hostB.client.set("lab.pair.source", .int32(7))
        try await Fleet.barrier(from: hostB, to: hostA)
        try await Fleet.barrier(from: hostA, to: hostB)
        let copyOnA = try await hostA.client.get("lab.pair.copy")
        let copyOnB = try await hostB.client.get("lab.pair.copy")
        XCTAssertEqual(copyOnA, .int32(5), "A ran its fleet binding on B's write")
        XCTAssertEqual(copyOnB, .int32(5))
    }

    /// A redefinition that changes a fleet key's value (a new default, no stored value) arrives
    /// on B as a definition: B's own fleet↔fleet binding must not run on it, or it writes the
    /// other fleet key on B only (A and etcd keep theirs).
    func testAFleetRedefinitionDoesNotRunBsFleetBindingOnBOnly() async throws {
        try await hostA.createFleet("lab.pair.source", "i", default: .int32(0))
        try await hostA.createFleet("lab.pair.copy", "i", default: .int32(0))
        let defined = await hostB.waitFor("lab.pair.copy", .int32(0))
        XCTAssertTrue(defined, diagnostics)
        _ = try await hostB.client.call(PropBusAPI.manager, "Bind", [.string("lab.pair.copy"), .string("lab.pair.source"), .vardict([:])])

        try await hostA.createFleet("lab.pair.source", "i", default: .int32(9))
        let redefined = await hostB.waitFor("lab.pair.source", .int32(9))
        XCTAssertTrue(redefined, diagnostics)
        try await Fleet.barrier(from: hostA, to: hostB)

        let copyOnA = try await hostA.client.get("lab.pair.copy")
        let copyOnB = try await hostB.client.get("lab.pair.copy")
        XCTAssertEqual(copyOnA, .int32(0))
        XCTAssertEqual(copyOnB, copyOnA, "B ran its fleet binding on A's redefinition: lab.pair.copy changed on B only\n\(diagnostics)")
        XCTAssertNil(try Fleet.etcdEntry(etcd, prefix: prefix, key: "lab.pair.copy"), "nobody wrote lab.pair.copy in the fleet")
    }

    /// A Bind whose first sync writes a fleet key from a local key sends that value to etcd
    /// first, then makes the binding locally. A Set of the local key served meanwhile (pipelined
    /// right behind the Bind) must not let that local step write the fleet key on B alone.
    func testABindWhoseLocalSideChangesWhileItsTxnIsOutLeavesTheFleetKeyTheSameEverywhere() async throws {
        try await hostA.createFleet("lab.bound.copy", "i", default: .int32(0))
        let defined = await hostB.waitFor("lab.bound.copy", .int32(0))
        XCTAssertTrue(defined, diagnostics)
        try await hostB.client.create("host.bound.lead", "i", default: .int32(3))

        let bind = try Message.methodCall(destination: PropBusAPI.busName, path: PropBusAPI.rootPath, interface: PropBusAPI.manager, member: "Bind")
        try bind.append([.string("lab.bound.copy"), .string("host.bound.lead"), .vardict([:])])
        let (path, name) = PropBusAPI.locate("host.bound.lead")
        let set = try Message.methodCall(destination: PropBusAPI.busName, path: path, interface: PropBusAPI.properties, member: "Set")
        try set.append([.string(PropBusAPI.values), .string(name), .variant(.int32(9))])
        let errors = await hostB.pipelined([bind, set])
        XCTAssertEqual(errors.map { $0?.message }, [nil, nil])

        try await Fleet.barrier(from: hostB, to: hostA)
        let copyOnB = try await hostB.client.get("lab.bound.copy")
        let copyOnA = try await hostA.client.get("lab.bound.copy")
        XCTAssertEqual(copyOnB, copyOnA, "B shows another value of the fleet key than A (which has etcd's)\n\(diagnostics)")
    }
}
