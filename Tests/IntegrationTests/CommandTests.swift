import DBus
import Foundation
import PropBus
import XCTest

/// Commands through the real daemon (docs/commands.md): enabled state, the executing lifecycle, signals.
final class CommandTests: DaemonTestCase {
    private func assertState(_ key: String, _ name: String, _ expected: DBusValue, _ message: String = "",
                             file: StaticString = #filePath, line: UInt = #line) async throws {
        let value = try await client.commandProperty(key, name)
        XCTAssertEqual(value, expected, message, file: file, line: line)
    }

    private func assertValue(_ key: String, _ expected: DBusValue, _ message: String = "",
                             file: StaticString = #filePath, line: UInt = #line) async throws {
        let value = try await client.get(key)
        XCTAssertEqual(value, expected, message, file: file, line: line)
    }

    private func makeSearch(_ argv: [String] = ["sh", "-c", "sleep 0.4; printf 'found %s' \"$PROPBUS_INPUT\""],
                            concurrent: Bool = false) async throws {
        try await client.create("vm.searchText", "s", default: .string(""))
        try await client.createCommand("vm.search", [
            "exec": .array(of: .string, argv.map { .string($0) }),
            "enabled_when": .string("length(vm.searchText) > 3"),
            "concurrent": .boolean(concurrent),
        ])
    }

    func testEnabledFollowsThePredicateAndSignalsOnlyFlips() async throws {
        try await makeSearch()
        try await assertState("vm.search", "Enabled", .boolean(false))
        let changes = try await client.recordChanges(ofGroup: "vm.search")
        var seen: [Bool] = []
        for (text, expected) in [("ab", false), ("abcd", true), ("abcde", true), ("abc", false)] {
            try await client.set("vm.searchText", .string(text))
            try await assertState("vm.search", "Enabled", .boolean(expected), text)
            try await assertValue("vm.search.Enabled", .boolean(expected), "the state is a key too")
            seen.append(expected)
        }
        // Two flips, each announced on the Values and the Command interface; nothing for "abcde".
        let signals = await changes.wait(count: 4)
        try await client.barrier()
        let command = changes.signals.filter { $0.arguments.first?.stringValue == Client.commandInterface }
        XCTAssertEqual(command.map { $0.changed["Enabled"] }, [.boolean(true), .boolean(false)], "\(signals)")
        let values = changes.signals.filter { $0.arguments.first?.stringValue == PropBusAPI.values }
        XCTAssertEqual(values.map { $0.changed["Enabled"] }, [.boolean(true), .boolean(false)])
    }

    func testEnabledIsRightFromCreation() async throws {
        try await client.create("vm.searchText", "s", default: .string("long enough"))
        try await client.createCommand("vm.search", ["exec": .array(of: .string, [.string("true")]),
                                                     "enabled_when": .string("length(vm.searchText) > 3")])
        try await assertState("vm.search", "Enabled", .boolean(true))
    }

    func testDisabledExecuteIsRefusedWithoutSignalsOrWork() async throws {
        let marker = try makeTemporaryDirectory(prefix: "cmd").appendingPathComponent("ran")
        try await makeSearch(["sh", "-c", "touch '\(marker.path)'"])
        try await client.set("vm.searchText", .string("ab"))
        let events = try await client.recordExecutions(of: "vm.search")
        let changes = try await client.recordChanges(ofGroup: "vm.search")
        await assertDBusError(PropBusAPI.error("NotEnabled"), containing: ["command vm.search is not enabled", "length(vm.searchText) > 3"]) {
            try await self.client.execute("vm.search", .string("ab"))
        }
        await assertDBusError(PropBusAPI.error("NotEnabled")) { try await self.client.start("vm.search") }
        try await client.barrier()
        XCTAssertEqual(events.signals.count, 0, "no Started or Failed: \(events.signals)")
        XCTAssertEqual(changes.signals.count, 0, "Executing never moved: \(changes.signals)")
        try await assertState("vm.search", "Executing", .boolean(false))
        XCTAssertFalse(FileManager.default.fileExists(atPath: marker.path), "the work did not start")
    }

    func testExecutingLifecycleAndResult() async throws {
        try await makeSearch()
        try await client.set("vm.searchText", .string("cats"))
        let events = try await client.recordExecutions(of: "vm.search")
        let changes = try await client.recordChanges(ofGroup: "vm.search")
        let caller: Client = client
        async let result = caller.execute("vm.search", .string("cats"))
        _ = await events.wait { !$0.named("Started").isEmpty }
        try await assertState("vm.search", "Executing", .boolean(true))
        try await assertState("vm.search", "Executions", .uint32(1))
        try await assertState("vm.search", "Enabled", .boolean(false), "a serial command is disabled while it runs")
        let found = try await result
        XCTAssertEqual(found, .string("found cats"))
        try await assertState("vm.search", "Executing", .boolean(false))
        try await assertState("vm.search", "Enabled", .boolean(true))

        let signals = await events.wait { $0.count >= 2 }
        XCTAssertEqual(signals.map(\.member), ["Started", "Finished"])
        guard case .uint64(let id)? = signals.first?.arguments.first else { return XCTFail("Started carries the id: \(signals)") }
        XCTAssertEqual(signals[0].arguments.last, .uint64(UInt64(DBusValue.string("cats").wireSize())), "Started carries the input's size, not the input")
        XCTAssertEqual(signals[1].arguments, [.uint64(id), .variant(.string("found cats"))])
        let executing = await changes.wait { signals in signals.compactMap { $0.changed["Executing"] }.count >= 4 }
            .filter { $0.arguments.first?.stringValue == Client.commandInterface }.compactMap { $0.changed["Executing"] }
        XCTAssertEqual(executing, [.boolean(true), .boolean(false)])
    }

    func testSecondStartInTheSameRoundIsRefusedAndTheWorkRunsOnce() async throws {
        let log = try makeTemporaryDirectory(prefix: "cmd").appendingPathComponent("runs")
        try await makeSearch(["sh", "-c", "echo run >> '\(log.path)'; sleep 0.3"])
        try await client.set("vm.searchText", .string("cats"))
        // Two Starts written back to back without waiting: the daemon reads both in one round.
        let path = Key.objectPath(ofGroup: "vm.search")
        let first = try Message.methodCall(destination: PropBusAPI.busName, path: path, interface: Client.commandInterface, member: "Start")
        try first.append([.variant(.string("a"))])
        let second = try Message.methodCall(destination: PropBusAPI.busName, path: path, interface: Client.commandInterface, member: "Start")
        try second.append([.variant(.string("b"))])
        let results = await client.callTogether([first, second])
        let refused = results.compactMap { result -> DBusError? in if case .failure(let error) = result { return error } else { return nil } }
        XCTAssertEqual(refused.map(\.name), [PropBusAPI.error("NotEnabled")], "\(results)")
        _ = await eventually(timeout: 5) { (try? await self.client.commandProperty("vm.search", "Executing")) == .boolean(false) }
        XCTAssertEqual(try String(contentsOf: log, encoding: .utf8), "run\n", "the work ran exactly once")
    }

    func testConcurrentCommandStaysExecutingUntilTheLastEnds() async throws {
        try await client.create("vm.searchText", "s", default: .string(""))
        try await client.createCommand("vm.work", [
            "exec": .array(of: .string, [.string("sh"), .string("-c"), .string("sleep \"$PROPBUS_INPUT\"")]),
            "concurrent": .boolean(true),
        ])
        try await assertState("vm.work", "AllowsConcurrentExecution", .boolean(true))
        let changes = try await client.recordChanges(ofGroup: "vm.work")
        let caller: Client = client
        async let short = caller.execute("vm.work", .string("0.2"))
        async let long = caller.execute("vm.work", .string("0.8"))
        _ = await eventually { (try? await self.client.commandProperty("vm.work", "Executions")) == .uint32(2) }
        try await assertState("vm.work", "Enabled", .boolean(true), "concurrent commands stay enabled")
        _ = try await short
        try await assertState("vm.work", "Executing", .boolean(true), "one execution still runs")
        try await assertState("vm.work", "Executions", .uint32(1))
        _ = try await long
        try await assertState("vm.work", "Executing", .boolean(false))
        let executing = changes.signals.filter { $0.arguments.first?.stringValue == Client.commandInterface }.compactMap { $0.changed["Executing"] }
        XCTAssertEqual(executing, [.boolean(true), .boolean(false)], "Executing flipped once each way")
    }

    func testStateKeyBindsOneWayToAProperty() async throws {
        try await makeSearch()
        try await client.create("ui.activity", "b", default: .boolean(false))
        _ = try await client.call(PropBusAPI.manager, "Bind", [.string("ui.activity"), .string("vm.search.Executing"),
                                                               .vardict(["direction": .string("from")])])
        try await client.set("vm.searchText", .string("cats"))
        let changes = try await client.recordChanges(ofGroup: "ui")
        let caller: Client = client
        async let result = caller.execute("vm.search")
        _ = await changes.wait { $0.contains { $0.changed["activity"] == .boolean(true) } }
        try await assertValue("ui.activity", .boolean(true))
        _ = try await result
        _ = await changes.wait { $0.contains { $0.changed["activity"] == .boolean(false) } }
        try await assertValue("ui.activity", .boolean(false))
        // The state is the command's: writing it or binding it both ways is refused.
        await assertDBusError(PropBusAPI.standard("PropertyReadOnly"), containing: ["vm.search.Executing"]) {
            try await self.client.set("vm.search.Executing", .boolean(true))
        }
        await assertDBusError(PropBusAPI.error("ReadOnly"), containing: ["vm.search.Enabled", "direction=from"]) {
            try await self.client.call(PropBusAPI.manager, "Bind", [.string("vm.search.Enabled"), .string("ui.activity"), .vardict([:])])
        }
    }

    func testCommandsAreManagedObjectsAndIntrospected() async throws {
        try await makeSearch()
        let xml = try await client.introspect(Key.objectPath(ofGroup: "vm.search"))
        for fragment in [#"<interface name="org.propbus.PropBus1.Command">"#, #"<method name="Execute">"#, #"<signal name="Failed">"#,
                         #"<property name="Executing" type="b" access="read""#] {
            XCTAssertTrue(xml.contains(fragment), "missing \(fragment) in\n\(xml)")
        }
        let reply = try await client.call(PropBusAPI.objectManager, "GetManagedObjects")
        guard case .dictionary(_, _, let objects)? = reply.first else { return XCTFail("\(reply)") }
        let entry = objects.first { $0.key == .objectPath(Key.objectPath(ofGroup: "vm.search")) }
        let interfaces = entry?.value.stringKeyedEntries ?? [:]
        XCTAssertEqual(interfaces[Client.commandInterface]?.stringKeyedEntries?["Enabled"], .variant(.boolean(false)))
        let busctl = try await busctl(["get-property", PropBusAPI.busName, Key.objectPath(ofGroup: "vm.search"), Client.commandInterface, "Executing"])
        XCTAssertEqual(busctl.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "b false", busctl.stderr)
    }

    func testCommandsSurviveARestartWithFreshState() async throws {
        try await restartDaemon(arguments: ["--state-dir", bus.directory.appendingPathComponent("state").path])
        try await makeSearch(["echo", "hello"])
        try await client.createCommand("vm.once", ["exec": .array(of: .string, [.string("true")]), "persistent": .boolean(false)])
        try await restartDaemon(arguments: ["--state-dir", bus.directory.appendingPathComponent("state").path])
        try await assertState("vm.search", "Executing", .boolean(false))
        await assertDBusError(PropBusAPI.standard("UnknownObject")) { try await self.client.commandProperty("vm.once", "Enabled") }
        try await client.set("vm.searchText", .string("cats"))
        let hello = try await client.execute("vm.search")
        XCTAssertEqual(hello, .string("hello"))
        try await client.deleteCommand("vm.search")
        try await restartDaemon(arguments: ["--state-dir", bus.directory.appendingPathComponent("state").path])
        await assertDBusError(PropBusAPI.standard("UnknownObject")) { try await self.client.commandProperty("vm.search", "Enabled") }
    }
}
