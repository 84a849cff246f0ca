import DBus
import Foundation
import XCTest

/// `propctl revert --since … [--until …]`: every change of a span of history undone at once,
/// atomically (one Apply, one change via Revert), as a user undoes "what happened this hour".
final class HistoryRangeRevertTests: AccessControlTestCase, @unchecked Sendable {
    private func propctl(_ arguments: [String]) async throws -> CommandResult {
        try await tool(BuildProducts.propctl, ["--address", bus.address] + arguments)
    }

    private func history(_ arguments: [String]) async throws -> [[String: Any]] {
        let result = try await propctl(["--json", "history"] + arguments)
        XCTAssertEqual(result.status, 0, "\(result)")
        return try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [[String: Any]], result.stdout)
    }

    private func latestRevision() async throws -> Int {
        let rows = try await history([])
        return try XCTUnwrap(rows.compactMap { $0["revision"] as? Int }.max())
    }

    func testARangeOfAGroupGoesBackToBeforeItsFirstChangeInOneChangeAndLeavesOthersAlone() async throws {
        try await client.create("settings.volume", "i", default: .int32(50))
        try await client.create("settings.muted", "b", default: .boolean(false))
        try await client.create("app.count", "i", default: .int32(1))
        try await client.set("settings.volume", .int32(40))
        let since = try await latestRevision() + 1
        try await client.set("settings.volume", .int32(30))
        try await client.set("settings.muted", .boolean(true))
        try await client.set("settings.volume", .int32(20))
        try await client.set("app.count", .int32(2))

        let revert = try await propctl(["revert", "settings", "--since", "@\(since)"])
        XCTAssertEqual(revert.status, 0, "\(revert)")
        XCTAssertEqual(Set(revert.stdout.split(separator: "\n").map(String.init)), ["reverted settings.volume", "reverted settings.muted"])
        let volume = try await client.get("settings.volume"), muted = try await client.get("settings.muted"), count = try await client.get("app.count")
        XCTAssertEqual(volume, .int32(40), "the value before the range's first change")
        XCTAssertEqual(muted, .boolean(false))
        XCTAssertEqual(count, .int32(2), "not named: untouched")
        let reverts = try await history(["settings"]).filter { $0["via"] as? String == "Revert" }
        XCTAssertEqual(reverts.count, 2, "\(reverts)")
        XCTAssertEqual(Set(reverts.compactMap { $0["change"] as? Int }).count, 1, "one atomic change")
    }

    func testARangeChangedSinceIsAConflictNamingWhoUnlessForcedAndUntilBoundsIt() async throws {
        try await client.create("settings.volume", "i", default: .int32(50), options: ["writers": .variant(.array(of: .string, [.string("nobody")]))])
        let since = try await latestRevision() + 1
        try await client.set("settings.volume", .int32(40))
        let until = try await latestRevision()
        assertSucceeded(try await propctlAsNobody(["set", "settings.volume", "30"]))

        let refused = try await propctl(["revert", "--since", "@\(since)", "--until", "@\(until)"])
        XCTAssertEqual(refused.status, 1, "\(refused)")
        XCTAssertTrue(refused.stderr.contains("Conflict") && refused.stderr.contains("nobody changed it since"), refused.stderr)
        let unchanged = try await client.get("settings.volume")
        XCTAssertEqual(unchanged, .int32(30))

        assertSucceeded(try await propctl(["revert", "--since", "@\(since)", "--until", "@\(until)", "--force"]))
        let reverted = try await client.get("settings.volume")
        XCTAssertEqual(reverted, .int32(50))
    }

    func testARangeWithoutChangesOrOverAPropertysCreationIsRefusedWithWhy() async throws {
        try await client.create("settings.volume", "i", default: .int32(50))
        let next = try await latestRevision() + 1
        let empty = try await propctl(["revert", "settings", "--since", "@\(next)"])
        XCTAssertEqual(empty.status, 1, "\(empty)")
        XCTAssertTrue(empty.stderr.contains("no change"), empty.stderr)

        let since = try await latestRevision() + 1
        try await client.create("settings.balance", "i", default: .int32(0))
        let created = try await propctl(["revert", "--since", "@\(since)"])
        XCTAssertEqual(created.status, 1, "\(created)")
        XCTAssertTrue(created.stderr.contains("settings.balance") && created.stderr.contains("created"), created.stderr)
        let usage = try await propctl(["revert", "settings", "--since", "@1", "--to", "@1"])
        XCTAssertEqual(usage.status, 64, "\(usage)")
    }

    /// Whether a secret key's value is back to what it was, or changed since, is not told to a
    /// caller who may not write it: every key of the span is checked before any value is compared.
    func testARangeOverASecretKeyTheCallerMayNotWriteIsDeniedWhateverItsValues() async throws {
        assertSucceeded(try await propctl(["create", "vault.pin", "s", "--default", "", "--secret"]))
        assertSucceeded(try await propctl(["set", "vault.pin", "1234"]))
        let since = try await latestRevision() + 1
        assertSucceeded(try await propctl(["set", "vault.pin", "5678"]))
        assertSucceeded(try await propctl(["set", "vault.pin", "1234"]))
        // Back to the value before the span: a revert would change nothing.
        assertDenied(try await propctlAsNobody(["revert", "vault.pin", "--since", "@\(since)"]), naming: "vault.pin")
        assertDenied(try await propctlAsNobody(["revert", "--since", "@\(since)"]), naming: "vault.pin")

        let until = try await latestRevision()
        assertSucceeded(try await propctl(["set", "vault.pin", "9999"]))
        // Changed after the span: a Conflict would tell that it changed, and who changed it.
        let conflict = try await propctlAsNobody(["revert", "vault.pin", "--since", "@\(since)", "--until", "@\(until)"])
        assertDenied(conflict, naming: "vault.pin")
        XCTAssertFalse(conflict.stderr.contains("changed it since"), conflict.stderr)
        let unchanged = try await client.get("vault.pin")
        XCTAssertEqual(unchanged, .string("9999"))
    }

    /// One call reads a bounded span: a span of more changes than RevertRange reads at once is
    /// refused with LimitsExceeded naming the bound (by anyone: the scan holds the daemon's
    /// queue), and a narrower one still goes, also when it starts at a time.
    func testASpanOfMoreChangesThanOneCallReadsIsRefusedWithTheBound() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("revert-span-\(getpid())").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let names = (0..<1000).map { "k\($0)" }
        let model = names.map { "\"\($0)\": {\"type\": \"i\", \"default\": 0}" }.joined(separator: ", ")
        try "{\"groups\": {\"bulk\": {\"properties\": {\(model)}}}}".write(toFile: directory + "/bulk.json", atomically: true, encoding: .utf8)
        try await restartDaemon(arguments: daemonArguments + ["--model", directory + "/bulk.json"])
        let since = try await latestRevision() + 1
        // 11 000 changes: one Apply of the 1000 keys, 11 times.
        for round in 1...11 {
            let values = names.map { "\"bulk.\($0)\": {\"type\": \"i\", \"value\": \(round)}" }.joined(separator: ", ")
            try "{\"properties\": {\(values)}}".write(toFile: directory + "/values.json", atomically: true, encoding: .utf8)
            assertSucceeded(try await propctl(["load", directory + "/values.json"]))
        }
        for result in [try await propctl(["revert", "--since", "@\(since)"]), try await propctlAsNobody(["revert", "--since", "@\(since)"])] {
            XCTAssertEqual(result.status, 1, "\(result)")
            XCTAssertTrue(result.stderr.contains("LimitsExceeded") && result.stderr.contains("10000"), result.stderr)
        }
        // A start given as a time before them all: the same span, the same refusal.
        let byTime = try await propctl(["revert", "--since", "2000-01-01"])
        XCTAssertTrue(byTime.stderr.contains("LimitsExceeded") && byTime.stderr.contains("10000"), byTime.stderr)
        let untouched = try await client.get("bulk.k0")
        XCTAssertEqual(untouched, .int32(11))
        // A span starting at a time is found through the time index: a recent one reads only
        // its own rows, however many lie before it.
        try await client.set("bulk.k5", .int32(99))
        let rows = try await history(["bulk.k5"])
        let time = try XCTUnwrap(rows.last?["time"] as? Int)
        let formatter = ISO8601DateFormatter()
        let seconds = formatter.string(from: Date(timeIntervalSince1970: TimeInterval(time / 1_000_000_000)))
        let changed = seconds.dropLast() + "." + String(String(time % 1_000_000_000).reversed()).padding(toLength: 9, withPad: "0", startingAt: 0).reversed() + "Z"
        let recent = try await propctl(["revert", "--since", String(changed)])
        XCTAssertEqual(recent.status, 0, "\(recent)")
        XCTAssertEqual(recent.stdout, "reverted bulk.k5\n")
        let back = try await client.get("bulk.k5")
        XCTAssertEqual(back, .int32(11))
        assertSucceeded(try await propctl(["revert", "bulk.k0", "--since", "@\(since)"]))
        let reverted = try await client.get("bulk.k0")
        XCTAssertEqual(reverted, .int32(0))
    }
}
