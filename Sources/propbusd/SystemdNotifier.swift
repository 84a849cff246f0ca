import Glibc
import SystemKit

/// Sends sd_notify(3) datagrams to `$NOTIFY_SOCKET`, without linking libsystemd.
///
/// Built once at startup with ``fromEnvironment()``, which also takes the watchdog settings.
struct SystemdNotifier: Sendable {
    /// The socket from `$NOTIFY_SOCKET`: a path, or an abstract name written with a leading `@`;
    /// `nil` when not started by systemd (every notification is then a no-op).
    let socket: String?
    /// The watchdog period in microseconds from `$WATCHDOG_USEC`, when the watchdog is meant for
    /// this process; systemd expects `WATCHDOG=1` at least this often.
    let watchdogMicroseconds: UInt64?

    /// Reads `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID`, then removes them from the
    /// environment (sd_notify's `unset_environment`): they are meant for this process only, and a
    /// command propbusd spawns must not report to systemd in its name.
    ///
    /// Call before any other thread starts: `unsetenv` is not thread-safe.
    static func fromEnvironment() -> SystemdNotifier {
        let environment = Environment.current
        let socket = environment["NOTIFY_SOCKET"].flatMap { $0.isEmpty ? nil : $0 }
        var watchdogMicroseconds: UInt64?
        // As sd_watchdog_enabled(3): WATCHDOG_PID, when set, must name this process.
        let forUs = environment["WATCHDOG_PID"].map { pid_t($0) == getpid() } ?? true
        if forUs, let text = environment["WATCHDOG_USEC"], let microseconds = UInt64(text), microseconds > 0 {
            watchdogMicroseconds = microseconds
        }
        for name in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"] { unsetenv(name) }
        return SystemdNotifier(socket: socket, watchdogMicroseconds: watchdogMicroseconds)
    }

    /// Sends `state`, newline-separated assignments such as `READY=1\nSTATUS=…`.
    /// Best effort: a notification that cannot be sent is dropped, as sd_notify's callers do.
    func notify(_ state: String) {
        guard var path = socket else { return }
        let fd = Glibc.socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return }
        defer { close(fd) }
        // A leading '@' names an abstract socket: a NUL byte on the wire.
        let abstract = path.hasPrefix("@")
        if abstract { path.removeFirst() }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let pathBytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard pathBytes.count + 1 < capacity else { return }
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            let offset = abstract ? 1 : 0
            for (i, byte) in pathBytes.enumerated() { buffer[i + offset] = byte }
        }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + pathBytes.count + (abstract ? 1 : 0))
        _ = state.withCString { text in
            withUnsafePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(fd, text, strlen(text), Int32(MSG_NOSIGNAL), $0, length)
                }
            }
        }
    }
}
