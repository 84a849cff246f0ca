import DBus
import XCTest

/// PropertiesChanged and ObjectManager signals, as a subscriber sees them.
///
/// "No signal" is proven without sleeping: a later change on the same object acts as a marker.
/// The daemon's signals reach a subscriber in the order it sent them, so if the marker's signal
/// arrives first, the no-op never emitted one.
final class PropertiesChangedTests: DaemonTestCase {
    func testEachRealChangeEmitsOnePropertiesChangedCarryingTheNewValue() async throws {
        try await client.create("ui.slider.level", "i", default: .int32(0))
        try await client.create("ui.slider.marker", "b", default: .boolean(false))
        let changes = try await client.recordChanges(ofGroup: "ui.slider")
        for level in [Int32(1), 2, 3] {
            try await client.set("ui.slider.level", .int32(level))
        }
        try await client.set("ui.slider.marker", .boolean(true))
        let signals = await changes.wait(count: 4)
        XCTAssertEqual(signals.map(\.changed), [
            ["level": .int32(1)], ["level": .int32(2)], ["level": .int32(3)], ["marker": .boolean(true)],
        ])
        XCTAssertEqual(signals.first?.arguments.first, .string(PropBusAPI.values))
        XCTAssertEqual(signals.first?.invalidated, [])
    }

    func testSameValueSetEmitsNoPropertiesChanged() async throws {
        try await client.create("ui.switch.on", "b", default: .boolean(false))
        try await client.create("ui.switch.marker", "i", default: .int32(0))
        try await client.set("ui.switch.on", .boolean(true))
        let before = try await client.getWithRevision("ui.switch.on")
        let changes = try await client.recordChanges(ofGroup: "ui.switch")
        try await client.set("ui.switch.on", .boolean(true))
        try await client.set("ui.switch.marker", .int32(1))
        let signals = await changes.wait(count: 1)
        XCTAssertEqual(signals.map(\.changed), [["marker": .int32(1)]], "a same-value Set emitted a signal")
        let after = try await client.getWithRevision("ui.switch.on")
        XCTAssertEqual(after.revision, before.revision, "a same-value Set moved the revision")
    }

    func testSettingTheDefaultValueWhenUnsetEmitsNoPropertiesChanged() async throws {
        try await client.create("ui.switch.on", "b", default: .boolean(false))
        try await client.create("ui.switch.marker", "i", default: .int32(0))
        let changes = try await client.recordChanges(ofGroup: "ui.switch")
        try await client.set("ui.switch.on", .boolean(false))
        try await client.set("ui.switch.marker", .int32(1))
        let signals = await changes.wait(count: 1)
        XCTAssertEqual(signals.map(\.changed), [["marker": .int32(1)]])
    }

    func testChangesMadeWithBusctlReachSubscribers() async throws {
        try await client.create("settings.theme", "s", default: .string("light"))
        let changes = try await client.recordChanges(ofGroup: "settings")
        let result = try await busctl(["set-property", PropBusAPI.busName, PropBusAPI.rootPath + "/settings", PropBusAPI.values, "theme", "s", "dark"])
        XCTAssertTrue(result.succeeded, "\(result)")
        let signals = await changes.wait(count: 1)
        XCTAssertEqual(signals.map(\.changed), [["theme": .string("dark")]])
    }

    func testResetEmitsTheDefault() async throws {
        try await client.create("settings.volume", "u", default: .uint32(10))
        try await client.create("settings.marker", "b", default: .boolean(false))
        try await client.set("settings.volume", .uint32(20))
        let changes = try await client.recordChanges(ofGroup: "settings")
        try await client.reset("settings.volume")
        let value = try await client.get("settings.volume")
        XCTAssertEqual(value, .uint32(10))
        // Resetting again changes nothing: no signal.
        try await client.reset("settings.volume")
        try await client.set("settings.marker", .boolean(true))
        let signals = await changes.wait(count: 2)
        XCTAssertEqual(signals.map(\.changed), [["volume": .uint32(10)], ["marker": .boolean(true)]])
    }

    func testResetOfAValueEqualToTheDefaultEmitsNothing() async throws {
        try await client.create("settings.volume", "u", default: .uint32(10))
        try await client.create("settings.marker", "b", default: .boolean(false))
        try await client.set("settings.volume", .uint32(10))
        let changes = try await client.recordChanges(ofGroup: "settings")
        try await client.reset("settings.volume")
        try await client.set("settings.marker", .boolean(true))
        let signals = await changes.wait(count: 1)
        XCTAssertEqual(signals.map(\.changed), [["marker": .boolean(true)]])
        let listed = try await client.list(prefix: "settings.volume")
        XCTAssertEqual(listed.first?.metadata["is_set"], .boolean(false), "Reset did not forget the stored value")
    }

    func testApplyOfSeveralKeysInOneGroupEmitsOneSignal() async throws {
        try await client.create("form.name", "s", default: .string(""))
        try await client.create("form.age", "u", default: .uint32(0))
        try await client.create("form.agree", "b", default: .boolean(false))
        try await client.create("form.marker", "i", default: .int32(0))
        try await client.set("form.agree", .boolean(true))
        let changes = try await client.recordChanges(ofGroup: "form")
        try await client.apply(set: [("form.name", .string("Ada")), ("form.age", .uint32(36))], reset: ["form.agree"])
        try await client.set("form.marker", .int32(1))
        let signals = await changes.wait(count: 2)
        XCTAssertEqual(signals.map(\.changed), [
            ["name": .string("Ada"), "age": .uint32(36), "agree": .boolean(false)],
            ["marker": .int32(1)],
        ])
    }

    func testApplyAcrossGroupsEmitsOneSignalPerGroupAndSkipsUnchangedKeys() async throws {
        try await client.create("left.a", "i", default: .int32(0))
        try await client.create("left.b", "i", default: .int32(0))
        try await client.create("right.c", "i", default: .int32(0))
        let changes = try await client.record(pathNamespace: PropBusAPI.rootPath, interface: PropBusAPI.properties, member: "PropertiesChanged")
        try await client.apply(set: [("left.a", .int32(1)), ("left.b", .int32(0)), ("right.c", .int32(3))])
        try await client.set("left.a", .int32(2))
        let signals = await changes.wait(count: 3)
        let byPath = Dictionary(grouping: signals.prefix(2), by: \.path).mapValues { $0.map(\.changed) }
        XCTAssertEqual(byPath, [
            PropBusAPI.rootPath + "/left": [["a": .int32(1)]],
            PropBusAPI.rootPath + "/right": [["c": .int32(3)]],
        ])
        XCTAssertEqual(signals.count, 3)
        XCTAssertEqual(signals.last?.changed, ["a": .int32(2)])
    }

    func testCompareAndSetEmitsTheNewValue() async throws {
        try await client.create("counter.hits", "t", default: .uint64(0))
        let changes = try await client.recordChanges(ofGroup: "counter")
        let current = try await client.getWithRevision("counter.hits")
        try await client.compareAndSet("counter.hits", revision: current.revision, .uint64(1))
        let signals = await changes.wait(count: 1)
        XCTAssertEqual(signals.map(\.changed), [["hits": .uint64(1)]])
    }

    func testFirstKeyOfAGroupEmitsInterfacesAddedAndDeletingTheLastEmitsInterfacesRemoved() async throws {
        let objects = try await client.record(path: PropBusAPI.rootPath, interface: PropBusAPI.objectManager)
        let groupPath = PropBusAPI.rootPath + "/ui/switch"
        try await client.create("ui.switch.on", "b", default: .boolean(true))
        try await client.create("ui.switch.label", "s", default: .string("Power"))
        try await client.delete("ui.switch.on")
        try await client.delete("ui.switch.label")
        let signals = await objects.wait { $0.contains { $0.member == "InterfacesRemoved" } }
        let added = signals.filter { $0.member == "InterfacesAdded" }
        let removed = signals.filter { $0.member == "InterfacesRemoved" }
        XCTAssertEqual(added.count, 1, "InterfacesAdded: \(added)")
        XCTAssertEqual(removed.count, 1, "InterfacesRemoved: \(removed)")
        XCTAssertEqual(added.first?.arguments.first, .objectPath(groupPath))
        let interfaces = added.first?.arguments.dropFirst().first?.stringKeyedEntries
        XCTAssertEqual(interfaces?[PropBusAPI.values]?.stringKeyedEntries?.mapValues(\.unwrappingVariantOnce), ["on": .boolean(true)],
                       "InterfacesAdded should carry the first key's value: \(added)")
        XCTAssertEqual(removed.first?.arguments, [.objectPath(groupPath), .array(of: .string, [.string(PropBusAPI.values)])])
        // Nothing in between: the second key and the first deletion change the object, not its interfaces.
        XCTAssertEqual(signals.map(\.member), ["InterfacesAdded", "InterfacesRemoved"])
    }

    func testGetManagedObjectsListsEveryGroupWithItsValues() async throws {
        try await client.create("ui.switch.on", "b", default: .boolean(true))
        try await client.create("settings.theme", "s", default: .string("dark"))
        let reply = try await client.call(PropBusAPI.objectManager, "GetManagedObjects")
        guard case .dictionary(_, _, let entries)? = reply.first else { return XCTFail("GetManagedObjects replied \(reply)") }
        var objects: [String: DBusValue] = [:]
        for entry in entries {
            guard case .objectPath(let path) = entry.key else { continue }
            objects[path] = entry.value.stringKeyedEntries?[PropBusAPI.values]
        }
        XCTAssertEqual(objects[PropBusAPI.rootPath + "/ui/switch"]?.stringKeyedEntries?.mapValues(\.unwrappingVariantOnce), ["on": .boolean(true)])
        XCTAssertEqual(objects[PropBusAPI.rootPath + "/settings"]?.stringKeyedEntries?.mapValues(\.unwrappingVariantOnce), ["theme": .string("dark")])
    }

    func testDeletedGroupObjectIsGoneFromTheBus() async throws {
        try await client.create("temp.key", "i", default: .int32(1))
        try await client.delete("temp.key")
        await assertDBusError(PropBusAPI.standard("UnknownObject")) {
            try await self.client.get("temp.key")
        }
    }
}
