import DBus
import Foundation
import XCTest

/// Change history on a bus without access checks (the session bus's default): the caller is
/// still named in full, every origin says what it was (a binding, a command's state, a model
/// file), and what history holds can be replayed elsewhere (`--format script|profile`).
final class HistoryOriginTests: DaemonTestCase, @unchecked Sendable {
    private func propctl(_ arguments: [String], stdin: String? = nil) async throws -> CommandResult {
        try await runCommand(BuildProducts.propctl, ["--address", bus.address] + arguments, environment: bus.environment, stdin: stdin)
    }

    private func historyJSON(_ arguments: [String]) async throws -> [[String: Any]] {
        let result = try await propctl(["--json", "history"] + arguments)
        XCTAssertEqual(result.status, 0, "\(result)")
        return try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [[String: Any]], result.stdout)
    }

    /// A daemon with an empty store on the same bus: the old one stopped, its store removed.
    private func restartFresh() async throws {
        await daemon.stop()
        _ = await eventually { !((try? await client.nameHasOwner()) ?? true) }
        if let state = bus.environment["STATE_DIRECTORY"] { try? FileManager.default.removeItem(atPath: state) }
        daemon = try await Daemon.start(on: bus, arguments: daemonArguments, watcher: client)
    }

    func testWithoutAccessChecksTheCallerIsStillNamedInFull() async throws {
        try await client.create("settings.volume", "i", default: .int32(50))
        let set = try await propctl(["set", "settings.volume", "40"])
        XCTAssertEqual(set.status, 0, "\(set)")
        let rows = try await historyJSON(["settings.volume"])
        let row = try XCTUnwrap(rows.last)
        XCTAssertEqual(row["via"] as? String, "Set")
        XCTAssertEqual(row["uid"] as? Int, Int(getuid()))
        XCTAssertEqual(row["user"] as? String, "root")
        XCTAssertEqual(row["comm"] as? String, "propctl")
        XCTAssertNotNil(row["pid"] as? Int, "\(row)")
        XCTAssertTrue((row["exe"] as? String)?.hasSuffix("propctl") == true, "\(row)")
        XCTAssertTrue((row["bus_name"] as? String)?.hasPrefix(":") == true, "\(row)")
    }

    func testABindingsPropagationIsRecordedAsBindingFromItsSourceWithTheCaller() async throws {
        try await client.create("ui.level", "i", default: .int32(0))
        try await client.create("settings.level", "i", default: .int32(0))
        let bind = try await propctl(["bind", "ui.level", "--to", "settings.level", "--persist"])
        XCTAssertEqual(bind.status, 0, "\(bind)")
        let set = try await propctl(["set", "settings.level", "7"])
        XCTAssertEqual(set.status, 0, "\(set)")
        let rows = try await historyJSON(["ui.level"])
        let propagated = try XCTUnwrap(rows.last, "\(rows)")
        XCTAssertEqual(propagated["new"] as? Int, 7)
        XCTAssertEqual(propagated["via"] as? String, "binding from settings.level", "\(propagated)")
        XCTAssertEqual(propagated["comm"] as? String, "propctl", "the binding acted for the Set's caller")
        let sources = try await historyJSON(["settings.level"])
        let source = try XCTUnwrap(sources.last)
        XCTAssertEqual(source["via"] as? String, "Set")
        XCTAssertEqual(source["change"] as? Int, propagated["change"] as? Int, "one call, one change")
    }

    func testACommandsStateKeysAreRecordedAsCommandState() async throws {
        try await client.createCommand("jobs.echo", ["exec": .array(of: .string, [.string("echo"), .string("hi")])])
        _ = try await client.execute("jobs.echo")
        try await client.barrier()
        let rows = try await historyJSON(["jobs.echo"]).filter { ($0["kind"] as? String) == "changed" }
        XCTAssertFalse(rows.isEmpty, "an execution changes Executing and Executions")
        for row in rows { XCTAssertEqual(row["via"] as? String, "command state", "\(row)") }
    }

    func testAModelFilesDeclarationsAtStartupAreRecordedWithItsPath() async throws {
        let models = bus.directory.appendingPathComponent("models-origin")
        try FileManager.default.createDirectory(at: models, withIntermediateDirectories: true)
        let file = models.appendingPathComponent("app.json")
        try #"{"groups": {"app": {"properties": {"mode": {"type": "s", "default": "a"}}}}}"#.write(to: file, atomically: true, encoding: .utf8)
        try await restartDaemon(arguments: ["--model", file.path])
        let rows = try await historyJSON(["app.mode"])
        XCTAssertEqual(rows.first?["via"] as? String, "model file \(file.path)", "\(rows)")
    }

    func testWatchWithOriginNamesWhoMadeEachChange() async throws {
        try await client.create("settings.volume", "i", default: .int32(50))
        let watch = try ChildProcess(BuildProducts.propctl, ["--address", bus.address, "watch", "settings", "--origin"], environment: bus.environment)
        defer { watch.signal(SIGKILL) }
        _ = await eventually { watch.stdout.contains("settings.volume 50") }
        let set = try await propctl(["set", "settings.volume", "40"])
        XCTAssertEqual(set.status, 0, "\(set)")
        let printed = await eventually { watch.stdout.contains("settings.volume 40") }
        XCTAssertTrue(printed, watch.stdout + watch.stderr)
        let line = watch.stdout.split(separator: "\n").first { $0.contains("settings.volume 40") }.map(String.init) ?? ""
        XCTAssertTrue(line.contains("via Set") && line.contains("root") && line.contains("propctl"), line)
    }

    func testWatchWithOriginNamesWhoMadeTheCurrentValues() async throws {
        try await client.create("settings.volume", "i", default: .int32(50))
        let set = try await propctl(["set", "settings.volume", "40"])
        XCTAssertEqual(set.status, 0, "\(set)")
        let watch = try ChildProcess(BuildProducts.propctl, ["--address", bus.address, "watch", "settings", "--origin"], environment: bus.environment)
        defer { watch.signal(SIGKILL) }
        let printed = await eventually { watch.stdout.contains("settings.volume 40") }
        XCTAssertTrue(printed, watch.stdout + watch.stderr)
        let line = watch.stdout.split(separator: "\n").first { $0.contains("settings.volume 40") }.map(String.init) ?? ""
        XCTAssertTrue(line.contains("via Set") && line.contains("root"), line)
        XCTAssertFalse(line.contains("origin unknown"), line)
    }

    func testPerKeyRetentionKeepsTheLatestChangesOfEachKey() async throws {
        try await restartDaemon(arguments: ["--history-max-per-key", "3"])
        try await client.create("app.count", "u", default: .uint32(0))
        try await client.create("app.other", "u", default: .uint32(0))
        for value in 1...10 { try await client.set("app.count", .uint32(UInt32(value))) }
        try await client.set("app.other", .uint32(1))
        // Pruning runs in the background: wait for it, then check it left the latest.
        var counts: [Int] = []
        _ = await eventually {
            counts = ((try? await self.historyJSON(["app.count"])) ?? []).compactMap { $0["new"] as? Int }
            return counts.count <= 3
        }
        XCTAssertEqual(counts, [8, 9, 10])
        let other = try await historyJSON(["app.other"]).compactMap { $0["new"] as? Int }
        XCTAssertEqual(other, [0, 1], "another key's changes are its own")
    }

    func testAHistoryScriptRedoesTheChangesOnAFreshDaemon() async throws {
        try await client.create("settings.volume", "i", default: .int32(50))
        try await client.create("settings.name", "s", default: .string(""))
        try await client.set("settings.volume", .int32(40))
        try await client.set("settings.name", .string("it's a \"name\" $HOME"))
        let script = try await propctl(["history", "settings", "--format", "script"])
        XCTAssertEqual(script.status, 0, "\(script)")
        XCTAssertTrue(script.stdout.contains("propctl set settings.volume 40"), script.stdout)
        try await restartFresh()
        var environment = bus.environment
        environment["PATH"] = URL(fileURLWithPath: BuildProducts.propctl).deletingLastPathComponent().path + ":/usr/bin:/bin"
        environment["DBUS_SESSION_BUS_ADDRESS"] = bus.address
        let ran = try await runCommand("/bin/sh", ["-e", "-c", script.stdout], environment: environment)
        XCTAssertEqual(ran.status, 0, "\(ran)")
        let volume = try await client.get("settings.volume"), name = try await client.get("settings.name")
        XCTAssertEqual(volume, .int32(40))
        XCTAssertEqual(name, .string("it's a \"name\" $HOME"))
    }

    func testAHistoryProfileLoadsIntoAFreshDaemon() async throws {
        try await client.create("settings.volume", "i", default: .int32(50))
        try await client.create("settings.tags", "as", default: .array(of: .string, []))
        try await client.set("settings.volume", .int32(40))
        try await client.set("settings.tags", .array(of: .string, [.string("a"), .string("b c")]))
        try await client.set("settings.volume", .int32(35))
        let profile = try await propctl(["history", "settings", "--format", "profile"])
        XCTAssertEqual(profile.status, 0, "\(profile)")
        try await restartFresh()
        let loaded = try await propctl(["load", "--create", "-"], stdin: profile.stdout)
        XCTAssertEqual(loaded.status, 0, "\(loaded)")
        let volume = try await client.get("settings.volume"), tags = try await client.get("settings.tags")
        XCTAssertEqual(volume, .int32(35))
        XCTAssertEqual(tags, .array(of: .string, [.string("a"), .string("b c")]))
    }
}
