import DBus
import Foundation
import XCTest

/// Change history as a user meets it, on a system-like bus with --system-access: who changed a
/// key, when, from what, through propctl; secret values only for their writers; and history
/// that never disagrees with the values, across SIGTERM and kill -9.
final class HistoryTests: AccessControlTestCase, @unchecked Sendable {
    private func historyJSON(_ arguments: [String], asNobody: Bool = false) async throws -> [[String: Any]] {
        let result = asNobody ? try await propctlAsNobody(["--json", "history"] + arguments)
                              : try await tool(BuildProducts.propctl, ["--address", bus.address, "--json", "history"] + arguments)
        XCTAssertEqual(result.status, 0, "\(result)")
        let parsed = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [[String: Any]]
        return try XCTUnwrap(parsed, result.stdout)
    }

    func testHistoryNamesTheCallerOfASetAndItsOldAndNewValue() async throws {
        try await client.create("settings.volume", "i", default: .int32(50), options: ["writers": .variant(.array(of: .string, [.string("nobody")]))])
        assertSucceeded(try await propctlAsNobody(["set", "settings.volume", "40"]))
        let rows = try await historyJSON(["settings.volume"])
        let set = try XCTUnwrap(rows.last, "\(rows)")
        XCTAssertEqual(set["via"] as? String, "Set")
        XCTAssertEqual(set["old"] as? Int, 50)
        XCTAssertEqual(set["new"] as? Int, 40)
        XCTAssertEqual(set["uid"] as? Int, 65534)
        XCTAssertEqual(set["user"] as? String, "nobody")
        XCTAssertEqual(set["comm"] as? String, "propctl")
        XCTAssertNotNil(set["pid"] as? Int)
        XCTAssertTrue((set["bus_name"] as? String)?.hasPrefix(":") == true, "\(set)")
        XCTAssertNotNil(set["revision"] as? Int)
        XCTAssertEqual(rows.first?["kind"] as? String, "created")
        XCTAssertEqual(rows.first?["uid"] as? Int, 0)
    }

    func testOneApplyIsOneChangeAndASecretsValuesAreRedactedForOthers() async throws {
        try await client.create("vault.token", "s", default: .string(""), options: ["secret": .variant(.boolean(true))])
        try await client.create("vault.note", "s", default: .string(""))
        try await client.call(PropBusAPI.manager, "Apply", [
            .dictionary(key: .string, value: .variant, [DictionaryEntry(.string("vault.token"), .variant(.string("hunter2"))),
                                                        DictionaryEntry(.string("vault.note"), .variant(.string("rotated")))]),
            .array(of: .string, []),
        ])
        let mine = try await historyJSON(["vault"]).filter { $0["via"] as? String == "Apply" }
        XCTAssertEqual(mine.count, 2)
        XCTAssertEqual(Set(mine.compactMap { $0["change"] as? Int }).count, 1, "one Apply is one change: \(mine)")
        XCTAssertTrue(mine.contains { $0["new"] as? String == "hunter2" }, "the writer sees the value")
        let theirs = try await historyJSON(["vault"], asNobody: true).filter { $0["via"] as? String == "Apply" }
        let token = try XCTUnwrap(theirs.first { $0["key"] as? String == "vault.token" })
        XCTAssertEqual(token["new"] as? String, "<redacted>")
        XCTAssertEqual(theirs.first { $0["key"] as? String == "vault.note" }?["new"] as? String, "rotated")
    }

    func testHistoryAndValuesAgreeAfterKill9AndSIGTERM() async throws {
        try await client.create("app.count", "u", default: .uint32(0))
        for value in 1...20 { try await client.set("app.count", .uint32(UInt32(value))) }
        daemon.process.signal(SIGKILL)
        _ = await daemon.process.waitForExit(timeout: 10)
        _ = await eventually { !((try? await client.nameHasOwner()) ?? true) }
        daemon = try await Daemon.start(on: bus, arguments: daemonArguments, watcher: client)
        let rows = try await historyJSON(["app.count"])
        XCTAssertEqual(rows.compactMap { $0["new"] as? Int }, Array(0...20), "every acknowledged write, none other")
        let value = try await client.get("app.count")
        XCTAssertEqual(value, .uint32(20))
        // And across a clean stop (SIGTERM) too.
        try await client.set("app.count", .uint32(21))
        try await restartDaemon(arguments: daemonArguments)
        let after = try await historyJSON(["app.count"])
        XCTAssertEqual(after.compactMap { $0["new"] as? Int }, Array(0...21))
    }

    private func propctl(_ arguments: [String]) async throws -> CommandResult {
        try await tool(BuildProducts.propctl, ["--address", bus.address] + arguments)
    }

    func testRevertToARevisionRestoresTheValueInOneChangeViaRevert() async throws {
        try await client.create("settings.volume", "i", default: .int32(50))
        try await client.create("settings.muted", "b", default: .boolean(false))
        let before = try await historyJSON(["settings"])
        let created = before.last?["revision"] as? Int
        try await client.set("settings.volume", .int32(40))
        try await client.set("settings.muted", .boolean(true))
        let revert = try await propctl(["revert", "settings", "--to", "@\(try XCTUnwrap(created))"])
        XCTAssertEqual(revert.status, 0, "\(revert)")
        let volume = try await client.get("settings.volume"), muted = try await client.get("settings.muted")
        XCTAssertEqual(volume, .int32(50))
        XCTAssertEqual(muted, .boolean(false), "muted did not exist yet at that revision: its value then was its default, as created")
        let reverts = try await historyJSON(["settings"]).filter { $0["via"] as? String == "Revert" }
        XCTAssertEqual(reverts.count, 2, "\(reverts)")
        XCTAssertEqual(Set(reverts.compactMap { $0["change"] as? Int }).count, 1, "one atomic change")
    }

    /// Without a store (`--in-memory`) the daemon has no history, and with `--no-history` it
    /// keeps none: history and revert say so (`Unavailable`) rather than answer empty.
    func testWithoutAStoreOrWithNoHistoryHistoryAndRevertAreUnavailable() async throws {
        for (index, extra) in [["--in-memory"], ["--no-history"]].enumerated() {
            try await restartDaemon(arguments: daemonArguments + extra)
            try await client.create("app.level\(index)", "i", default: .int32(1))
            for arguments in [["history", "app.level\(index)"], ["revert", "app.level\(index)", "--to", "@1"]] {
                let result = try await propctl(arguments)
                XCTAssertNotEqual(result.status, 0, "\(extra) \(arguments): \(result)")
                XCTAssertTrue(result.stderr.contains("Unavailable") && result.stderr.contains("keeps no history"),
                              "\(extra) \(arguments): \(result.stderr)")
            }
        }
    }

    func testRevertOfAChangeOverwrittenSinceIsAConflictNamingWhoUnlessForced() async throws {
        try await client.create("settings.volume", "i", default: .int32(50), options: ["writers": .variant(.array(of: .string, [.string("nobody")]))])
        try await client.set("settings.volume", .int32(40))
        let rows = try await historyJSON(["settings.volume"])
        let change = try XCTUnwrap(rows.last?["change"] as? Int)
        assertSucceeded(try await propctlAsNobody(["set", "settings.volume", "30"]))
        let refused = try await propctl(["revert", "--change", "\(change)"])
        XCTAssertEqual(refused.status, 1)
        XCTAssertTrue(refused.stderr.contains("Conflict") && refused.stderr.contains("nobody changed it since"), refused.stderr)
        let unchanged = try await client.get("settings.volume")
        XCTAssertEqual(unchanged, .int32(30))
        assertSucceeded(try await propctl(["revert", "--change", "\(change)", "--force"]))
        let reverted = try await client.get("settings.volume")
        XCTAssertEqual(reverted, .int32(50))
    }

    func testBlameShowsOneLinePerKeyWithItsLatestChange() async throws {
        try await client.create("settings.volume", "i", default: .int32(50))
        try await client.create("settings.muted", "b", default: .boolean(false))
        try await client.set("settings.volume", .int32(40))
        try await client.set("settings.volume", .int32(30))
        let result = try await propctl(["--json", "blame", "settings"])
        XCTAssertEqual(result.status, 0, "\(result)")
        let rows = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [[String: Any]])
        XCTAssertEqual(rows.compactMap { $0["key"] as? String }, ["settings.muted", "settings.volume"])
        XCTAssertEqual(rows.last?["new"] as? Int, 30)
        XCTAssertEqual(rows.last?["via"] as? String, "Set")
        let table = try await propctl(["blame", "settings"])
        XCTAssertEqual(table.stdout.split(separator: "\n").count, 2, "one line per key: \(table.stdout)")
    }

    func testChangesOfAReloadAreRecordedViaReload() async throws {
        let models = bus.directory.appendingPathComponent("models-history")
        try FileManager.default.createDirectory(at: models, withIntermediateDirectories: true)
        let file = models.appendingPathComponent("app.json")
        try #"{"groups": {"app": {"properties": {"mode": {"type": "s", "default": "a"}}}}}"#.write(to: file, atomically: true, encoding: .utf8)
        try await restartDaemon(arguments: daemonArguments + ["--model", file.path])
        try #"{"groups": {"app": {"properties": {"mode": {"type": "s", "default": "b"}}}}}"#.write(to: file, atomically: true, encoding: .utf8)
        try await client.call(PropBusAPI.manager, "Reload")
        let rows = try await historyJSON(["app.mode"])
        XCTAssertEqual(rows.first?["via"] as? String, "model file \(file.path)", "\(rows)")
        XCTAssertEqual(rows.last?["via"] as? String, "reload", "\(rows)")
        XCTAssertEqual(rows.last?["new"] as? String, "b")
    }
}
