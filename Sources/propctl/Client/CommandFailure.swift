import DBus
import PropBus

/// A failed command: what to print on stderr and the exit status (``ExitCode``).
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
    /// Whether it says that nothing owns propbusd's name: `main` words the advice for the bus
    /// the command line chose (``notRunning(on:)``).
    var isNotRunning = false

    /// A D-Bus error: 69 when the service or bus is unreachable, 1 otherwise.
    init(_ error: DBusError) {
        let unavailable: Set<String> = [DBusError.Name.serviceUnknown, DBusError.Name.nameHasNoOwner,
                                        DBusError.Name.noServer, DBusError.Name.disconnected,
                                        DBusError.Name.fileNotFound, DBusError.Name.noReply]
        code = unavailable.contains(error.name) ? .unavailable : .dbusError
        if error.name == DBusError.Name.serviceUnknown || error.name == DBusError.Name.nameHasNoOwner {
            // The bus's own text ("The name is not activatable") says nothing to a user.
            message = Self.notRunning(on: .session)
            isNotRunning = true
        } else {
            message = "\(error.name): \(error.message)"
        }
    }

    /// The one message for "nothing owns org.propbus.PropBus1 on this bus", with how to start
    /// propbusd there.
    static func notRunning(on bus: BusAddress) -> String {
        let owner = "nothing owns \(PropbusClient.busName)"
        switch bus {
        case .session:
            return "propbusd is not running on the session bus (\(owner)); start it with 'systemctl --user start propbusd', or scripts/run in a clone"
        case .system:
            return "propbusd is not running on the system bus (\(owner)); start it as root with 'systemctl start propbusd' (at every boot: 'systemctl enable --now propbusd')"
        case .address(let address):
            return "propbusd is not running on the bus at \(address) (\(owner)); start one there with 'propbusd --address \(address)'"
        }
    }

    /// ``notRunning(on:)``'s failure (exit status 69).
    static var notRunning: CommandFailure {
        var failure = CommandFailure(.unavailable, notRunning(on: .session))
        failure.isNotRunning = true
        return failure
    }

    init(_ code: ExitCode, _ message: String) {
        self.code = code
        self.message = message
    }

    /// A VALUE that does not parse as the key's type. Exit status 1, the same as when the
    /// daemon refuses a value: whoever notices, a bad value is not a malformed command line.
    static func badValue(_ key: String, _ error: ValueTextError) -> CommandFailure {
        badValue("invalid value for \(key): \(error)")
    }

    /// Any other value that does not parse (an option's value, a document's entry): exit 1.
    static func badValue(_ message: String) -> CommandFailure {
        CommandFailure(.dbusError, "\(PropBusError.Code.invalidValue.dbusName): \(message)")
    }
}
