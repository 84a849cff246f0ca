import Foundation
import Synchronization
import XCTest

/// Children still running, by pid. At the test process's exit they are killed with their
/// process groups: a test that leaks a child (its deinit never runs at exit) must not leave a
/// `dbus-daemon` behind, holding the parallel test runner's output open so that it waits forever.
private let liveChildren = Mutex<Set<pid_t>>([])
private let killLiveChildrenAtExit: Void = {
    atexit {
        for pid in liveChildren.withLock({ $0 }) { kill(-pid, SIGKILL) }
    }
}()

/// How a child process ended.
struct Termination: Sendable, Equatable, CustomStringConvertible {
    /// The exit status, or the signal number when `bySignal` is set.
    var status: Int32
    /// Whether a signal ended the process rather than `exit`.
    var bySignal: Bool

    static func exited(_ status: Int32) -> Termination { Termination(status: status, bySignal: false) }

    var description: String { bySignal ? "killed by signal \(status)" : "exit status \(status)" }
}

/// A child process whose stdout and stderr go to files, so a chatty child can never block on a
/// full pipe and a test can read what it printed so far at any moment.
///
/// Spawned with `posix_spawn` rather than Foundation's `Process`, which passes on the test
/// runner's blocked signal mask: a `dbus-daemon` started that way ignores SIGTERM. Each child
/// gets an empty mask, default dispositions and its own process group.
///
/// `@unchecked Sendable`: the only mutable state, `ended`, is guarded by `lock`.
final class ChildProcess: @unchecked Sendable {
    let executable: String
    let arguments: [String]
    let pid: pid_t
    private let directory: URL
    let stdoutURL: URL
    let stderrURL: URL
    private let lock = NSLock()
    private var ended: Termination?

    /// Starts `executable` (a path, or a name looked up in `PATH`) with `environment` as its
    /// whole environment.
    init(_ executable: String, _ arguments: [String], environment: [String: String], stdin: String? = nil) throws {
        self.executable = try Self.resolve(executable)
        self.arguments = arguments
        directory = try makeTemporaryDirectory(prefix: "pbit-run")
        stdoutURL = directory.appendingPathComponent("stdout")
        stderrURL = directory.appendingPathComponent("stderr")
        let stdinURL = directory.appendingPathComponent("stdin")
        _ = FileManager.default.createFile(atPath: stdinURL.path, contents: Data((stdin ?? "").utf8))

        Self.closeInheritedDescriptorsOnExec()
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, stdinURL.path, O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, stdoutURL.path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_addopen(&actions, 2, stderrURL.path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var mask = sigset_t()
        sigemptyset(&mask)
        posix_spawnattr_setsigmask(&attributes, &mask)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for number in [SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD, SIGUSR1, SIGUSR2] { sigaddset(&defaults, number) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP))

        let argv = ([self.executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var child: pid_t = 0
        let result = posix_spawn(&child, self.executable, &actions, &attributes, argv, envp)
        guard result == 0 else {
            try? FileManager.default.removeItem(at: directory)
            throw TestSetupError("cannot start \(self.executable): \(String(cString: strerror(result)))")
        }
        pid = child
        _ = killLiveChildrenAtExit
        liveChildren.withLock { _ = $0.insert(child) }
    }

    /// Marks every descriptor of the test process above stderr close-on-exec, so that no child
    /// inherits one: a `dbus-daemon` holding the parallel test runner's output pipe (fd 251
    /// here) keeps `swift test --parallel` waiting for an end of file that never comes.
    private static func closeInheritedDescriptorsOnExec() {
        for name in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? [] {
            guard let fd = Int32(name), fd > 2 else { continue }
            let flags = fcntl(fd, F_GETFD)
            if flags >= 0, flags & FD_CLOEXEC == 0 { _ = fcntl(fd, F_SETFD, flags | FD_CLOEXEC) }
        }
    }

    deinit {
        if termination == nil {
            kill(pid, SIGKILL)
            var status: Int32 = 0
            waitpid(pid, &status, 0)
            liveChildren.withLock { _ = $0.remove(pid) }
        }
        try? FileManager.default.removeItem(at: directory)
    }

    var isRunning: Bool { termination == nil }

    /// Everything the child printed on stdout so far.
    var stdout: String { (try? String(contentsOf: stdoutURL, encoding: .utf8)) ?? "" }
    /// Everything the child printed on stderr so far.
    var stderr: String { (try? String(contentsOf: stderrURL, encoding: .utf8)) ?? "" }

    /// How the child ended, or `nil` while it runs. Reaps it the first time it is seen ended.
    var termination: Termination? {
        lock.lock()
        defer { lock.unlock() }
        if let ended { return ended }
        var status: Int32 = 0
        guard waitpid(pid, &status, WNOHANG) == pid else { return nil }
        liveChildren.withLock { _ = $0.remove(pid) }
        // WIFEXITED/WEXITSTATUS/WTERMSIG are macros Swift does not import.
        let signal = status & 0x7f
        ended = signal == 0 ? .exited((status >> 8) & 0xff) : Termination(status: signal, bySignal: true)
        return ended
    }

    func signal(_ number: Int32) {
        if isRunning { kill(pid, number) }
    }

    /// Waits for the child to end; `nil` if it still runs after `timeout` seconds.
    func waitForExit(timeout: TimeInterval) async -> Termination? {
        let deadline = Date().addingTimeInterval(timeout)
        while termination == nil, Date() < deadline {
            try? await Task.sleep(nanoseconds: 2_000_000)
        }
        return termination
    }

    /// SIGTERM, then SIGKILL if the child ignores it: never leaves a process behind.
    @discardableResult
    func stop(timeout: TimeInterval = 5) async -> Termination? {
        signal(SIGTERM)
        if let ended = await waitForExit(timeout: timeout) { return ended }
        signal(SIGKILL)
        return await waitForExit(timeout: timeout)
    }

    static func resolve(_ executable: String) throws -> String {
        if executable.contains("/") {
            guard FileManager.default.isExecutableFile(atPath: executable) else {
                throw TestSetupError("\(executable) does not exist or is not executable; run `swift build` first")
            }
            return executable
        }
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        for directory in path.split(separator: ":") {
            let candidate = "\(directory)/\(executable)"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        throw TestSetupError("\(executable) is not installed (not found in PATH)")
    }
}

/// The outcome of a command run to completion.
struct CommandResult: Sendable, CustomStringConvertible {
    var command: [String]
    var termination: Termination?
    var stdout: String
    var stderr: String

    /// Whether the command hit the timeout and had to be killed.
    var timedOut: Bool { termination == nil }
    /// The exit status, or -1 when killed or timed out.
    var status: Int32 { termination.map { $0.bySignal ? -1 : $0.status } ?? -1 }
    var succeeded: Bool { status == 0 }

    var description: String {
        let ended = termination.map(\.description) ?? "timed out"
        return "`\(command.joined(separator: " "))` → \(ended)\nstdout: \(stdout)\nstderr: \(stderr)"
    }
}

/// Runs a command to completion, killing it after `timeout` seconds so that a stalled tool fails
/// the test instead of hanging it. The timeout only guards against hangs; nothing is measured.
func runCommand(_ executable: String, _ arguments: [String], environment: [String: String],
         stdin: String? = nil, timeout: TimeInterval = 10) async throws -> CommandResult {
    let child = try ChildProcess(executable, arguments, environment: environment, stdin: stdin)
    var ended = await child.waitForExit(timeout: timeout)
    if ended == nil {
        child.signal(SIGKILL)
        _ = await child.waitForExit(timeout: 5)
        ended = nil
    }
    return CommandResult(command: [executable] + arguments, termination: ended, stdout: child.stdout, stderr: child.stderr)
}

/// A set-up failure: a tool is missing, a child would not start, a name never appeared.
struct TestSetupError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Creates a fresh private directory under /tmp (short, so unix socket paths fit in 108 bytes).
func makeTemporaryDirectory(prefix: String) throws -> URL {
    var template = Array("/tmp/\(prefix).XXXXXX".utf8CString)
    guard let result = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
        throw TestSetupError("mkdtemp failed: errno \(errno)")
    }
    return URL(fileURLWithPath: String(cString: result), isDirectory: true)
}

/// Polls `condition` every few milliseconds until it holds or `timeout` seconds pass.
func eventually(timeout: TimeInterval = 5, _ condition: () async throws -> Bool) async rethrows -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    repeat {
        if try await condition() { return true }
        try? await Task.sleep(nanoseconds: 5_000_000)
    } while Date() < deadline
    return try await condition()
}
