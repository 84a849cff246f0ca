import Foundation

/// Where the daemon keeps its store (SPEC §4).
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
        let home = environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()
        return home + "/.local/state/propbus"
    }

    /// Creates `path` and its parents (mode 0700 for new directories: settings can be private).
    public static func create(_ path: String) throws(PropBusError) {
        do {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o700])
        } catch {
            throw PropBusError(.storeFailed, "cannot create the state directory \(path): \(error.localizedDescription)")
        }
    }
}

extension SQLiteStore {
    /// Moves a damaged store (`path`, `path-wal`, `path-shm`) aside with a timestamp suffix,
    /// keeping every file; returns the new paths.
    public static func moveAside(_ path: String, now: Date = Date()) throws(PropBusError) -> [String] {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyyMMdd'T'HHmmss'Z'"
        let suffix = ".corrupt-" + formatter.string(from: now)
        var moved: [String] = []
        // The WAL and shared-memory files go along: the WAL may hold the only copy of recent writes.
        for file in [path, path + "-wal", path + "-shm"] where FileManager.default.fileExists(atPath: file) {
            var target = file + suffix
            var attempt = 1
            while FileManager.default.fileExists(atPath: target) {
                attempt += 1
                target = file + suffix + "-\(attempt)"
            }
            do {
                try FileManager.default.moveItem(atPath: file, toPath: target)
            } catch {
                throw PropBusError(.storeFailed, "cannot move \(file) aside to \(target): \(error.localizedDescription)")
            }
            moved.append(target)
        }
        return moved
    }
}
