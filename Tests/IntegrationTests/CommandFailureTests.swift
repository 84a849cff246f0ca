import DBus
import Foundation
import PropBus
import XCTest

/// Executions that fail, time out or are cancelled (docs/commands.md): each is reported once, with the
/// right error, and the command stays usable. Limits hold.
final class CommandFailureTests: DaemonTestCase {
    override var daemonArguments: [String] { ["--max-executions", "3", "--max-value-size", "4096"] }

    func argv(_ script: String) -> DBusValue { .array(of: .string, [.string("sh"), .string("-c"), .string(script)]) }

    /// Runs `body`, expecting `name`; then checks that exactly one Failed signal with that name
    /// came, that the command is idle again, and that it still runs.
    func assertFailsOnce(_ key: String, _ name: String, containing fragments: [String],
                                 file: StaticString = #filePath, line: UInt = #line,
                                 _ body: @escaping () async throws -> Void) async throws {
        let events = try await client.recordExecutions(of: key)
        await assertDBusError(name, containing: fragments, file: file, line: line) { try await body() }
        let signals = await events.wait { !$0.named("Failed").isEmpty }
        try await client.barrier()
        XCTAssertEqual(events.signals.named("Failed").count, 1, "\(events.signals)", file: file, line: line)
        XCTAssertEqual(signals.named("Failed").first?.arguments[1], .string(name), file: file, line: line)
        XCTAssertEqual(events.signals.named("Finished").count, 0, file: file, line: line)
        let executing = try await client.commandProperty(key, "Executing")
        XCTAssertEqual(executing, .boolean(false), file: file, line: line)
        let enabled = try await client.commandProperty(key, "Enabled")
        XCTAssertEqual(enabled, .boolean(true), "the command stays usable", file: file, line: line)
    }

    func testNonZeroExitIsExecutionFailedWithStatusAndStderr() async throws {
        try await client.createCommand("jobs.fail", ["exec": argv("echo 'disk on fire' >&2; exit 3")])
        try await assertFailsOnce("jobs.fail", PropBusAPI.error("ExecutionFailed"), containing: ["jobs.fail", "status 3", "disk on fire"]) {
            _ = try await self.client.execute("jobs.fail")
        }
        // Usable afterwards: the next execution runs (and fails the same way, once more).
        await assertDBusError(PropBusAPI.error("ExecutionFailed")) { try await self.client.execute("jobs.fail") }
    }

    func testMissingProgramIsExecutionFailed() async throws {
        try await client.createCommand("jobs.none", ["exec": .array(of: .string, [.string("/nonexistent/program")])])
        try await assertFailsOnce("jobs.none", PropBusAPI.error("ExecutionFailed"), containing: ["jobs.none", "/nonexistent/program"]) {
            _ = try await self.client.execute("jobs.none")
        }
    }

    func testTimeoutKillsTheWholeProcessGroup() async throws {
        let pids = try makeTemporaryDirectory(prefix: "cmd").appendingPathComponent("pids")
        // A child in the background and a leader that ignores nothing: both must go.
        try await client.createCommand("jobs.slow", ["exec": argv("sleep 30 & echo $! > '\(pids.path)'; sleep 30"), "timeout": .double(0.3)])
        let started = Date()
        try await assertFailsOnce("jobs.slow", PropBusAPI.error("TimedOut"), containing: ["jobs.slow", "0.3"]) {
            _ = try await self.client.execute("jobs.slow")
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), 10)
        let child = Int32(try String(contentsOf: pids, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        XCTAssertGreaterThan(child, 0)
        _ = await eventually { !Self.isRunning(child) }
        XCTAssertFalse(Self.isRunning(child), "the background child of a timed-out command was killed")
    }

    /// Whether `pid` runs (a zombie waiting for its new parent to reap it does not).
    static func isRunning(_ pid: Int32) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return false }
        return !stat[stat.index(after: close)...].trimmingCharacters(in: .whitespaces).hasPrefix("Z")
    }

    func testCancelStopsTheExecution() async throws {
        try await client.createCommand("jobs.slow", ["exec": argv("sleep 30")])
        let events = try await client.recordExecutions(of: "jobs.slow")
        let caller: Client = client
        let waiting = Task { try await caller.execute("jobs.slow") }
        let signals = await events.wait { !$0.named("Started").isEmpty }
        guard case .uint64(let id)? = signals.first?.arguments.first else { return XCTFail("\(signals)") }
        try await assertFailsOnce("jobs.slow", PropBusAPI.error("Cancelled"), containing: ["jobs.slow", "\(id)"]) {
            try await self.client.cancel("jobs.slow", id)
            _ = try await waiting.value
        }
        await assertDBusError(PropBusAPI.standard("InvalidArgs"), containing: ["no running execution \(id)"]) {
            try await self.client.cancel("jobs.slow", id)
        }
    }

    func testMaximumExecutionsIsLimitsExceeded() async throws {
        try await client.createCommand("jobs.wait", ["exec": argv("sleep 30"), "concurrent": .boolean(true)])
        var ids: [UInt64] = []
        for _ in 0..<3 { ids.append(try await client.start("jobs.wait")) }
        await assertDBusError(PropBusAPI.error("LimitsExceeded"), containing: ["jobs.wait", "3"]) {
            try await self.client.start("jobs.wait")
        }
        // Everyone else is still served.
        try await client.create("ui.x", "i", default: .int32(0))
        try await client.set("ui.x", .int32(5))
        for id in ids { try await client.cancel("jobs.wait", id) }
        _ = await eventually { (try? await self.client.commandProperty("jobs.wait", "Executions")) == .uint32(0) }
        let id = try await client.start("jobs.wait")
        XCTAssertGreaterThan(id, ids.max()!)
        try await client.cancel("jobs.wait", id)
    }

    func testOutputBeyondTheValueSizeIsLimitsExceeded() async throws {
        try await client.createCommand("jobs.chatty", ["exec": argv("yes propbus | head -c 100000")])
        try await assertFailsOnce("jobs.chatty", PropBusAPI.error("LimitsExceeded"), containing: ["jobs.chatty", "4096"]) {
            _ = try await self.client.execute("jobs.chatty")
        }
    }

    func testInputReachesStdinAndEnvironmentButNeverAShell() async throws {
        try await client.createCommand("jobs.echo", ["exec": argv(#"read line; printf '%s|%s' "$line" "$PROPBUS_INPUT""#)])
        let tricky = "$(touch /tmp/propbus-pwned); `id` 'quote'"
        let result = try await client.execute("jobs.echo", .string(tricky))
        XCTAssertEqual(result, .string(tricky + "|" + tricky))
        XCTAssertFalse(FileManager.default.fileExists(atPath: "/tmp/propbus-pwned"))
        let structured = try await client.execute("jobs.echo", .array(of: .int32, [.int32(1), .int32(2)]))
        XCTAssertEqual(structured, .string("[1,2]|[1,2]"), "containers arrive as JSON")
    }

    func testDeletingACommandCancelsItsExecutions() async throws {
        try await client.createCommand("jobs.slow", ["exec": argv("sleep 30")])
        let events = try await client.recordExecutions(of: "jobs.slow")
        let caller: Client = client
        let waiting = Task { try await caller.execute("jobs.slow") }
        _ = await events.wait { !$0.named("Started").isEmpty }
        let removed = try await client.record(path: PropBusAPI.rootPath, interface: PropBusAPI.objectManager, member: "InterfacesRemoved")
        try await client.deleteCommand("jobs.slow")
        await assertDBusError(PropBusAPI.error("Cancelled"), containing: ["deleted"]) { try await waiting.value }
        let signals = await removed.wait(count: 1)
        let names = signals.first.map { signal -> [String] in
            guard case .array(_, let items) = signal.arguments[1] else { return [] }
            return items.compactMap(\.stringValue)
        } ?? []
        XCTAssertEqual(Set(names), [Client.commandInterface, PropBusAPI.values])
        await assertDBusError(PropBusAPI.standard("UnknownObject")) { try await self.client.commandProperty("jobs.slow", "Enabled") }
    }

    /// A command's state keys (`KEY.Enabled`, `KEY.Executing`,
    /// `KEY.Executions`) are keys like any other, at most 255 bytes, so a command key may have
    /// at most 244: a 255-byte command key made state keys that Get, GetWithRevision and Bind
    /// refused.
    func testACommandKeyWhoseStateKeysWouldBeTooLongIsInvalidKey() async throws {
        let tooLong = "jobs." + String(repeating: "a", count: 240)  // 245 bytes: KEY.Executions is 256
        await assertDBusError(PropBusAPI.error("InvalidKey"), containing: [tooLong, "\(tooLong).Executions", "256", "244"]) {
            try await self.client.createCommand(tooLong, ["exec": self.argv("true")])
        }
        let longest = "jobs." + String(repeating: "a", count: 239)
        try await client.createCommand(longest, ["exec": argv("true")])
        for name in ["Enabled", "Executing", "Executions"] {
            _ = try await client.getWithRevision("\(longest).\(name)")
        }
        let value = try await client.get("\(longest).Executions")
        XCTAssertEqual(value, .uint32(0))
    }

    func testBadOptionsAreRefusedWithClearErrors() async throws {
        try await client.create("vm.text", "s", default: .string(""))
        let cases: [([String: DBusValue], String, [String])] = [
            ([:], PropBusAPI.standard("InvalidArgs"), ["jobs.bad", "exec", "handler"]),
            (["exec": .string("ls")], PropBusAPI.standard("InvalidArgs"), ["'exec'", "as"]),
            (["exec": argv("true"), "handler": .boolean(true)], PropBusAPI.standard("InvalidArgs"), ["both"]),
            (["exec": argv("true"), "enabled_when": .string("length(vm.text)")], PropBusAPI.error("InvalidExpression"), ["boolean"]),
            (["exec": argv("true"), "enabled_when": .string("vm.nothing == 1")], PropBusAPI.error("UnknownKey"), ["vm.nothing"]),
            (["exec": argv("true"), "enabled_when": .string("length(")], PropBusAPI.error("InvalidExpression"), ["enabled_when"]),
            (["exec": argv("true"), "timeout": .double(-1)], PropBusAPI.standard("InvalidArgs"), ["timeout"]),
            (["exec": argv("true"), "colour": .string("red")], PropBusAPI.standard("InvalidArgs"), ["unknown option 'colour'"]),
        ]
        for (options, name, fragments) in cases {
            await assertDBusError(name, containing: fragments) { try await self.client.createCommand("jobs.bad", options) }
        }
        await assertDBusError(PropBusAPI.error("InvalidKey")) { try await self.client.createCommand("jobs..bad", ["exec": self.argv("true")]) }
        try await client.createCommand("jobs.ok", ["exec": argv("true")])
        await assertDBusError(PropBusAPI.error("Exists"), containing: ["jobs.ok"]) {
            try await self.client.create("jobs.ok.extra", "b", default: .boolean(false))
        }
        await assertDBusError(PropBusAPI.error("Exists"), containing: ["vm.text"]) { try await self.client.createCommand("vm.text", ["exec": self.argv("true")]) }
        try await client.create("ui.panel.width", "i", default: .int32(0))
        await assertDBusError(PropBusAPI.error("Exists"), containing: ["ui.panel", "width"]) {
            try await self.client.createCommand("ui.panel", ["exec": self.argv("true")])
        }
    }

    func testSigtermCancelsRunningExecutionsAndExitsZero() async throws {
        try await client.createCommand("jobs.slow", ["exec": argv("sleep 30")])
        let events = try await client.recordExecutions(of: "jobs.slow")
        let caller: Client = client
        let waiting = Task { try await caller.execute("jobs.slow") }
        _ = await events.wait { !$0.named("Started").isEmpty }
        let ended = await daemon.terminate(timeout: 10)
        XCTAssertEqual(ended, .exited(0))
        await assertDBusError(PropBusAPI.error("Cancelled"), containing: ["stopping"]) { try await waiting.value }
    }
}
