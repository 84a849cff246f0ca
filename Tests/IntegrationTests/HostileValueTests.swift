import DBus
import Foundation
import PropBus
import PropBusSystem
import XCTest

/// Hostile input, the model side: what a hostile or careless client sends can never make the daemon
/// store something it cannot use again (fds, values too deep to send back), make it work without
/// bound (transform bombs), or leave work running that nobody can end.
final class HostileValueTests: DaemonTestCase, @unchecked Sendable {
    private var storePath: String { bus.directory.appendingPathComponent("state/propbus.db").path }

    /// `n` variants around a string.
    private func nested(_ n: Int) -> DBusValue {
        var value = DBusValue.string("x")
        for _ in 0..<n { value = .variant(value) }
        return value
    }

    private func argv(_ words: String...) -> DBusValue { .array(of: .string, words.map { .string($0) }) }

    private func bind(_ key: String, to: String, _ options: [String: DBusValue] = [:]) async throws {
        try await client.call(PropBusAPI.manager, "Bind", [.string(key), .string(to), .vardict(options)])
    }

    // MARK: Item 2: unix fds

    func testUnixFDTypesAreRefusedByCreatePropertyThroughBusctl() async throws {
        let busctl = try await busctl(["call", PropBusAPI.busName, PropBusAPI.rootPath, PropBusAPI.manager, "CreateProperty",
                                       "ssva{sv}", "fd.k", "h", "i", "0", "0"])
        XCTAssertNotEqual(busctl.status, 0, "\(busctl)")
        XCTAssertTrue(busctl.stderr.contains("fd.k") && busctl.stderr.contains("unix fd"), busctl.stderr)
        for type in ["h", "ah", "a{sh}", "(sh)"] {
            await assertDBusError(PropBusAPI.standard("InvalidArgs"), containing: ["fd.k", "unix fd"]) {
                try await self.client.create("fd.k", type, default: try DBusType(parsing: type).zeroValue)
            }
        }
        let listed = try await client.list(prefix: "fd.")
        XCTAssertEqual(listed.count, 0)
    }

    func testUnixFDValuesAreRefusedAtEveryEntryPoint() async throws {
        try await client.create("fd.any", "v", default: .variant(.string("")))
        let fd = DBusValue.variant(.unixFD(1))
        await assertDBusError(PropBusAPI.standard("InvalidArgs"), containing: ["fd.any", "unix fd"]) { try await self.client.set("fd.any", fd) }
        await assertDBusError(PropBusAPI.standard("InvalidArgs"), containing: ["fd.any", "unix fd"]) {
            try await self.client.apply(set: [("fd.any", fd)])
        }
        await assertDBusError(PropBusAPI.standard("InvalidArgs"), containing: ["fd.any", "unix fd"]) {
            try await self.client.compareAndSet("fd.any", revision: try await self.client.getWithRevision("fd.any").revision, fd)
        }
        await assertDBusError(PropBusAPI.standard("InvalidArgs"), containing: ["fd.new", "unix fd"]) {
            try await self.client.create("fd.new", "v", default: fd)
        }
        await assertDBusError(PropBusAPI.standard("InvalidArgs"), containing: ["fd.new", "unix fd"]) {
            try await self.client.create("fd.new", "v", default: .variant(.string("")), options: ["value": .variant(fd)])
        }
        // A command's input is refused before the execution starts.
        try await client.createCommand("fd.job", ["exec": argv("cat")])
        let events = try await client.recordExecutions(of: "fd.job")
        await assertDBusError(PropBusAPI.standard("InvalidArgs"), containing: ["fd.job", "unix fd"]) {
            try await self.client.execute("fd.job", .unixFD(1))
        }
        await assertDBusError(PropBusAPI.standard("InvalidArgs"), containing: ["fd.job", "unix fd"]) {
            try await self.client.start("fd.job", .structure([.string("a"), .unixFD(1)]))
        }
        // python-dbus, as a user would send one.
        let python = try await tool("/usr/bin/python3", ["-c", """
            import dbus, os, sys
            bus = dbus.bus.BusConnection(sys.argv[1])
            root = bus.get_object('org.propbus.PropBus1', '/org/propbus/PropBus1')
            try:
                root.Apply({'fd.any': dbus.types.UnixFd(0, variant_level=1)}, dbus.Array([], signature='s'),
                           dbus_interface='org.propbus.PropBus1.Manager')
                print('accepted')
            except dbus.exceptions.DBusException as e:
                print(e.get_dbus_name(), e.get_dbus_message())
            """, bus.address])
        XCTAssertTrue(python.stdout.hasPrefix("org.freedesktop.DBus.Error.InvalidArgs") && python.stdout.contains("fd.any"), "\(python)")
        // Nothing changed and nothing ran; the daemon goes on serving.
        let value = try await client.get("fd.any")
        XCTAssertEqual(value, .variant(.string("")))
        let goodResult = try await client.execute("fd.job", .string("still works"))
        XCTAssertEqual(goodResult, .string("still works"))
        XCTAssertEqual(events.signals.named("Started").count, 1, "only the good execution started: \(events.signals)")
    }

    func testAStoreHoldingAnFDPropertyLoadsWithoutItAndSaysWhy() async throws {
        try await client.create("old.name", "s", default: .string(""))
        try await client.set("old.name", .string("kept"))
        await daemon.stop()
        _ = await eventually { !((try? await client.nameHasOwner()) ?? true) }
        // What an older version stored: its own fd numbers.
        do {
            let store = try SQLiteStore(path: storePath)
            _ = try store.load()
            var rows = StoreChanges()
            rows.saveDefinition(PropertyDefinition(key: try Key("old.fd"), type: .unixFD, defaultValue: .unixFD(0)))
            rows.saveValue(.unixFD(9), revision: 90, for: try Key("old.fd"))
            rows.saveDefinition(PropertyDefinition(key: try Key("old.any"), type: .variant, defaultValue: .variant(.string(""))))
            rows.saveValue(.variant(.unixFD(9)), revision: 91, for: try Key("old.any"))
            try store.commit(WriteSet(store: rows), durability: .full)
        }
        daemon = try await Daemon.start(on: bus, watcher: client)
        let listed = try await client.list(prefix: "old.")
        XCTAssertEqual(listed.map(\.key), ["old.any", "old.name"])
        let name = try await client.get("old.name")
        XCTAssertEqual(name, .string("kept"))
        let any = try await client.get("old.any")
        XCTAssertEqual(any, .variant(.string("")))
        _ = try await client.call(PropBusAPI.objectManager, "GetManagedObjects")
        _ = try await client.getAll(group: "old")
        XCTAssertTrue(daemon.stderr.contains("old.fd") && daemon.stderr.contains("unix fd"), daemon.stderr)
        XCTAssertTrue(daemon.stderr.contains("old.any"), daemon.stderr)
    }

    func testAHandlerResultHoldingAnFDFailsTheExecution() async throws {
        try await client.createCommand("fd.handled", ["handler": .boolean(true)])
        // A python-dbus handler whose Run answers with an fd in its variant.
        let handler = try ChildProcess("/usr/bin/python3", ["-c", """
            import dbus, dbus.service, sys
            from dbus.mainloop.glib import DBusGMainLoop
            from gi.repository import GLib
            DBusGMainLoop(set_as_default=True)
            bus = dbus.bus.BusConnection(sys.argv[1])
            class Handler(dbus.service.Object):
                @dbus.service.method('org.propbus.PropBus1.Handler', in_signature='stv', out_signature='v')
                def Run(self, key, id, input):
                    return dbus.types.UnixFd(1, variant_level=1)
                @dbus.service.method('org.propbus.PropBus1.Handler', in_signature='st', out_signature='')
                def Cancel(self, key, id):
                    pass
            Handler(bus, '/org/propbus/PropBus1/Handler')
            bus.get_object('org.propbus.PropBus1', '/org/propbus/PropBus1').RegisterHandler(
                'fd.handled', dbus_interface='org.propbus.PropBus1.Manager')
            GLib.MainLoop().run()
            """, bus.address], environment: bus.environment)
        defer { handler.signal(SIGKILL) }
        let registered = await eventually { (try? await self.client.commandProperty("fd.handled", "Enabled")) == .boolean(true) }
        XCTAssertTrue(registered, "the python handler registered: \(handler.stderr)")
        await assertDBusError(PropBusAPI.standard("InvalidArgs"), containing: ["fd.handled", "unix fd"]) {
            try await self.client.execute("fd.handled")
        }
        let executing = try await client.commandProperty("fd.handled", "Executing")
        XCTAssertEqual(executing, .boolean(false))
    }

    func testBindOptionsHoldingAnFDAreRefused() async throws {
        try await client.create("fd.left", "s", default: .string(""))
        try await client.create("fd.right", "s", default: .string(""))
        await assertDBusError(PropBusAPI.standard("InvalidArgs"), containing: ["fd.left", "to_key"]) {
            try await self.bind("fd.left", to: "fd.right", ["to_key": .variant(.unixFD(1))])
        }
    }

    // MARK: Item 4: values that cannot be sent back

    func testValuesTooDeepForTheRepliesAreRefusedAndTheStoreStaysUsable() async throws {
        try await client.create("deep.any", "v", default: .variant(.string("")))
        try await client.create("deep.list", "av", default: .array(of: .variant, []))
        for value in [nested(58), nested(63)] {
            let depth = "\(value.nestingDepth)"
            await assertDBusError(PropBusAPI.error("InvalidValue"), containing: ["deep.any", depth]) { try await self.client.set("deep.any", value) }
            await assertDBusError(PropBusAPI.error("InvalidValue"), containing: ["deep.any"]) {
                try await self.client.compareAndSet("deep.any", revision: try await self.client.getWithRevision("deep.any").revision, value)
            }
            await assertDBusError(PropBusAPI.error("InvalidValue"), containing: ["deep.new"]) {
                try await self.client.create("deep.new", "v", default: value)
            }
        }
        // Apply's a{sv} puts its values 3 deep, so 63 variants cannot even be sent that way.
        await assertDBusError(PropBusAPI.error("InvalidValue"), containing: ["deep.any", "58"]) {
            try await self.client.apply(set: [("deep.any", self.nested(58))])
        }
        await assertDBusError(PropBusAPI.error("InvalidValue"), containing: ["deep.list"]) {
            try await self.client.set("deep.list", .array(of: .variant, [self.nested(58)]))
        }
        // The deepest value allowed really goes out in every reply that carries it.
        try await client.set("deep.any", nested(57))
        let deepest = try await client.get("deep.any")
        XCTAssertEqual(deepest, nested(57))
        let listed = try await client.list(prefix: "deep.")
        XCTAssertEqual(listed.first { $0.key == "deep.any" }?.value, nested(57))
        let all = try await client.getAll(group: "deep")
        XCTAssertEqual(all["any"], nested(57))
        _ = try await client.call(PropBusAPI.objectManager, "GetManagedObjects")
    }

    func testAStoreHoldingAValueTooDeepToSendBackKeepsServingEveryReply() async throws {
        try await client.create("deep.kept", "v", default: .variant(.string("")))
        try await client.create("deep.other", "s", default: .string(""))
        await daemon.stop()
        _ = await eventually { !((try? await client.nameHasOwner()) ?? true) }
        // What an older version accepted: 63 nested variants.
        do {
            let store = try SQLiteStore(path: storePath)
            _ = try store.load()
            var rows = StoreChanges()
            rows.saveValue(nested(63), revision: 80, for: try Key("deep.kept"))
            try store.commit(WriteSet(store: rows), durability: .full)
        }
        daemon = try await Daemon.start(on: bus, watcher: client)
        let kept = try await client.get("deep.kept")
        XCTAssertEqual(kept, .variant(.string("")), "the value is not served; the key reads its default")
        let listed = try await client.list(prefix: "deep.")
        XCTAssertEqual(listed.map(\.key), ["deep.kept", "deep.other"])
        let reason = listed.first?.metadata["hidden_reason"]?.stringValue ?? ""
        XCTAssertTrue(reason.contains("63"), "hidden_reason: \(reason)")
        _ = try await client.getAll(group: "deep")
        _ = try await client.call(PropBusAPI.objectManager, "GetManagedObjects")
    }

    // MARK: Item 6: bounded evaluation

    func testConcatenationBombIsRefusedQuicklyAndTheDaemonKeepsServing() async throws {
        try await client.create("bomb.source", "s", default: .string(""))
        try await client.create("bomb.target", "s", default: .string(""))
        let bomb = Array(repeating: "value", count: 250).joined(separator: " + ")
        try await bind("bomb.target", to: "bomb.source", ["to_key": .variant(.string(bomb)), "direction": .variant(.string("from"))])
        let start = ContinuousClock.now
        do {
            try await client.set("bomb.source", .string(String(repeating: "x", count: 1_000_000)))
            XCTFail("the bomb was accepted")
        } catch let error as DBusError {
            XCTAssertTrue([PropBusAPI.error("LimitsExceeded"), PropBusAPI.error("TransformFailed")].contains(error.name), "\(error)")
            XCTAssertTrue(error.message.contains("binding"), error.message)
        }
        let elapsed = ContinuousClock.now - start
        XCTAssertLessThan(elapsed, .seconds(2), "the unbounded evaluation took 32 s")
        let source = try await client.get("bomb.source")
        XCTAssertEqual(source, .string(""))
        try await client.set("bomb.source", .string("ab"))
        let target = try await client.get("bomb.target")
        XCTAssertEqual(target, .string(String(repeating: "ab", count: 250)))
    }

    func testDoublingChainIsRefusedQuicklyNamingTheBinding() async throws {
        for index in 0...24 { try await client.create("chain.k\(index)", "s", default: .string("")) }
        for index in 1...24 {
            try await bind("chain.k\(index)", to: "chain.k\(index - 1)", ["to_key": .variant(.string("value + value")),
                                                                          "direction": .variant(.string("from"))])
        }
        let start = ContinuousClock.now
        do {
            try await client.set("chain.k0", .string(String(repeating: "d", count: 64)))
            XCTFail("the doubling chain was accepted")
        } catch let error as DBusError {
            XCTAssertEqual(error.name, PropBusAPI.error("LimitsExceeded"), error.message)
            XCTAssertTrue(error.message.contains("binding"), error.message)
        }
        XCTAssertLessThan(ContinuousClock.now - start, .seconds(2), "the unbounded chain took 5.7 s")
        let last = try await client.get("chain.k24")
        XCTAssertEqual(last, .string(""))
        // Nothing changed anywhere, and the daemon goes on serving.
        try await client.create("chain.other", "s", default: .string(""))
        try await client.set("chain.other", .string("served"))
        let other = try await client.get("chain.other")
        XCTAssertEqual(other, .string("served"))
    }

    /// A search that compares far more than it reads (a needle that nearly
    /// matches at every position) is charged for its comparisons, at Set and at Bind alike.
    func testAnAdversarialSearchIsRefusedNamingTheWorkBudgetAtSetAndAtBind() async throws {
        try await client.create("search.needle", "s", default: .string("b" + String(repeating: "a", count: 4095)))
        try await client.create("search.source", "s", default: .string(""))
        try await client.create("search.found", "b", default: .boolean(false))
        let search = Array(repeating: "!contains(value, search.needle)", count: 67).joined(separator: " && ")
        let options: [String: DBusValue] = ["to_key": .variant(.string(search)), "direction": .variant(.string("from"))]
        try await bind("search.found", to: "search.source", options)
        let megabyte = DBusValue.string(String(repeating: "a", count: 1_000_000))
        await assertDBusError(PropBusAPI.error("LimitsExceeded"), containing: ["binding", "search.found", "work budget"]) {
            try await self.client.set("search.source", megabyte)
        }
        let source = try await client.get("search.source")
        XCTAssertEqual(source, .string(""))
        // At Bind time the first sync runs the same transform under the same budget.
        try await client.create("search.held", "s", default: megabyte)
        try await client.create("search.other", "b", default: .boolean(false))
        await assertDBusError(PropBusAPI.error("LimitsExceeded"), containing: ["search.other", "work budget"]) {
            try await self.bind("search.other", to: "search.held", options)
        }
        // An ordinary value still flows, and the daemon goes on serving.
        try await client.set("search.source", .string("abc"))
        let found = try await client.get("search.found")
        XCTAssertEqual(found, .boolean(true))
    }

    // MARK: Item 9: executions always end

    func testAnExecutionWhoseCallerLeavesIsCancelled() async throws {
        try await client.createCommand("jobs.stuck", ["handler": .boolean(true)])
        // A handler that takes every execution and never answers.
        let serve = try ChildProcess(BuildProducts.propctl, ["--address", bus.address, "serve", "jobs.stuck", "--", "sleep", "1000"],
                                     environment: bus.environment)
        defer { serve.signal(SIGKILL) }
        let registered = await eventually { (try? await self.client.commandProperty("jobs.stuck", "Enabled")) == .boolean(true) }
        XCTAssertTrue(registered, "serve registered: \(serve.stderr)")
        let events = try await client.recordExecutions(of: "jobs.stuck")
        let caller = try await Client.connect(to: bus)
        let waiting = Task { try await caller.execute("jobs.stuck") }
        _ = await events.wait { !$0.named("Started").isEmpty }
        let executingBefore = try await client.commandProperty("jobs.stuck", "Executing")
        XCTAssertEqual(executingBefore, .boolean(true))
        // The caller leaves before the reply; its pending call is simply abandoned.
        caller.close()
        waiting.cancel()
        let failed = await events.wait { !$0.named("Failed").isEmpty }
        XCTAssertEqual(failed.named("Failed").first?.arguments[1], .string(PropBusAPI.error("Cancelled")), "\(failed)")
        let executing = try await client.commandProperty("jobs.stuck", "Executing")
        XCTAssertEqual(executing, .boolean(false))
        // The command is usable again.
        let enabledAgain = try await client.commandProperty("jobs.stuck", "Enabled")
        XCTAssertEqual(enabledAgain, .boolean(true))
    }

    func testADescendantThatCalledSetsidDoesNotOutliveItsExecution() async throws {
        try await client.createCommand("jobs.escape", ["exec": argv("sh", "-c", "setsid sleep 1000 & echo $!")])
        let result = try await client.execute("jobs.escape")
        guard let text = result.stringValue, let pid = pid_t(text) else { return XCTFail("no pid: \(result)") }
        defer { kill(pid, SIGKILL) }
        let gone = await eventually(timeout: 5) { !FileManager.default.fileExists(atPath: "/proc/\(pid)") }
        XCTAssertTrue(gone, "pid \(pid) (setsid sleep) outlived its execution, or was left a zombie")
        // The daemon still runs commands, and ends what each leaves behind.
        let again = try await client.execute("jobs.escape")
        guard let second = again.stringValue.flatMap({ pid_t($0) }) else { return XCTFail("no pid: \(again)") }
        defer { kill(second, SIGKILL) }
        let secondGone = await eventually(timeout: 5) { !FileManager.default.fileExists(atPath: "/proc/\(second)") }
        XCTAssertTrue(secondGone, "pid \(second) outlived its execution")
    }
}
