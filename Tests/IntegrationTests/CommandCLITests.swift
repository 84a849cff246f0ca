import DBus
import Foundation
import PropBus
import XCTest

/// `propctl exec`, `propctl serve` and the Flickr-search example's command, end to end.
final class CommandCLITests: DaemonTestCase {
    private func propctl(_ arguments: [String], timeout: TimeInterval = 15) async throws -> CommandResult {
        try await tool(BuildProducts.propctl, ["--address", bus.address] + arguments, timeout: timeout)
    }

    /// A propctl user is told the propctl verb, not only the D-Bus method.
    func testDeletingACommandsStateKeyNamesTheVerbThatDeletesIt() async throws {
        try await client.createCommand("jobs.upper", ["exec": .array(of: .string, [.string("true")])])
        let delete = try await propctl(["delete", "jobs.upper.Executing"])
        XCTAssertEqual(delete.status, 1, "\(delete)")
        XCTAssertTrue(delete.stderr.contains("propctl delete-command jobs.upper"), delete.stderr)
        XCTAssertFalse(delete.stderr.contains("DeleteCommand(\""), delete.stderr)
    }

    private func state(_ key: String, _ name: String) async -> DBusValue? {
        try? await client.commandProperty(key, name)
    }

    func testServeHandlesExecutionsAndItsDeathDisablesTheCommand() async throws {
        try await client.createCommand("jobs.upper", ["handler": .boolean(true)])
        let noHandler = await state("jobs.upper", "Enabled")
        XCTAssertEqual(noHandler, .boolean(false), "a handler command is disabled until a handler registers")
        let refused = try await propctl(["exec", "jobs.upper", "x"])
        XCTAssertEqual(refused.status, 1)
        XCTAssertTrue(refused.stderr.contains("NotEnabled") && refused.stderr.contains("no handler is registered"), refused.stderr)

        let script = #"if [ "$PROPBUS_INPUT" = slow ]; then sleep 30; fi; tr a-z A-Z"#
        let serve = try ChildProcess(BuildProducts.propctl, ["--address", bus.address, "serve", "jobs.upper", "--", "sh", "-c", script],
                                     environment: bus.environment)
        let registered = await eventually { await self.state("jobs.upper", "Enabled") == .boolean(true) }
        XCTAssertTrue(registered, "serve registered: \(serve.stderr)")

        let exec = try await propctl(["exec", "jobs.upper", "hello world"])
        XCTAssertEqual(exec.status, 0, "\(exec)")
        XCTAssertEqual(exec.stdout, "HELLO WORLD\n")
        let json = try await propctl(["--json", "exec", "jobs.upper", "abc"])
        XCTAssertEqual(json.stdout, #"{"key":"jobs.upper","id":2,"result":"ABC"}"# + "\n")

        // A second handler is refused while the first is there.
        let second = try await propctl(["serve", "jobs.upper", "--", "cat"])
        XCTAssertEqual(second.status, 1)
        XCTAssertTrue(second.stderr.contains("Exists"), second.stderr)

        // The handler dies mid-execution: that execution fails with HandlerVanished, once.
        let events = try await client.recordExecutions(of: "jobs.upper")
        let caller: Client = client
        let waiting = Task { try await caller.execute("jobs.upper", .string("slow")) }
        _ = await events.wait { !$0.named("Started").isEmpty }
        serve.signal(SIGKILL)
        await assertDBusError(PropBusAPI.error("HandlerVanished"), containing: ["jobs.upper"]) { try await waiting.value }
        _ = await events.wait { !$0.named("Failed").isEmpty }
        XCTAssertEqual(events.signals.named("Failed").count, 1)
        XCTAssertEqual(events.signals.named("Failed").first?.arguments[1], .string(PropBusAPI.error("HandlerVanished")))
        let enabled = await state("jobs.upper", "Enabled"), executing = await state("jobs.upper", "Executing")
        XCTAssertEqual(enabled, .boolean(false), "disabled again until another handler registers")
        XCTAssertEqual(executing, .boolean(false))
    }

    func testServeReportsAFailingProgram() async throws {
        try await client.createCommand("jobs.check", ["handler": .boolean(true)])
        let serve = try ChildProcess(BuildProducts.propctl, ["--address", bus.address, "serve", "jobs.check", "--", "sh", "-c", "echo nope >&2; exit 4"],
                                     environment: bus.environment)
        _ = await eventually { await self.state("jobs.check", "Enabled") == .boolean(true) }
        let exec = try await propctl(["exec", "jobs.check"])
        XCTAssertEqual(exec.status, 1, "\(exec)")
        XCTAssertTrue(exec.stderr.contains("org.propbus.PropBus1.Error.ExecutionFailed") && exec.stderr.contains("status 4")
                      && exec.stderr.contains("nope"), exec.stderr)
        serve.signal(SIGTERM)
        let ended = await serve.waitForExit(timeout: 5)
        XCTAssertEqual(ended, .exited(0), serve.stderr)
    }

    func testExecNoWaitTypedInputAndErrors() async throws {
        try await client.createCommand("jobs.echo", ["exec": .array(of: .string, [.string("cat")])])
        let typed = try await propctl(["exec", "--type", "ai", "jobs.echo", "[1, 2, 3]"])
        XCTAssertEqual(typed.stdout, "[1,2,3]\n", "\(typed)")
        let started = try await propctl(["exec", "--no-wait", "jobs.echo", "x"])
        XCTAssertEqual(started.status, 0, "\(started)")
        XCTAssertNotNil(UInt64(started.stdout.trimmingCharacters(in: .whitespacesAndNewlines)), started.stdout)
        let unknown = try await propctl(["exec", "jobs.nothing"])
        XCTAssertEqual(unknown.status, 1)
        XCTAssertTrue(unknown.stderr.contains("UnknownKey") && unknown.stderr.contains("no command named jobs.nothing"), unknown.stderr)
        let badInput = try await propctl(["exec", "--type", "i", "jobs.echo", "twelve"])
        XCTAssertEqual(badInput.status, 1, "a bad value exits 1, like one the daemon refuses: \(badInput)")
        let help = try await propctl(["exec", "--help"])
        XCTAssertTrue(help.stdout.contains("--no-wait") && help.stdout.contains("propctl exec --no-wait viewmodel.executeSearch cats"), help.stdout)
    }

    func testFlickrExampleViewModelEndToEnd() async throws {
        let example = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("examples/flickr-search.json").path
        try await restartDaemon(arguments: ["--in-memory", "--model", example])
        let short = try await propctl(["exec", "viewmodel.executeSearch", "ab"])
        XCTAssertEqual(short.status, 1)
        XCTAssertTrue(short.stderr.contains("NotEnabled") && short.stderr.contains("viewmodel.executeSearch is not enabled"), short.stderr)
        let hidden = try await propctl(["get", "view.loadingIndicatorHidden", "viewmodel.executeSearch.Enabled"])
        XCTAssertEqual(hidden.stdout, "true\nfalse\n")

        _ = try await propctl(["set", "viewmodel.searchText", "sunsets"])
        let status = try await propctl(["--json", "status"])
        XCTAssertTrue(status.stdout.contains(#""key":"viewmodel.executeSearch""#) && status.stdout.contains(#""enabled":true"#), status.stdout)
        let changes = try await client.recordChanges(ofGroup: "view")
        let arguments = ["--address", bus.address, "exec", "viewmodel.executeSearch", "sunsets"], environment = bus.environment
        let search = Task { try await runCommand(BuildProducts.propctl, arguments, environment: environment, timeout: 15) }
        // RAC(loadingIndicator, hidden) = [executeSearch.executing not]: shown while it runs.
        _ = await changes.wait { $0.contains { $0.changed["loadingIndicatorHidden"] == .boolean(false) } }
        let running = try await propctl(["get", "viewmodel.executeSearch.Executing", "view.loadingIndicatorHidden"])
        XCTAssertEqual(running.stdout, "true\nfalse\n")
        let result = try await search.value
        XCTAssertEqual(result.status, 0, "\(result)")
        XCTAssertTrue(result.stdout.contains(#""searchString": "sunsets""#), result.stdout)
        let after = try await propctl(["get", "view.loadingIndicatorHidden"])
        XCTAssertEqual(after.stdout, "true\n")
    }
}
