import Glibc
import SystemKit

/// Which bus to connect to.
public enum BusAddress: Sendable, Hashable {
    /// The user's session bus.
    case session
    /// The system bus.
    case system
    /// Any D-Bus address, e.g. `unix:path=/tmp/bus`.
    case address(String)

    /// The address string libdbus will open.
    ///
    /// Resolved by hand rather than with `dbus_bus_get`, which would register synchronously.
    public func resolved(environment: [String: String] = Environment.current) throws(DBusError) -> String {
        switch self {
        case .address(let address):
            return address
        case .system:
            return environment["DBUS_SYSTEM_BUS_ADDRESS"] ?? "unix:path=/var/run/dbus/system_bus_socket"
        case .session:
            if let address = environment["DBUS_SESSION_BUS_ADDRESS"], !address.isEmpty { return address }
            if let runtime = environment["XDG_RUNTIME_DIR"], FileSystem.exists(runtime + "/bus") {
                return "unix:path=\(runtime)/bus"
            }
            throw DBusError(name: DBusError.Name.noServer,
                            message: "no session bus: DBUS_SESSION_BUS_ADDRESS is not set and $XDG_RUNTIME_DIR/bus does not exist")
        }
    }
}
