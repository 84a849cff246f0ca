import Glibc
import PropBus
import SystemKit

/// Where the daemon keeps its store (docs/dbus-api.md, "Persistence").
public enum StateDirectory {
    /// The state directory, in order: `$STATE_DIRECTORY` (systemd's `StateDirectory=`; the first
    /// of a colon-separated list), `--state-dir`, then `$XDG_STATE_HOME/propbus` (default
    /// `~/.local/state/propbus`) for a session bus or `/var/lib/propbus` for the system bus.
    public static func resolve(environment: [String: String], option: String?, systemBus: Bool) -> String {
        if let fromSystemd = environment["STATE_DIRECTORY"]?.split(separator: ":").first, !fromSystemd.isEmpty {
            return String(fromSystemd)
        }
        if let option, !option.isEmpty { return option }
        if systemBus { return "/var/lib/propbus" }
        if let state = environment["XDG_STATE_HOME"], state.hasPrefix("/") { return state + "/propbus" }
        return Environment.home(in: environment) + "/.local/state/propbus"
    }

    /// Creates `path` and its parents (mode 0700 for new directories: settings can be private).
    public static func create(_ path: String) throws(PropBusError) {
        do {
            try FileSystem.createDirectories(path, mode: 0o700)
        } catch {
            throw PropBusError(.storeFailed, "cannot create the state directory \(path): \(error)")
        }
    }
}

extension SQLiteStore {
    /// Moves a damaged store (`path`, `path-wal`, `path-shm`) aside with a timestamp suffix,
    /// keeping every file; returns the new paths.
    public static func moveAside(_ path: String, now: time_t = time(nil)) throws(PropBusError) -> [String] {
        var seconds = now
        var utc = tm()
        gmtime_r(&seconds, &utc)
        func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
        let stamp = "\(utc.tm_year + 1900)\(two(utc.tm_mon + 1))\(two(utc.tm_mday))T\(two(utc.tm_hour))\(two(utc.tm_min))\(two(utc.tm_sec))Z"
        let suffix = ".corrupt-" + stamp
        var moved: [String] = []
        // The WAL and shared-memory files go along: the WAL may hold the only copy of recent writes.
        for file in [path, path + "-wal", path + "-shm"] where FileSystem.exists(file) {
            var target = file + suffix
            var attempt = 1
            while FileSystem.exists(target) {
                attempt += 1
                target = file + suffix + "-\(attempt)"
            }
            do {
                try FileSystem.rename(file, to: target)
            } catch {
                throw PropBusError(.storeFailed, "cannot move \(file) aside to \(target): \(error)")
            }
            moved.append(target)
        }
        return moved
    }
}
