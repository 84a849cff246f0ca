import DBus
import Foundation
import XCTest

/// Binding lifetimes (docs/channels.md): a non-persistent binding ends with its creator's connection, a
/// persistent one is stored and survives restarts; the per-connection limit; and the API as
/// busctl and gdbus users drive it.
final class DaemonBindingLifecycleTests: DaemonBindingTestCase, @unchecked Sendable {
    private func createSwitchAndDefaults() async throws {
        try await create([("ui.switch.on", "b", .boolean(false)), ("settings.someBoolKey", "b", .boolean(false))])
    }

    /// Waits for InterfacesRemoved of `path`, without any call to the daemon meanwhile: the
    /// signal must go out by itself, not with the next round's.
    private func waitForRemoval(of path: String, in objects: SignalRecorder,
                                file: StaticString = #filePath, line: UInt = #line) async {
        let signals = await objects.wait(timeout: 5) { $0.contains { $0.member == "InterfacesRemoved" && $0.arguments.first == .objectPath(path) } }
        let removed = signals.first { $0.member == "InterfacesRemoved" && $0.arguments.first == .objectPath(path) }
        XCTAssertEqual(removed?.arguments, [.objectPath(path), .array(of: .string, [.string(Self.bindingInterface)])],
                       "no InterfacesRemoved for \(path): \(signals)", file: file, line: line)
    }

    // MARK: Non-persistent

    func testNonPersistentBindingEndsWhenItsClientLeavesTheBus() async throws {
        try await createSwitchAndDefaults()
        let owner = try await Client.connect(to: bus)
        let objects = try await recordObjects()
        let path = try await bindKey("ui.switch.on", to: "settings.someBoolKey", via: owner)
        let ownerName = try await bindingProperty(path, "Owner")
        XCTAssertEqual(ownerName, .string(owner.connection.uniqueName))
        try await client.set("settings.someBoolKey", .boolean(true))
        try await assertValues(["ui.switch.on": .boolean(true)], "the binding works while its client is connected")

        owner.close()
        await waitForRemoval(of: path, in: objects)
        let listed = try await listBindings()
        XCTAssertEqual(listed, [])
        try await client.set("settings.someBoolKey", .boolean(false))
        try await client.set("ui.switch.on", .boolean(false))
        try await client.set("ui.switch.on", .boolean(true))
        try await assertValues(["settings.someBoolKey": .boolean(false)], "a change crossed a binding whose client left")
        await assertDBusError(PropBusAPI.standard("UnknownObject")) { try await self.bindingProperty(path, "Key") }
    }

    func testClientLeavingEndsOnlyItsOwnNonPersistentBindings() async throws {
        try await create([("a.v", "i", .int32(0)), ("b.v", "i", .int32(0)), ("c.v", "i", .int32(0)), ("d.v", "i", .int32(0))])
        let leaving = try await Client.connect(to: bus)
        let staying = try await Client.connect(to: bus)
        defer { staying.close() }
        let objects = try await recordObjects()
        let ended = try await bindKey("b.v", to: "a.v", via: leaving)
        let kept = try await bindKey("c.v", to: "a.v", ["persistent": .boolean(true)], via: leaving)
        let other = try await bindKey("d.v", to: "a.v", via: staying)

        leaving.close()
        await waitForRemoval(of: ended, in: objects)
        let listed = try await listBindings()
        XCTAssertEqual(listed.map(\.path).sorted(), [kept, other].sorted())
        try await client.set("a.v", .int32(5))
        try await assertValues(["b.v": .int32(0), "c.v": .int32(5), "d.v": .int32(5)])
    }

    // MARK: Persistent

    func testPersistentBindingSurvivesARestartAndNonPersistentDoesNot() async throws {
        try await create([("ui.power.label", "s", .string("Off")), ("dev.power.digit", "s", .string("0")),
                          ("ui.switch.on", "b", .boolean(false)), ("settings.someBoolKey", "b", .boolean(false))])
        let options: [String: DBusValue] = [
            "to_key": .string(#"value == "1" ? "On" : "Off""#), "to_target": .string(#"value == "On" ? "1" : "0""#),
            "persistent": .boolean(true),
        ]
        let persistent = try await bindKey("ui.power.label", to: "dev.power.digit", options)
        let transient = try await bindKey("ui.switch.on", to: "settings.someBoolKey")
        let before = try await listBindings().first { $0.path == persistent }

        try await restartDaemon(arguments: [])

        let listed = try await listBindings()
        XCTAssertEqual(listed.map(\.path), [persistent], "only the persistent binding comes back, at the same path")
        XCTAssertEqual(listed.first?.key, before?.key)
        XCTAssertEqual(listed.first?.to, before?.to)
        for option in ["direction", "to_key", "to_target", "persistent"] {
            XCTAssertEqual(listed.first?.options[option], before?.options[option], option)
        }
        let exported = try await bindingProperty(persistent, "Persistent")
        XCTAssertEqual(exported, .boolean(true))
        await assertDBusError(PropBusAPI.standard("UnknownObject")) { try await self.bindingProperty(transient, "Key") }

        let changes = try await recordAllChanges()
        try await client.set("dev.power.digit", .string("1"))
        try await assertValues(["ui.power.label": .string("On")], "the restored binding does not propagate")
        try await client.set("ui.power.label", .string("Off"))
        try await assertValues(["dev.power.digit": .string("0")])
        try await client.set("settings.someBoolKey", .boolean(true))
        try await assertValues(["ui.switch.on": .boolean(false)], "a non-persistent binding survived the restart")
        let signals = try await settle(changes)
        XCTAssertEqual(Self.history(of: "ui.power.label", in: signals), [.string("On"), .string("Off")])

        // A new binding never takes the restored one's path.
        let fresh = try await bindKey("ui.switch.on", to: "settings.someBoolKey")
        XCTAssertNotEqual(fresh, persistent)
    }

    /// A transient side starts from its default after a restart; the restored binding must make
    /// the sides agree again, as Bind does (the right-hand side wins), not keep the stale value.
    func testRestoredBindingResynchronizesATransientSideAtStartup() async throws {
        try await client.create("ui.search.label", "s", default: .string(""))
        try await client.create("vm.search.text", "s", default: .string(""), options: ["persistent": .boolean(false)])
        try await bindKey("ui.search.label", to: "vm.search.text", ["persistent": .boolean(true)])
        try await client.set("vm.search.text", .string("kittens"))
        try await assertValues(["ui.search.label": .string("kittens")])

        try await restartDaemon(arguments: [])

        try await assertValues(["vm.search.text": .string(""), "ui.search.label": .string("")],
                               "after a restart the restored binding's sides disagree")
    }

    func testUnboundAndDeletedPersistentBindingsStayGoneAfterARestart() async throws {
        try await create([("a.v", "i", .int32(0)), ("b.v", "i", .int32(0)), ("c.v", "i", .int32(0)), ("d.v", "i", .int32(0))])
        let unbound = try await bindKey("b.v", to: "a.v", ["persistent": .boolean(true)])
        try await bindKey("d.v", to: "c.v", ["persistent": .boolean(true)])
        let kept = try await bindKey("b.v", to: "c.v", ["persistent": .boolean(true), "direction": .string("to")])
        try await unbind(unbound)
        try await client.delete("d.v")

        try await restartDaemon(arguments: [])

        let listed = try await listBindings()
        XCTAssertEqual(listed.map(\.path), [kept])
        XCTAssertEqual(listed.first?.options["direction"], .string("to"))
        try await client.set("a.v", .int32(1))
        try await client.set("b.v", .int32(2))
        try await assertValues(["a.v": .int32(1), "b.v": .int32(2), "c.v": .int32(2)])
    }

    func testPersistentBindingMadeByBusctlOutlivesBusctl() async throws {
        try await createSwitchAndDefaults()
        let result = try await busctl(["call", PropBusAPI.busName, PropBusAPI.rootPath, PropBusAPI.manager, "Bind", "ssa{sv}",
                                       "ui.switch.on", "settings.someBoolKey", "1", "persistent", "b", "true"])
        XCTAssertTrue(result.succeeded, "\(result)")
        XCTAssertEqual(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines), #"o "\#(Self.bindingsPath)/1""#)
        // busctl has left the bus; make sure the daemon has seen it before checking.
        let transient = try await busctl(["call", PropBusAPI.busName, PropBusAPI.rootPath, PropBusAPI.manager, "Bind", "ssa{sv}",
                                          "settings.someBoolKey", "ui.switch.on", "0"])
        XCTAssertTrue(transient.succeeded, "\(transient)")
        let gone = await eventually { ((try? await self.listBindings()) ?? []).count == 1 }
        XCTAssertTrue(gone, "busctl's non-persistent binding did not end when busctl left")
        let listed = try await listBindings()
        XCTAssertEqual(listed.map(\.path), [Self.bindingsPath + "/1"])
        try await client.set("settings.someBoolKey", .boolean(true))
        try await assertValues(["ui.switch.on": .boolean(true)])
    }

    // MARK: Limits

    func testMaxBindingsPerClientIsEnforcedPerConnection() async throws {
        try await restartDaemon(arguments: ["--max-bindings-per-client", "2"])
        try await create([("a.v", "i", .int32(0)), ("b.v", "i", .int32(0)), ("c.v", "i", .int32(0)), ("d.v", "i", .int32(0))])
        let first = try await bindKey("b.v", to: "a.v")
        try await bindKey("c.v", to: "a.v", ["persistent": .boolean(true)])
        await assertDBusError(PropBusAPI.error("LimitsExceeded"), containing: ["2", "d.v"]) {
            try await self.bindKey("d.v", to: "a.v")
        }
        try await assertValues(["d.v": .int32(0)])
        let listed = try await listBindings()
        XCTAssertEqual(listed.count, 2, "a refused binding was made")

        let other = try await Client.connect(to: bus)
        defer { other.close() }
        try await bindKey("d.v", to: "a.v", via: other)
        try await unbind(first)
        try await bindKey("b.v", to: "c.v")
        await assertDBusError(PropBusAPI.error("LimitsExceeded")) {
            try await self.bindKey("b.v", to: "d.v")
        }
    }

    // MARK: Command-line tools

    func testBindListIntrospectAndUnbindWithBusctl() async throws {
        try await createSwitchAndDefaults()
        try await client.set("settings.someBoolKey", .boolean(true))
        let bind = try await busctl(["call", PropBusAPI.busName, PropBusAPI.rootPath, PropBusAPI.manager, "Bind", "ssa{sv}",
                                     "ui.switch.on", "settings.someBoolKey", "2", "direction", "s", "from", "persistent", "b", "true"])
        XCTAssertTrue(bind.succeeded, "\(bind)")
        let path = Self.bindingsPath + "/1"
        XCTAssertEqual(bind.stdout.trimmingCharacters(in: .whitespacesAndNewlines), #"o "\#(path)""#)
        try await assertValues(["ui.switch.on": .boolean(true)])

        let list = try await busctl(["call", PropBusAPI.busName, PropBusAPI.rootPath, PropBusAPI.manager, "ListBindings"])
        XCTAssertTrue(list.succeeded, "\(list)")
        XCTAssertTrue(list.stdout.hasPrefix(#"a(ossa{sv}) 1 "\#(path)" "ui.switch.on" "settings.someBoolKey" "#), list.stdout)
        XCTAssertTrue(list.stdout.contains(#""direction" s "from""#), list.stdout)
        XCTAssertTrue(list.stdout.contains(#""persistent" b true"#), list.stdout)

        let key = try await busctl(["get-property", PropBusAPI.busName, path, Self.bindingInterface, "Key"])
        XCTAssertEqual(key.stdout.trimmingCharacters(in: .whitespacesAndNewlines), #"s "ui.switch.on""#, "\(key)")
        let introspect = try await busctl(["introspect", PropBusAPI.busName, path])
        XCTAssertTrue(introspect.succeeded, "\(introspect)")
        for property in ["Key", "To", "Direction", "Persistent", "ToKey", "ToTarget", "Owner"] {
            XCTAssertTrue(introspect.stdout.contains(".\(property) "), "\(property) missing:\n\(introspect.stdout)")
        }
        XCTAssertNotNil(introspect.stdout.range(of: #"\.Direction\s+property\s+s\s+"from""#, options: .regularExpression),
                        introspect.stdout)
        // The fixture's busctl() puts everything after "--"; busctl's own options go before it.
        let tree = try await tool("busctl", ["--address=\(bus.address)", "--list", "--", "tree", PropBusAPI.busName])
        XCTAssertTrue(tree.stdout.split(separator: "\n").contains { $0 == Substring(path) }, "busctl tree lacks \(path):\n\(tree.stdout)")
        let managerXML = try await tool("busctl", ["--address=\(bus.address)", "--xml-interface", "--",
                                                   "introspect", PropBusAPI.busName, PropBusAPI.rootPath])
        XCTAssertTrue(managerXML.stdout.contains(#"<method name="Bind">"#), managerXML.stdout)

        let unbind = try await busctl(["call", PropBusAPI.busName, PropBusAPI.rootPath, PropBusAPI.manager, "Unbind", "o", path])
        XCTAssertTrue(unbind.succeeded, "\(unbind)")
        let empty = try await busctl(["call", PropBusAPI.busName, PropBusAPI.rootPath, PropBusAPI.manager, "ListBindings"])
        XCTAssertEqual(empty.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "a(ossa{sv}) 0")
        let again = try await busctl(["call", PropBusAPI.busName, PropBusAPI.rootPath, PropBusAPI.manager, "Unbind", "o", path])
        XCTAssertFalse(again.succeeded)
        XCTAssertTrue(again.stderr.contains(path), again.stderr)
    }

    func testBindWithGdbus() async throws {
        try await create([("ui.power.label", "s", .string("Off")), ("dev.power.digit", "s", .string("1"))])
        let result = try await gdbusCall(PropBusAPI.rootPath, PropBusAPI.manager + ".Bind", [
            "ui.power.label", "dev.power.digit",
            #"{'to_key': <'value == "1" ? "On" : "Off"'>, 'to_target': <'value == "On" ? "1" : "0"'>, 'persistent': <true>}"#,
        ])
        XCTAssertTrue(result.succeeded, "\(result)")
        XCTAssertEqual(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "(objectpath '\(Self.bindingsPath)/1',)")
        try await assertValues(["ui.power.label": .string("On")])
        let error = try await gdbusCall(PropBusAPI.rootPath, PropBusAPI.manager + ".Bind", [
            "ui.power.label", "dev.power.digit", "{'to_key': <'value =='>}",
        ])
        XCTAssertFalse(error.succeeded)
        XCTAssertTrue(error.stderr.contains("org.propbus.PropBus1.Error.InvalidExpression"), error.stderr)
    }
}
