import DBus
import Foundation
import XCTest

/// Access control (docs/security.md) for daemon-side bindings: `Bind` needs writer rights on every key the binding writes
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

    /// The options `ListBindings` gives for the only binding there is.
    private func onlyBindingOptions() async throws -> [String: DBusValue] {
        let reply = try await client.call(PropBusAPI.manager, "ListBindings")
        guard case .array(_, let rows)? = reply.first, rows.count == 1, case .structure(let fields) = rows[0], fields.count == 4,
              let options = fields[3].stringKeyedEntries else { throw TestSetupError("ListBindings replied \(reply)") }
        return options.mapValues(\.unwrappingVariant)
    }

    /// Asserts that the only binding is suspended for a reason naming `key`, and quoting no value.
    private func assertSuspended(naming key: String, file: StaticString = #filePath, line: UInt = #line) async throws {
        let options = try await onlyBindingOptions()
        XCTAssertEqual(options["state"], .string("suspended"), "\(options)", file: file, line: line)
        let reason = options["reason"]?.stringValue ?? ""
        XCTAssertTrue(reason.contains("uid \(Self.nobody) may not") && reason.contains(" \(key)"), "reason: \(reason)", file: file, line: line)
        XCTAssertFalse(reason.contains("4242"), "the reason quotes the secret: \(reason)", file: file, line: line)
        let logged = await eventually { self.daemon.stderr.contains("binding") && self.daemon.stderr.contains("suspended") }
        XCTAssertTrue(logged, "the log does not say so: \(daemon.stderr)", file: file, line: line)
        XCTAssertFalse(daemon.stderr.contains("4242"), "the log quotes the secret: \(daemon.stderr)", file: file, line: line)
    }

    /// A transform that reads `secretKey` only once the value passes 100: `Bind` itself reads
    /// nothing of it (nor does it exist yet, or is it secret yet). Persistent: gdbus's
    /// connection, which a binding would end with, is gone once it returns.
    private func bindThroughLaterSecretAsNobody(_ secretKey: String) async throws {
        let options = "{'direction': <'from'>, 'to_key': <'value > 100 ? \(secretKey) : value'>, 'persistent': <true>}"
        assertSucceeded(try await bindAsNobody("mine.a", "mine.b", options))
    }

    /// nobody sets `mine.b` to `value`; the binding must not copy the secret (4242) into `mine.a`.
    private func assertSecretNotCopied(setting value: Int32, file: StaticString = #filePath, line: UInt = #line) async throws {
        assertSucceeded(try await setAsNobody("mine.b", "int32 \(value)"), file: file, line: line)
        let a = try await client.get("mine.a")
        XCTAssertNotEqual(a, .int32(4242), "the binding copied the secret", file: file, line: line)
        XCTAssertEqual(a, .int32(0), file: file, line: line)
    }

    private func createSecret(_ key: String) async throws {
        try await client.create(key, "i", default: .int32(4242), options: ["secret": .boolean(true)])
    }

    /// nobody's binding of `shared.x` to `mine.b`, then root takes nobody out of `shared.x`'s writers.
    private func bindThenNarrowWriters() async throws {
        try await client.create("shared.x", "i", default: .int32(0), options: nobodyWriters)
        assertSucceeded(try await bindAsNobody("shared.x", "mine.b", "{'direction': <'from'>, 'persistent': <true>}"))
        try await client.create("shared.x", "i", default: .int32(0), options: ["writers": .array(of: .string, [])])
    }

    /// nobody binds through `key` (public already when `existing`, else not there yet), then
    /// root makes `key` a secret: the binding is suspended, and after a `restart` too.
    private func assertSuspendedOnceSecret(_ key: String, existing: Bool, restart: Bool = false) async throws {
        if existing { try await client.create(key, "i", default: .int32(4242)) }
        try await bindThroughLaterSecretAsNobody(key)
        try await createSecret(key)
        try await assertSecretNotCopied(setting: 1000)
        if restart {
            try await restartDaemon(arguments: daemonArguments)
            // At start the leading side (1000) wins again: through the secret, were it not checked.
            let a = try await client.get("mine.a")
            XCTAssertEqual(a, .int32(0), "the binding copied the secret at start")
        }
        try await assertSuspended(naming: key)
        if restart { try await assertSecretNotCopied(setting: 2000) }
    }

    func testBindingThroughAKeyCreatedSecretLaterIsSuspended() async throws {
        try await assertSuspendedOnceSecret("vault.pin", existing: false)
    }

    func testBindingThroughAKeyMadeSecretLaterIsSuspended() async throws {
        try await assertSuspendedOnceSecret("vault.later", existing: true)
    }

    func testBindingOfAKeyWhoseWritersNoLongerIncludeItsPrincipalIsSuspended() async throws {
        try await bindThenNarrowWriters()
        assertSucceeded(try await setAsNobody("mine.b", "int32 7"))
        let x = try await client.get("shared.x")
        XCTAssertEqual(x, .int32(0), "nobody wrote shared.x through its binding")
        try await assertSuspended(naming: "shared.x")
    }

    func testPersistentBindingsStaySuspendedAcrossARestart() async throws {
        try await assertSuspendedOnceSecret("vault.pin", existing: false, restart: true)
    }

    func testPersistentBindingThroughAKeyMadeSecretStaysSuspendedAcrossARestart() async throws {
        try await assertSuspendedOnceSecret("vault.later", existing: true, restart: true)
    }

    func testPersistentBindingOfAKeyNobodyMayNoLongerWriteStaysSuspendedAcrossARestart() async throws {
        try await bindThenNarrowWriters()
        assertSucceeded(try await setAsNobody("mine.b", "int32 7"))
        try await restartDaemon(arguments: daemonArguments)
        var x = try await client.get("shared.x")
        XCTAssertEqual(x, .int32(0), "the binding wrote shared.x at start")
        try await assertSuspended(naming: "shared.x")
        assertSucceeded(try await setAsNobody("mine.b", "int32 8"))
        x = try await client.get("shared.x")
        XCTAssertEqual(x, .int32(0), "nobody wrote shared.x through its binding after a restart")
    }

    func testSuspendedBindingResumesWhenItsPrincipalGetsItsRightsBack() async throws {
        try await bindThenNarrowWriters()
        assertSucceeded(try await setAsNobody("mine.b", "int32 7"))
        try await assertSuspended(naming: "shared.x")
        // Writers widened again: the binding resumes and, as Bind does, the leading side wins.
        try await client.create("shared.x", "i", default: .int32(0), options: nobodyWriters)
        var x = try await client.get("shared.x")
        XCTAssertEqual(x, .int32(7), "the binding did not synchronize when it resumed")
        let options = try await onlyBindingOptions()
        XCTAssertEqual(options["state"], .string("active"), "\(options)")
        XCTAssertNil(options["reason"], "\(options)")
        assertSucceeded(try await setAsNobody("mine.b", "int32 9"))
        x = try await client.get("shared.x")
        XCTAssertEqual(x, .int32(9))
        let logged = await eventually { self.daemon.stderr.contains("resumed") }
        XCTAssertTrue(logged, "the log does not say the binding resumed: \(daemon.stderr)")
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
