import DBus
import Foundation
import XCTest

/// History's users, checked as a user would run it: on a private system-like bus with
/// `--system-access --history-denied`, two real unprivileged users, `alice` (in `audio`) and
/// `bob` (not), and root; history names who did what, records bob's refused attempt for root
/// only, and a revert restores the value in one signal.
final class HistoryUsersTests: AccessControlTestCase, @unchecked Sendable {
    override var daemonArguments: [String] { ["--system-access", "--history-denied"] }

    override func setUp() async throws {
        guard getuid() == 0 else { throw XCTSkip("calling as alice and bob (setpriv) needs root") }
        try await TestUsers.ensure()
        try await super.setUp()
    }

    private func propctl(_ arguments: [String]) async throws -> CommandResult {
        try await tool(BuildProducts.propctl, ["--address", bus.address] + arguments)
    }

    private func json(_ result: CommandResult) throws -> [[String: Any]] {
        XCTAssertEqual(result.status, 0, "\(result)")
        return try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [[String: Any]], result.stdout)
    }

    func testAliceSetsBobIsRefusedRootSeesBothAndARevertIsOneSignal() async throws {
        assertSucceeded(try await propctl(["create", "settings.volume", "i", "--default", "50", "--writers", "@audio"]))
        assertSucceeded(try await propctl(["create", "settings.muted", "b", "--default", "false"]))
        assertSucceeded(try await propctl(as: "alice", ["set", "settings.volume", "40"]))
        let refused = try await propctl(as: "bob", ["set", "settings.volume", "30"])
        XCTAssertFalse(refused.succeeded, "\(refused)")
        XCTAssertTrue(refused.stderr.contains(Self.accessDenied), "\(refused)")

        let rows = try json(try await propctl(["--json", "history", "settings.volume"]))
        let set = try XCTUnwrap(rows.last, "\(rows)")
        XCTAssertEqual(set["via"] as? String, "Set")
        XCTAssertEqual(set["old"] as? Int, 50)
        XCTAssertEqual(set["new"] as? Int, 40)
        XCTAssertEqual(set["uid"] as? Int, TestUsers.uid(of: "alice").map(Int.init))
        XCTAssertEqual(set["user"] as? String, "alice")
        XCTAssertEqual(set["comm"] as? String, "propctl")
        XCTAssertNotNil(set["pid"] as? Int)
        XCTAssertNotNil(set["time"] as? Int)
        XCTAssertTrue((set["bus_name"] as? String)?.hasPrefix(":") == true, "\(set)")
        let created = try XCTUnwrap(rows.first?["revision"] as? Int)
        XCTAssertFalse(rows.contains { $0["user"] as? String == "bob" }, "a refused attempt is no change: \(rows)")

        // bob's attempt, for root only.
        let denied = try json(try await propctl(["--json", "history", "settings.volume", "--denied"]))
        let attempt = try XCTUnwrap(denied.last, "\(denied)")
        XCTAssertEqual(attempt["user"] as? String, "bob")
        XCTAssertEqual(attempt["uid"] as? Int, TestUsers.uid(of: "bob").map(Int.init))
        XCTAssertEqual(attempt["key"] as? String, "settings.volume")
        XCTAssertEqual(attempt["via"] as? String, "Set")
        XCTAssertEqual(attempt["comm"] as? String, "propctl")
        XCTAssertTrue((attempt["error"] as? String)?.hasSuffix("AccessDenied") == true, "\(attempt)")
        XCTAssertNil(attempt["new"], "a refused value is never recorded: \(attempt)")
        let asBob = try await propctl(as: "bob", ["--json", "history", "--denied"])
        XCTAssertFalse(asBob.succeeded, "refused attempts are for privileged callers: \(asBob)")
        XCTAssertTrue(asBob.stderr.contains(Self.accessDenied), "\(asBob)")

        // blame: one line per key.
        let blame = try await propctl(["blame", "settings"])
        XCTAssertEqual(blame.stdout.split(separator: "\n").filter { !$0.hasPrefix("REV") }.count, 2, blame.stdout)
        XCTAssertTrue(blame.stdout.contains("alice"), blame.stdout)

        // revert: 50 again, exactly one PropertiesChanged, a history row via Revert.
        let recorder = try await client.record(path: PropBusAPI.locate("settings.volume").path, interface: PropBusAPI.properties,
                                               member: "PropertiesChanged")
        assertSucceeded(try await propctl(["revert", "settings.volume", "--to", "@\(created)"]))
        try await client.barrier()
        let volume = try await client.get("settings.volume")
        XCTAssertEqual(volume, .int32(50))
        let name = PropBusAPI.locate("settings.volume").name
        XCTAssertEqual(recorder.signals.filter { $0.changed[name] != nil }.count, 1, "\(recorder.signals)")
        let after = try json(try await propctl(["--json", "history", "settings.volume"]))
        XCTAssertEqual(after.last?["via"] as? String, "Revert")
        XCTAssertEqual(after.last?["new"] as? Int, 50)
        XCTAssertEqual(after.last?["user"] as? String, "root")
    }

    func testASecretKeysHistoryShowsRedactedToANonWriter() async throws {
        assertSucceeded(try await propctl(["create", "vault.pin", "s", "--default", "", "--writers", "@audio", "--secret"]))
        assertSucceeded(try await propctl(as: "alice", ["set", "vault.pin", "1234"]))
        let mine = try json(try await propctl(as: "alice", ["--json", "history", "vault.pin"]))
        XCTAssertEqual(mine.last?["new"] as? String, "1234", "a writer reads the value")
        let theirs = try json(try await propctl(as: "bob", ["--json", "history", "vault.pin"]))
        XCTAssertEqual(theirs.last?["new"] as? String, "<redacted>", "\(theirs)")
        XCTAssertEqual(theirs.last?["user"] as? String, "alice", "who changed it is not secret")
        let refused = try await propctl(as: "bob", ["set", "vault.pin", "9999"])
        XCTAssertFalse(refused.succeeded)
        let denied = try await propctl(["--json", "history", "--denied"])
        XCTAssertFalse(denied.stdout.contains("9999"), "a refused secret value is never recorded: \(denied.stdout)")
    }

    /// Revert to a revision, or of a change, tells a non-writer nothing of a secret's value:
    /// not whether it holds the value it had then (an empty reply), nor whether it changed since
    /// (a Conflict naming who); AccessDenied comes first.
    func testRevertOfASecretKeyByANonWriterIsDeniedBeforeItsValueIsCompared() async throws {
        assertSucceeded(try await propctl(["create", "vault.pin", "s", "--default", "", "--writers", "@audio", "--secret"]))
        assertSucceeded(try await propctl(as: "alice", ["set", "vault.pin", "1234"]))
        let before = try json(try await propctl(["--json", "history", "vault.pin"]))
        let then = try XCTUnwrap(before.last?["revision"] as? Int)
        assertSucceeded(try await propctl(as: "alice", ["set", "vault.pin", "5678"]))
        let changed = try json(try await propctl(["--json", "history", "vault.pin"]))
        let change = try XCTUnwrap(changed.last?["change"] as? Int)
        assertSucceeded(try await propctl(as: "alice", ["set", "vault.pin", "1234"]))

        let same = try await propctl(as: "bob", ["revert", "vault.pin", "--to", "@\(then)"])
        XCTAssertFalse(same.succeeded, "the value equals the one at @\(then): \(same)")
        XCTAssertTrue(same.stderr.contains("AccessDenied") && same.stderr.contains("vault.pin"), same.stderr)
        let overwritten = try await propctl(as: "bob", ["revert", "--change", "\(change)"])
        XCTAssertTrue(overwritten.stderr.contains("AccessDenied") && overwritten.stderr.contains("vault.pin"), overwritten.stderr)
        XCTAssertFalse(overwritten.stderr.contains("changed it since"), overwritten.stderr)
    }

    func testHistoryFiltersByUserAndTime() async throws {
        assertSucceeded(try await propctl(["create", "settings.volume", "i", "--default", "50", "--writers", "@audio"]))
        assertSucceeded(try await propctl(as: "alice", ["set", "settings.volume", "40"]))
        assertSucceeded(try await propctl(["set", "settings.volume", "45"]))
        let alices = try json(try await propctl(["--json", "history", "settings.volume", "--user", "alice"]))
        XCTAssertEqual(alices.compactMap { $0["new"] as? Int }, [40], "\(alices)")
        let aliasBy = try json(try await propctl(["--json", "history", "settings.volume", "--by", "alice"]))
        XCTAssertEqual(aliasBy.compactMap { $0["new"] as? Int }, [40])
        let recent = try json(try await propctl(["--json", "history", "settings.volume", "--since", "1h"]))
        XCTAssertEqual(recent.compactMap { $0["new"] as? Int }, [50, 40, 45])
        let future = try json(try await propctl(["--json", "history", "settings.volume", "--since", "2999-01-01"]))
        XCTAssertEqual(future.count, 0)
        let past = try json(try await propctl(["--json", "history", "settings.volume", "--until", "2000-01-01T00:00:00Z"]))
        XCTAssertEqual(past.count, 0)
    }
}
