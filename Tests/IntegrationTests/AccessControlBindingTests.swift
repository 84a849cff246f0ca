import DBus
import Foundation
import XCTest

/// SPEC §7 for daemon-side bindings: `Bind` needs writer rights on every key the binding writes
/// and reader rights on every key it reads (transforms included); `Unbind` needs the binding's
/// connection or writer rights on what it writes.
final class AccessControlBindingTests: AccessControlTestCase, @unchecked Sendable {
    private let nobodyWriters: [String: DBusValue] = ["writers": .array(of: .string, [.string("nobody")])]

    override func setUp() async throws {
        try await super.setUp()
        try await client.create("mine.a", "i", default: .int32(0), options: nobodyWriters)
        try await client.create("mine.b", "i", default: .int32(0), options: nobodyWriters)
        try await client.create("public.n", "i", default: .int32(3))
        try await client.create("vault.n", "i", default: .int32(42), options: ["secret": .boolean(true)])
    }

    private func bindAsNobody(_ key: String, _ to: String, _ options: String = "@a{sv} {}") async throws -> CommandResult {
        try await gdbusAsNobody(PropBusAPI.rootPath, "org.propbus.PropBus1.Manager.Bind", [key, to, options])
    }

    private func unbindAsNobody(_ path: String) async throws -> CommandResult {
        try await gdbusAsNobody(PropBusAPI.rootPath, "org.propbus.PropBus1.Manager.Unbind", ["objectpath '\(path)'"])
    }

    private func bindingCount() async throws -> Int {
        let reply = try await client.call(PropBusAPI.manager, "ListBindings")
        guard case .array(_, let rows)? = reply.first else { throw TestSetupError("ListBindings replied \(reply)") }
        return rows.count
    }

    func testNobodyBindsKeysItMayWriteBothWays() async throws {
        let result = try await bindAsNobody("mine.a", "mine.b", "{'persistent': <true>}")
        assertSucceeded(result)
        try await client.set("mine.b", .int32(8))
        let a = try await client.get("mine.a")
        XCTAssertEqual(a, .int32(8))
    }

    func testTwoWayBindingToAKeyNobodyMayNotWriteIsDenied() async throws {
        assertDenied(try await bindAsNobody("mine.a", "public.n"), naming: "public.n")
        let count = try await bindingCount()
        XCTAssertEqual(count, 0)
        let a = try await client.get("mine.a")
        XCTAssertEqual(a, .int32(0), "a denied Bind synchronized its key")
    }

    func testOneWayBindingFromAReadableKeyNeedsWriterRightsOnlyOnTheFollowingKey() async throws {
        assertSucceeded(try await bindAsNobody("mine.a", "public.n", "{'direction': <'from'>, 'persistent': <true>}"))
        let a = try await client.get("mine.a")
        XCTAssertEqual(a, .int32(3))
        assertDenied(try await bindAsNobody("public.n", "mine.a", "{'direction': <'from'>}"), naming: "public.n")
    }

    func testBindingThatReadsASecretIsDenied() async throws {
        assertDenied(try await bindAsNobody("mine.a", "vault.n", "{'direction': <'from'>}"), naming: "vault.n")
        // A transform naming the secret reads it too.
        assertDenied(try await bindAsNobody("mine.a", "mine.b", "{'to_key': <'value + vault.n'>}"), naming: "vault.n")
        let a = try await client.get("mine.a")
        XCTAssertEqual(a, .int32(0))
        let count = try await bindingCount()
        XCTAssertEqual(count, 0)
    }

    func testNobodyMayNotUnbindRootsBindingOfKeysItMayNotWrite() async throws {
        let reply = try await client.call(PropBusAPI.manager, "Bind", [.string("mine.a"), .string("public.n"), .vardict(["persistent": .boolean(true)])])
        guard case .objectPath(let path)? = reply.first else { throw TestSetupError("Bind replied \(reply)") }
        assertDenied(try await unbindAsNobody(path), naming: "public.n")
        let count = try await bindingCount()
        XCTAssertEqual(count, 1)
        try await client.call(PropBusAPI.manager, "Unbind", [.objectPath(path)])
    }

    func testNobodyUnbindsABindingOfKeysItMayWrite() async throws {
        let reply = try await client.call(PropBusAPI.manager, "Bind", [.string("mine.a"), .string("mine.b"), .vardict(["persistent": .boolean(true)])])
        guard case .objectPath(let path)? = reply.first else { throw TestSetupError("Bind replied \(reply)") }
        assertSucceeded(try await unbindAsNobody(path))
        let count = try await bindingCount()
        XCTAssertEqual(count, 0)
    }

    func testTheConnectionThatMadeABindingMayUnbindItAfterLosingWriterRights() async throws {
        // One connection of nobody's binds, waits until root has taken its writer rights away,
        // then unbinds: as the binding's owner it still may.
        let go = bus.directory.appendingPathComponent("go").path
        let script = """
        import dbus, os, sys, time
        bus = dbus.bus.BusConnection(sys.argv[1])
        manager = dbus.Interface(bus.get_object("org.propbus.PropBus1", "/org/propbus/PropBus1"), "org.propbus.PropBus1.Manager")
        path = manager.Bind("mine.a", "mine.b", dbus.Dictionary({}, signature="sv"))
        print("bound", path, flush=True)
        while not os.path.exists(sys.argv[2]):
            time.sleep(0.01)
        manager.Unbind(path)
        print("unbound", flush=True)
        """
        var environment = bus.environment
        environment["HOME"] = "/nonexistent"
        let (program, arguments) = try AsNobody.command("/usr/bin/python3", ["-c", script, bus.address, go])
        let child = try ChildProcess(program, arguments, environment: environment)
        let bound = await eventually(timeout: 15) { child.stdout.contains("bound") || !child.isRunning }
        XCTAssertTrue(bound && child.stdout.hasPrefix("bound"), "stdout: \(child.stdout) stderr: \(child.stderr)")
        for key in ["mine.a", "mine.b"] {
            try await client.create(key, "i", default: .int32(0), options: ["writers": .array(of: .string, [])])
        }
        assertDenied(try await setAsNobody("mine.a", "int32 1"), naming: "mine.a")
        XCTAssertTrue(FileManager.default.createFile(atPath: go, contents: nil))
        let ended = await child.waitForExit(timeout: 15)
        XCTAssertEqual(ended, .exited(0), "stdout: \(child.stdout) stderr: \(child.stderr)")
        XCTAssertTrue(child.stdout.contains("unbound"), child.stdout)
        let count = try await bindingCount()
        XCTAssertEqual(count, 0)
    }
}
