import Foundation

/// Two real unprivileged users for the tests that need more than `nobody`: `alice`, in the
/// group `audio`, and `bob`, in no group of interest. Made by the test process (root) with
/// `useradd --system --no-create-home`, once, idempotently (scripts/setup makes them too, so a
/// fresh Debian CI machine has them before the suite runs).
enum TestUsers {
    static let names = ["alice", "bob"]
    static let group = "audio"

    /// Creates the group and the users that are missing; throws when that fails.
    static func ensure() async throws {
        let environment = ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin"]
        func run(_ program: String, _ arguments: [String]) async throws -> CommandResult {
            try await runCommand(program, arguments, environment: environment, timeout: 30)
        }
        if try await run("getent", ["group", group]).status != 0 {
            let made = try await run("groupadd", ["--system", group])
            guard made.succeeded || made.status == 9 else { throw TestSetupError("groupadd \(group): \(made)") }
        }
        for name in names where try await run("getent", ["passwd", name]).status != 0 {
            let made = try await run("useradd", ["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name])
            guard made.succeeded || made.status == 9 else { throw TestSetupError("useradd \(name): \(made)") }
        }
        let groups = try await run("id", ["-nG", "alice"])
        if !groups.stdout.split(separator: " ").contains(where: { $0.trimmingCharacters(in: .whitespacesAndNewlines) == group }) {
            let added = try await run("usermod", ["-aG", group, "alice"])
            guard added.succeeded else { throw TestSetupError("usermod -aG \(group) alice: \(added)") }
        }
    }

    /// `name`'s uid, from the password database.
    static func uid(of name: String) -> UInt32? {
        getpwnam(name).map { $0.pointee.pw_uid }
    }

    /// `setpriv`'s argument vector that runs `executable` as `name`, with `name`'s groups.
    static func command(_ executable: String, _ arguments: [String], as name: String) throws -> (String, [String]) {
        ("setpriv", ["--reuid=\(name)", "--regid=\(name)", "--init-groups", "--", try AsNobody.reachableCopy(of: executable)] + arguments)
    }
}

extension AccessControlTestCase {
    /// `propctl --address <bus> …` as the test user `name` (``TestUsers``).
    func propctl(as name: String, _ arguments: [String]) async throws -> CommandResult {
        var environment = bus.environment
        environment["HOME"] = "/nonexistent"
        let (program, argv) = try TestUsers.command(BuildProducts.propctl, ["--address", bus.address] + arguments, as: name)
        let result = try await runCommand(program, argv, environment: environment, timeout: 15)
        try AsNobody.checkStarted(result, BuildProducts.propctl)
        return result
    }
}
