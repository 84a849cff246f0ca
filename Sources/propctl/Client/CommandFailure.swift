import DBus
import PropBus

/// A failed command: what to print on stderr and the exit status (SPEC §9).
struct CommandFailure: Error {
    /// `sysexits.h` values used by propctl.
    enum ExitCode: Int32 {
        case success = 0
        case dbusError = 1
        case usage = 64
        case unavailable = 69
    }

    var code: ExitCode
    var message: String

    /// A D-Bus error: 69 when the service or bus is unreachable, 1 otherwise.
    init(_ error: DBusError) {
        let unavailable: Set<String> = [DBusError.Name.serviceUnknown, DBusError.Name.nameHasNoOwner,
                                        DBusError.Name.noServer, DBusError.Name.disconnected,
                                        "org.freedesktop.DBus.Error.FileNotFound", "org.freedesktop.DBus.Error.NoReply"]
        code = unavailable.contains(error.name) ? .unavailable : .dbusError
        message = "\(error.name): \(error.message)"
    }

    init(_ code: ExitCode, _ message: String) {
        self.code = code
        self.message = message
    }

    /// A VALUE that does not parse as the key's type: a usage error.
    static func badValue(_ key: String, _ error: ValueTextError) -> CommandFailure {
        CommandFailure(.usage, "invalid value for \(key): \(error)")
    }
}
