import CLinux
import Glibc
import PropBus

/// Ends what executions leave behind, even what escaped their process group with `setsid`.
///
/// The daemon is a child subreaper (`PR_SET_CHILD_SUBREAPER`): an orphan among its descendants
/// is reparented to it rather than to init, so it stays in sight. Every execution's program
/// starts with `PROPBUS_EXECUTION_ID` in its environment, which its descendants inherit; an
/// orphan is matched to its execution through `/proc/PID/environ`. No cgroups or namespaces are
/// needed, so this works for an unprivileged daemon too.
///
/// Not a defence against a hostile command (it could clear its environment or re-exec with
/// another one): the argv of a command is fixed by whoever may create commands. An orphan with
/// no execution id is ended only once no execution runs at all, so it cannot outlive the work.
public enum LeftoverProcesses {
    /// Makes this process the reaper of its orphaned descendants. Returns false (and changes
    /// nothing) where the kernel refuses.
    @discardableResult
    public static func becomeSubreaper() -> Bool {
        propbus_set_child_subreaper(1) == 0
    }

    /// Kills the orphans of executions that are not `running` any more, and reaps every zombie
    /// child that is not one of `leaders` (the programs of running executions, which
    /// ``CommandProcess`` itself waits for). Returns how many processes it killed and must come
    /// back for: call again a little later to reap them and to catch what they left behind.
    ///
    /// Call it from the one queue that spawns executions, so `leaders` is complete.
    public static func sweep(running: Set<UInt64>, leaders: Set<pid_t>) -> Int {
        var killed = 0
        for child in children(of: getpid()) where !leaders.contains(child) {
            if isZombie(child) {
                var status: Int32 = 0
                _ = waitpid(child, &status, WNOHANG)
                continue
            }
            let owner = executionID(of: child)
            if let owner, running.contains(owner) { continue }
            // Without an id its execution cannot be told; it surely is a leftover once none runs.
            if owner == nil, !running.isEmpty { continue }
            // Its descendants are reparented to this process as it dies; kill them now as well
            // so that none can fork away in between.
            for pid in [child] + descendants(of: child) {
                kill(pid, SIGKILL)
                killed += 1
            }
        }
        return killed
    }

    /// The children of `pid`, from `/proc/PID/task/*/children` (each thread has its own list).
    static func children(of pid: pid_t) -> [pid_t] {
        var result: [pid_t] = []
        guard let tasks = opendir("/proc/\(pid)/task") else { return [] }
        defer { closedir(tasks) }
        while let entry = readdir(tasks) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard let task = Int32(name) else { continue }
            let text = read("/proc/\(pid)/task/\(task)/children") ?? []
            result += String(decoding: text, as: UTF8.self).split(whereSeparator: { $0 == " " || $0 == "\n" }).compactMap { pid_t($0) }
        }
        return result
    }

    /// Every descendant of `pid` that is still attached to it, deepest last.
    static func descendants(of pid: pid_t) -> [pid_t] {
        var result: [pid_t] = []
        var queue = children(of: pid)
        // Bounded: a fork bomb must not keep the daemon's queue busy.
        while let next = queue.popLast(), result.count < 4096 {
            result.append(next)
            queue += children(of: next)
        }
        return result
    }

    /// The `PROPBUS_EXECUTION_ID` a process started with, if it can be read.
    static func executionID(of pid: pid_t) -> UInt64? {
        guard let environment = read("/proc/\(pid)/environ") else { return nil }
        let prefix = Array("PROPBUS_EXECUTION_ID=".utf8)
        for variable in environment.split(separator: 0) where variable.starts(with: prefix) {
            return UInt64(String(decoding: variable.dropFirst(prefix.count), as: UTF8.self))
        }
        return nil
    }

    /// Whether `pid` has exited and waits to be reaped (state `Z` in `/proc/PID/stat`).
    static func isZombie(_ pid: pid_t) -> Bool {
        guard let stat = read("/proc/\(pid)/stat"), let close = stat.lastIndex(of: UInt8(ascii: ")")) else { return false }
        // "PID (comm) S …": the name may hold spaces and parentheses, the state follows the last ')'.
        let rest = stat[(close + 1)...].drop { $0 == UInt8(ascii: " ") }
        return rest.first == UInt8(ascii: "Z")
    }

    /// A small /proc file's bytes.
    private static func read(_ path: String) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { Glibc.close(fd) }
        var result: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while result.count < 1 << 20 {
            let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count > 0 { result += buffer[0..<count]; continue }
            if count < 0, errno == EINTR { continue }
            if count < 0 { return nil }
            break
        }
        return result
    }
}
