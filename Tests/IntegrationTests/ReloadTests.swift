import DBus
import Foundation
import XCTest

/// The model-file lifecycle. SIGHUP and `propctl reload` apply the difference;
/// keys removed from their file leave the bus but keep their values until `propctl prune`; a bad
/// file is skipped as a whole (logged with file:line:column, listed by `propctl status`), unless
/// `--strict-models`.
final class ReloadTests: DaemonTestCase, @unchecked Sendable {
    private func modelURL(_ name: String) -> URL { bus.directory.appendingPathComponent(name) }

    private func write(_ name: String, _ properties: String) throws {
        try #"{"groups": {"app": {"properties": {\#(properties)}}}}"#.write(to: modelURL(name), atomically: true, encoding: .utf8)
    }

    private func propctl(_ arguments: [String]) async throws -> CommandResult {
        try await tool(BuildProducts.propctl, ["--address", bus.address] + arguments, timeout: 15)
    }

    private func keys() async throws -> [String] { try await client.list(prefix: "app.").map(\.key) }

    /// Sends SIGHUP and waits until `condition` holds.
    private func hangUp(until condition: @escaping () async throws -> Bool) async throws {
        daemon.process.signal(SIGHUP)
        let done = await eventually(timeout: 10) { (try? await condition()) ?? false }
        XCTAssertTrue(done, "the reload did not happen; stderr: \(daemon.stderr)")
        XCTAssertTrue(daemon.process.isRunning, "SIGHUP killed the daemon: \(daemon.stderr)")
    }

    func testSIGHUPAddsChangesAndRemovesKeysAndRemovedValuesComeBackOrArePruned() async throws {
        try write("app.json", #""x": {"type": "i", "default": 1}, "y": {"type": "s", "default": "old"}"#)
        try await restartDaemon(arguments: ["--model", modelURL("app.json").path])
        try await client.set("app.x", .int32(7))
        let source = try await client.list(prefix: "app.x").first?.metadata["source"]
        XCTAssertEqual(source, .string(modelURL("app.json").path))

        try write("app.json", #""y": {"type": "s", "default": "new"}, "z": {"type": "b", "default": true}"#)
        try await hangUp { try await self.keys() == ["app.y", "app.z"] }
        let y = try await client.get("app.y")
        XCTAssertEqual(y, .string("new"))
        XCTAssertTrue(daemon.stderr.contains("reload"), "a reload is logged: \(daemon.stderr)")

        // The removed key's value is kept: prune shows it and, without --yes, deletes nothing.
        let dry = try await propctl(["prune"])
        XCTAssertTrue(dry.succeeded, "\(dry)")
        XCTAssertTrue(dry.stdout.contains("app.x") && dry.stdout.contains("7"), dry.stdout)
        XCTAssertTrue(dry.stdout.contains("--yes"), dry.stdout)

        // Declared again, it comes back with its value.
        try write("app.json", #""x": {"type": "i", "default": 1}, "y": {"type": "s", "default": "new"}"#)
        let reload = try await propctl(["reload"])
        XCTAssertTrue(reload.succeeded, "\(reload)")
        let x = try await client.get("app.x")
        XCTAssertEqual(x, .int32(7), "a key declared again gets its stored value back")

        // Removed again and pruned: gone for good.
        try write("app.json", #""y": {"type": "s", "default": "new"}"#)
        _ = try await propctl(["reload"])
        let prune = try await propctl(["prune", "--yes"])
        XCTAssertTrue(prune.succeeded && prune.stdout.contains("deleted 1"), "\(prune)")
        let empty = try await propctl(["prune"])
        XCTAssertTrue(empty.stdout.contains("no stored values"), empty.stdout)
        try write("app.json", #""x": {"type": "i", "default": 1}, "y": {"type": "s", "default": "new"}"#)
        _ = try await propctl(["reload"])
        let pruned = try await client.get("app.x")
        XCTAssertEqual(pruned, .int32(1))
    }

    func testPruneAtATerminalAsksAndDeletesOnlyOnYes() async throws {
        try write("app.json", #""x": {"type": "i", "default": 1}, "y": {"type": "s", "default": "old"}"#)
        try await restartDaemon(arguments: ["--model", modelURL("app.json").path])
        try await client.set("app.x", .int32(7))
        try write("app.json", #""y": {"type": "s", "default": "old"}"#)
        try await hangUp { try await self.keys() == ["app.y"] }
        /// `propctl prune` on a pseudo-terminal (script(1)), answering the prompt with `answer`.
        func prune(answering answer: String) async throws -> CommandResult {
            let command = "'\(BuildProducts.propctl)' --address '\(bus.address)' prune"
            return try await runCommand("/usr/bin/script", ["-qec", command, "/dev/null"], environment: bus.environment,
                                        stdin: answer + "\n", timeout: 15)
        }
        let refused = try await prune(answering: "n")
        XCTAssertTrue(refused.stdout.contains("[y/N]") && refused.stdout.contains("nothing deleted"), "\(refused)")
        let kept = try await client.call(PropBusAPI.manager, "ListUnclaimed", [])
        XCTAssertTrue("\(kept)".contains("app.x"), "\(kept)")
        // Blanks around the answer are not part of it.
        let accepted = try await prune(answering: " \tY ")
        XCTAssertTrue(accepted.stdout.contains("deleted 1 stored value"), "\(accepted)")
        let empty = try await propctl(["prune"])
        XCTAssertTrue(empty.stdout.contains("no stored values"), empty.stdout)
    }

    func testKeyRemovedFromItsFileWhileStoppedLeavesTheBusAtStartKeepingItsValue() async throws {
        try write("app.json", #""x": {"type": "i", "default": 1}"#)
        try await restartDaemon(arguments: ["--model", modelURL("app.json").path])
        try await client.set("app.x", .int32(5))
        try write("app.json", #""y": {"type": "i", "default": 2}"#)
        try await restartDaemon(arguments: ["--model", modelURL("app.json").path])
        let listed = try await keys()
        XCTAssertEqual(listed, ["app.y"])
        try write("app.json", #""x": {"type": "i", "default": 1}"#)
        try await restartDaemon(arguments: ["--model", modelURL("app.json").path])
        let x = try await client.get("app.x")
        XCTAssertEqual(x, .int32(5))
    }

    func testBadFileIsSkippedWithItsLineAndColumnAndTheOthersLoad() async throws {
        try write("good.json", #""ok": {"type": "i", "default": 1}"#)
        try "{\n  \"groups\": {\n    \"bad\": [\n".write(to: modelURL("bad.json"), atomically: true, encoding: .utf8)
        try await restartDaemon(arguments: ["--model", modelURL("good.json").path, "--model", modelURL("bad.json").path])
        let ok = try await client.get("app.ok")
        XCTAssertEqual(ok, .int32(1))
        XCTAssertTrue(daemon.stderr.contains(modelURL("bad.json").path + ":"), daemon.stderr)
        XCTAssertNotNil(daemon.stderr.range(of: #"bad\.json:\d+:\d+: "#, options: .regularExpression), daemon.stderr)
        let status = try await propctl(["status"])
        XCTAssertTrue(status.stdout.contains("bad.json"), "\(status)")
        let reload = try await propctl(["reload"])
        XCTAssertEqual(reload.status, 1, "\(reload)")
        XCTAssertTrue(reload.stderr.contains("bad.json"), "\(reload)")

        // --strict-models keeps the refusal to start.
        var environment = bus.environment
        environment["STATE_DIRECTORY"] = bus.directory.appendingPathComponent("strict").path
        let strict = try await runCommand(BuildProducts.propbusd, ["--address", bus.address, "--strict-models", "--model", modelURL("bad.json").path],
                                          environment: environment, timeout: 15)
        XCTAssertEqual(strict.status, 1, "\(strict)")
        XCTAssertTrue(strict.stderr.contains("bad.json"), "\(strict)")
    }

    func testTypeChangeInAFileIsSkippedSayingHowToMigrateAndKeepsTheKey() async throws {
        try write("app.json", #""n": {"type": "i", "default": 1}, "m": {"type": "i", "default": 1}"#)
        try await restartDaemon(arguments: ["--model", modelURL("app.json").path])
        try await client.set("app.n", .int32(3))
        try write("app.json", #""n": {"type": "s", "default": "one"}, "m": {"type": "i", "default": 2}"#)
        let reload = try await propctl(["reload"])
        XCTAssertEqual(reload.status, 1, "\(reload)")
        XCTAssertTrue(reload.stderr.contains("migrate"), reload.stderr)
        let n = try await client.get("app.n")
        XCTAssertEqual(n, .int32(3), "a skipped file changes nothing")
        let m = try await client.get("app.m")
        XCTAssertEqual(m, .int32(1), "the whole file is skipped, not half of it")
    }

    func testCommandRemovedFromItsFileIsDeletedAtReload() async throws {
        let withCommand = #"{"groups": {"app": {"properties": {"x": {"type": "i"}}}, "vm": {"commands": {"run": {"exec": ["true"]}}}}}"#
        try withCommand.write(to: modelURL("app.json"), atomically: true, encoding: .utf8)
        try await restartDaemon(arguments: ["--model", modelURL("app.json").path])
        let before = try await client.call(PropBusAPI.manager, "ListCommands")
        XCTAssertTrue("\(before)".contains("vm.run"), "\(before)")
        try write("app.json", #""x": {"type": "i"}"#)
        let reload = try await propctl(["reload"])
        XCTAssertTrue(reload.succeeded, "\(reload)")
        let after = try await client.call(PropBusAPI.manager, "ListCommands")
        XCTAssertFalse("\(after)".contains("vm.run"), "\(after)")
        let listed = try await keys()
        XCTAssertEqual(listed, ["app.x"])
    }

    func testReloadTellsSystemdReloadingThenReady() async throws {
        await daemon.stop()
        _ = await eventually { !((try? await client.nameHasOwner()) ?? true) }
        try write("app.json", #""x": {"type": "i", "default": 1}"#)
        let socket = try NotifySocket()
        var environment = bus.environment
        environment["NOTIFY_SOCKET"] = socket.notifySocket
        let process = try ChildProcess(BuildProducts.propbusd, ["--address", bus.address, "--model", modelURL("app.json").path], environment: environment)
        defer { Task { await process.stop() } }
        _ = await socket.wait(for: "READY=1")
        process.signal(SIGHUP)
        let messages = await socket.wait { $0.flatMap(NotifySocket.lines).filter { $0 == "READY=1" }.count >= 2 }
        let lines = messages.flatMap(NotifySocket.lines)
        guard let reloading = lines.firstIndex(of: "RELOADING=1") else { return XCTFail("no RELOADING=1: \(lines)") }
        XCTAssertTrue(lines[reloading...].contains("READY=1"), "\(lines)")
        XCTAssertTrue(lines.contains { $0.hasPrefix("MONOTONIC_USEC=") }, "\(lines)")
    }

    func testDaemonLogsStartReadyReloadAndStop() async throws {
        try write("app.json", #""x": {"type": "i", "default": 1}"#)
        try await restartDaemon(arguments: ["--model", modelURL("app.json").path])
        _ = try await propctl(["reload"])
        let process = daemon.process
        _ = await daemon.terminate()
        let lines = process.stderr.split(separator: "\n").map(String.init)
        XCTAssertTrue(lines.contains { $0.contains("starting") && $0.contains("propbus.db") && $0.contains(bus.address) }, "\(lines)")
        XCTAssertTrue(lines.contains { $0.contains("ready") }, "\(lines)")
        XCTAssertTrue(lines.contains { $0.contains("reloaded model files") }, "\(lines)")
        XCTAssertTrue(lines.contains { $0.contains("stopping") }, "\(lines)")
        XCTAssertTrue(lines.contains { $0.contains("stopped") }, "\(lines)")
    }
}
