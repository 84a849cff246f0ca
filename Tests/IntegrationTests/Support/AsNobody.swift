import Foundation
import Synchronization

/// Running programs as the unprivileged user `nobody` (uid and gid 65534, no supplementary
/// groups), wherever the checkout lives.
///
/// A clone under a 0700 directory (`/root`, most homes, `mktemp -d`) keeps `nobody` from
/// reaching the build products, so a build product that `nobody` could not reach is run from a
/// copy in a world-readable directory of the test process's own. A program that could not be
/// started at all is a set-up failure (``TestSetupError``), never a policy result.
enum AsNobody {
    static let uid: UInt32 = 65534

    /// `setpriv`'s argument vector that runs `executable` with `arguments` as `nobody`.
    ///
    /// `setpriv` keeps its capabilities until the `execve` itself, so it can start a program
    /// that `nobody` could not reach; ``reachableCopy(of:)`` is what makes that program's own
    /// view (and `runuser`'s) honest.
    static func command(_ executable: String, _ arguments: [String]) throws -> (String, [String]) {
        ("setpriv", ["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", "--", try reachableCopy(of: executable)] + arguments)
    }

    /// Runs `executable` as `nobody` and waits for it; throws when it could not be started.
    static func run(_ executable: String, _ arguments: [String], environment: [String: String],
                    timeout: TimeInterval = 15) async throws -> CommandResult {
        let (program, argv) = try command(executable, arguments)
        let result = try await runCommand(program, argv, environment: environment, timeout: timeout)
        try checkStarted(result, executable)
        return result
    }

    /// Throws when `result` is `setpriv`'s or `runuser`'s own report that the program could
    /// not be executed ("setpriv: failed to execute …", exit 127; "runuser: …", exit 1), so
    /// that a test does not read it as the daemon's or the bus's answer.
    static func checkStarted(_ result: CommandResult, _ executable: String) throws {
        let lines = result.stderr.split(separator: "\n")
        if result.status != 0, lines.contains(where: { $0.hasPrefix("setpriv: failed to execute") || $0.hasPrefix("runuser: failed to execute") }) {
            throw TestSetupError("could not start \(executable) as nobody (uid \(uid)), so nothing was checked: \(result.stderr)")
        }
    }

    /// `path` itself when `nobody` can reach and execute it, else a copy in a 0755 directory
    /// of this test process (made once per program).
    static func reachableCopy(of path: String) throws -> String {
        guard path.hasPrefix("/"), !isReachable(path) else { return path }
        return try copies.withLock { copies in
            if let copy = copies[path] { return copy }
            let directory = try copyDirectory()
            let copy = directory + "/" + URL(fileURLWithPath: path).lastPathComponent
            try? FileManager.default.removeItem(atPath: copy)
            try FileManager.default.copyItem(atPath: path, toPath: copy)
            guard chmod(copy, 0o755) == 0 else { throw TestSetupError("chmod \(copy): errno \(errno)") }
            copies[path] = copy
            return copy
        }
    }

    /// Whether every directory above `path` is searchable by others and `path` is executable
    /// by others: what the kernel checks for a user who is neither owner nor group member.
    static func isReachable(_ path: String) -> Bool {
        var prefix = ""
        for component in path.split(separator: "/") {
            prefix += "/" + component
            var info = stat()
            guard stat(prefix, &info) == 0, info.st_mode & S_IXOTH != 0 else { return false }
        }
        return true
    }

    private static let copies = Mutex<[String: String]>([:])

    /// `/tmp/propbus-nobody-bin.<pid>`, 0755; directories of test processes that are gone are
    /// removed first, so interrupted runs leave nothing behind for long.
    private static func copyDirectory() throws -> String {
        let prefix = "propbus-nobody-bin."
        for name in (try? FileManager.default.contentsOfDirectory(atPath: "/tmp")) ?? [] where name.hasPrefix(prefix) {
            if let pid = Int32(name.dropFirst(prefix.count)), pid != getpid(), kill(pid, 0) != 0, errno == ESRCH {
                try? FileManager.default.removeItem(atPath: "/tmp/" + name)
            }
        }
        let directory = "/tmp/\(prefix)\(getpid())"
        if mkdir(directory, 0o755) != 0, errno != EEXIST { throw TestSetupError("mkdir \(directory): errno \(errno)") }
        guard chmod(directory, 0o755) == 0 else { throw TestSetupError("chmod \(directory): errno \(errno)") }
        return directory
    }
}
