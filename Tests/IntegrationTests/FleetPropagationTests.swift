import DBus
import Etcd
import XCTest

/// Fleet-scoped keys travel between hosts through etcd: values, definitions, Apply and Reset,
/// as a subscriber on the other host sees them. Local keys do not travel.
///
/// Hosts A and B are two buses with a `propbusd --fleet` each, on one etcd shared by the
/// test process, under a prefix of the test's own. "Nothing more came" is proven with
/// ``Fleet/barrier(from:to:)``: a later fleet write whose signal must arrive.
final class FleetPropagationTests: FleetTestCase {
    private let values = PropBusAPI.values

    func testSetOnAArrivesAsPropertiesChangedOnB() async throws {
        try await hostA.createFleet("kiosk.display.brightness", "i", default: .int32(50))
        let defined = await hostB.waitFor("kiosk.display.brightness", .int32(50))
        XCTAssertTrue(defined, "the fleet key created on A never appeared on B\n\(diagnostics)")
        let changes = try await hostB.client.recordChanges(ofGroup: "kiosk.display")

        let set = try await hostA.busctl(["set-property", PropBusAPI.busName, PropBusAPI.rootPath + "/kiosk/display",
                                          values, "brightness", "i", "80"])
        XCTAssertTrue(set.succeeded, "\(set)")
        try await Fleet.barrier(from: hostA, to: hostB)
        XCTAssertEqual(changes.signals.map(\.changed), [["brightness": .int32(80)]], diagnostics)
        XCTAssertEqual(changes.signals.first?.arguments.first, .string(values))

        let read = try await hostB.propctl(["get", "kiosk.display.brightness"])
        XCTAssertEqual(read.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "80", "\(read)")
    }

    func testFleetDefinitionsAreSharedCreatedAndDeleted() async throws {
        let objects = try await hostB.client.record(path: PropBusAPI.rootPath, interface: PropBusAPI.objectManager)
        let created = try await hostA.propctl(["create", "--scope", "fleet", "--default", "light", "lab.theme.name", "s"])
        XCTAssertTrue(created.succeeded, "\(created)")
        let groupPath = PropBusAPI.rootPath + "/lab/theme"
        let added = await objects.wait { $0.contains { $0.member == "InterfacesAdded" && $0.arguments.first == .objectPath(groupPath) } }
        XCTAssertTrue(added.contains { $0.member == "InterfacesAdded" && $0.arguments.first == .objectPath(groupPath) },
                      "no InterfacesAdded for \(groupPath) on B: \(added)\n\(diagnostics)")
        let name = try await hostB.client.get("lab.theme.name")
        XCTAssertEqual(name, .string("light"))
        let listed = try await hostB.client.list(prefix: "lab.theme.")
        XCTAssertEqual(listed.first?.metadata["scope"], .string("fleet"), "B lists \(listed)")

        // A second key in the group, then its deletion: the group stays, the key is invalidated.
        let changes = try await hostB.client.recordChanges(ofGroup: "lab.theme")
        try await hostA.createFleet("lab.theme.accent", "s", default: .string("blue"))
        let accent = await hostB.waitFor("lab.theme.accent", .string("blue"))
        XCTAssertTrue(accent, diagnostics)
        let deleted = try await hostA.propctl(["delete", "lab.theme.accent"])
        XCTAssertTrue(deleted.succeeded, "\(deleted)")
        let invalidated = await changes.wait { $0.contains { $0.invalidated.contains("accent") } }
        XCTAssertTrue(invalidated.contains { $0.invalidated.contains("accent") },
                      "B never invalidated the deleted key: \(invalidated)\n\(diagnostics)")
        do {
            let value = try await hostB.client.get("lab.theme.accent")
            XCTFail("the key deleted on A still reads \(value) on B")
        } catch is DBusError {}

        // The group's last key: the object goes away on B.
        let last = try await hostA.propctl(["delete", "lab.theme.name"])
        XCTAssertTrue(last.succeeded, "\(last)")
        let removed = await objects.wait { $0.contains { $0.member == "InterfacesRemoved" && $0.arguments.first == .objectPath(groupPath) } }
        XCTAssertTrue(removed.contains { $0.member == "InterfacesRemoved" && $0.arguments.first == .objectPath(groupPath) },
                      "no InterfacesRemoved for \(groupPath) on B: \(removed)\n\(diagnostics)")
    }

    func testAFleetKeyDeclaredInAModelFileIsSharedWithTheFleet() async throws {
        let model = hostA.bus.directory.appendingPathComponent("kiosk.json")
        try """
        {"groups": {"kiosk.banner": {"properties": {
          "text": {"type": "s", "default": "welcome", "scope": "fleet", "value": "opening soon"}
        }}}}
        """.write(to: model, atomically: true, encoding: .utf8)
        let objects = try await hostB.client.record(path: PropBusAPI.rootPath, interface: PropBusAPI.objectManager)
        await hostA.stop()
        try await hostA.start(extraArguments: ["--model", model.path])

        let arrived = await hostB.waitFor("kiosk.banner.text", .string("opening soon"))
        XCTAssertTrue(arrived, "the model file's fleet key did not reach B\n\(diagnostics)")
        XCTAssertTrue(objects.signals.contains { $0.member == "InterfacesAdded" && $0.arguments.first == .objectPath(PropBusAPI.rootPath + "/kiosk/banner") },
                      "no InterfacesAdded on B: \(objects.signals)")
        let listed = try await hostB.client.list(prefix: "kiosk.banner.")
        XCTAssertEqual(listed.first?.metadata["scope"], .string("fleet"))
        // And it is a fleet key like any other: B's write reaches A.
        try await hostB.client.set("kiosk.banner.text", .string("open"))
        let back = await hostA.waitFor("kiosk.banner.text", .string("open"))
        XCTAssertTrue(back, diagnostics)
    }

    func testAFleetKeyRedefinedWithAnotherTypeFollowsOnB() async throws {
        try await hostA.createFleet("lab.kind.value", "i", default: .int32(0))
        try await hostA.client.set("lab.kind.value", .int32(5))
        let first = await hostB.waitFor("lab.kind.value", .int32(5))
        XCTAssertTrue(first, diagnostics)

        // A type cannot change in place: delete, then create again with the new type.
        try await hostA.client.delete("lab.kind.value")
        try await hostA.createFleet("lab.kind.value", "s", default: .string("five"))
        let second = await hostB.waitFor("lab.kind.value", .string("five"))
        XCTAssertTrue(second, "B did not follow the new definition\n\(diagnostics)")
        let listed = try await hostB.client.list(prefix: "lab.kind.")
        XCTAssertEqual(listed.map(\.type), ["s"])
        try await hostB.client.set("lab.kind.value", .string("six"))
        let back = await hostA.waitFor("lab.kind.value", .string("six"))
        XCTAssertTrue(back, diagnostics)
    }

    func testLocalKeysStayLocal() async throws {
        // The same local key on both hosts: a write on A must not reach B's copy.
        try await hostA.client.create("host.local.note", "s", default: .string("none"))
        try await hostB.client.create("host.local.note", "s", default: .string("none"))
        let changes = try await hostB.client.recordChanges(ofGroup: "host.local")
        let objects = try await hostB.client.record(path: PropBusAPI.rootPath, interface: PropBusAPI.objectManager)

        try await hostA.client.set("host.local.note", .string("only on A"))
        try await hostA.client.create("host.local.extra", "i", default: .int32(1))
        try await hostA.client.create("host.elsewhere.key", "i", default: .int32(1))
        try await Fleet.barrier(from: hostA, to: hostB)

        XCTAssertEqual(changes.signals.map(\.description), [], "a local change on A was signalled on B")
        XCTAssertEqual(objects.signals.map(\.description), [], "a local definition on A was announced on B")
        let note = try await hostB.client.get("host.local.note")
        XCTAssertEqual(note, .string("none"))
        let listedOnB = try await hostB.client.list(prefix: "host.").map(\.key)
        XCTAssertEqual(listedOnB, ["host.local.note"])
        for key in ["host.local.note", "host.local.extra", "host.elsewhere.key"] {
            XCTAssertNil(try Fleet.etcdEntry(etcd, prefix: prefix, key: key), "local key \(key) was written to etcd")
        }
        let written = Fleet.dump(etcd, prefix: prefix)
        XCTAssertFalse(written.contains("/keys/host.") || written.contains("/defs/host."), "a local key reached etcd:\n\(written)")
    }

    func testApplyOverSeveralFleetKeysIsOnePropertiesChangedPerObjectOnB() async throws {
        try await hostA.createFleet("lab.screen.width", "i", default: .int32(0))
        try await hostA.createFleet("lab.screen.height", "i", default: .int32(0))
        try await hostA.createFleet("lab.audio.volume", "i", default: .int32(0))
        let defined = await hostB.waitFor("lab.audio.volume", .int32(0))
        XCTAssertTrue(defined, diagnostics)
        let screen = try await hostB.client.recordChanges(ofGroup: "lab.screen")
        let audio = try await hostB.client.recordChanges(ofGroup: "lab.audio")

        try await hostA.client.apply(set: [("lab.screen.width", .int32(1920)), ("lab.screen.height", .int32(1080)),
                                           ("lab.audio.volume", .int32(30))])
        try await Fleet.barrier(from: hostA, to: hostB)

        XCTAssertEqual(screen.signals.map(\.changed), [["width": .int32(1920), "height": .int32(1080)]], diagnostics)
        XCTAssertEqual(audio.signals.map(\.changed), [["volume": .int32(30)]], diagnostics)
        // One txn: one etcd revision for the three keys.
        var revisions: Set<Int64?> = []
        for key in ["lab.screen.width", "lab.screen.height", "lab.audio.volume"] {
            revisions.insert(try await hostB.etcdRevision(key))
        }
        XCTAssertEqual(revisions.count, 1, "the Apply was not one etcd txn: revisions \(revisions)")
        XCTAssertFalse(revisions.contains(nil), "no etcd_revision on B")
    }

    func testResetOnAReachesB() async throws {
        try await hostA.createFleet("lab.light.level", "u", default: .uint32(10))
        try await hostA.client.set("lab.light.level", .uint32(70))
        let arrived = await hostB.waitFor("lab.light.level", .uint32(70))
        XCTAssertTrue(arrived, diagnostics)
        let changes = try await hostB.client.recordChanges(ofGroup: "lab.light")

        let reset = try await hostA.propctl(["reset", "lab.light.level"])
        XCTAssertTrue(reset.succeeded, "\(reset)")
        try await Fleet.barrier(from: hostA, to: hostB)

        XCTAssertEqual(changes.signals.map(\.changed), [["level": .uint32(10)]], diagnostics)
        let read = try await hostB.gdbusCall(PropBusAPI.rootPath + "/lab/light", "org.freedesktop.DBus.Properties.Get", [values, "level"])
        XCTAssertEqual(read.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "(<uint32 10>,)", "\(read)")
    }

    func testOwnWritesAreAnnouncedOnceOnTheWritingHost() async throws {
        try await hostA.createFleet("lab.bell.rings", "i", default: .int32(0))
        let defined = await hostB.waitFor("lab.bell.rings", .int32(0))
        XCTAssertTrue(defined, diagnostics)
        let changes = try await hostA.client.recordChanges(ofGroup: "lab.bell")

        // Pipelined writes: the echo of an earlier one, taken for news after a later one was
        // applied, would take the value back.
        let errors = try await hostA.pipelinedSets("lab.bell.rings", (1...8).map { .int32(Int32($0)) })
        XCTAssertEqual(errors.compactMap { $0 }.map(\.description), [])
        // B's marker is a later etcd revision than A's writes: once A signals it, A's watch
        // has also delivered A's own writes back to it.
        try await Fleet.barrier(from: hostB, to: hostA)

        let announced = changes.signals.compactMap { $0.changed["rings"].flatMap(Fleet.integer) }
        XCTAssertEqual(announced, announced.sorted(), "A went back to a value of its own when it came back from etcd\n\(diagnostics)")
        XCTAssertEqual(Set(announced).count, announced.count, "A announced one of its own writes twice: \(announced)")
        XCTAssertEqual(announced.last, 8, "\(announced)")
    }

    func testEtcdRevisionMetadataIsEtcdsModRevision() async throws {
        try await hostA.createFleet("lab.fan.speed", "i", default: .int32(0))
        try await hostA.client.set("lab.fan.speed", .int32(3))
        let arrived = await hostB.waitFor("lab.fan.speed", .int32(3))
        XCTAssertTrue(arrived, diagnostics)
        try await Fleet.barrier(from: hostA, to: hostB)

        let entry = try XCTUnwrap(try Fleet.etcdEntry(etcd, prefix: prefix, key: "lab.fan.speed"), "no etcd key for lab.fan.speed\n\(diagnostics)")
        let onA = try await hostA.etcdRevision("lab.fan.speed")
        let onB = try await hostB.etcdRevision("lab.fan.speed")
        XCTAssertEqual(onA, entry.modRevision, "A's etcd_revision")
        XCTAssertEqual(onB, entry.modRevision, "B's etcd_revision")
        // B's FleetRevision has passed the marker, a later revision.
        let fleetRevision = try await hostB.managerProperty("FleetRevision")
        XCTAssertGreaterThan(Fleet.integer(fleetRevision) ?? 0, entry.modRevision, "FleetRevision \(fleetRevision)")
    }
}
