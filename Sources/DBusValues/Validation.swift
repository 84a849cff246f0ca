import CDBus

/// Name and path checks from libdbus (`dbus_validate_*`), surfaced as thrown ``DBusError``s.
///
/// Run these on anything that comes from outside before handing it to a libdbus constructor,
/// which would otherwise abort the process.
public enum Validation {
    /// `dbus_validate_path`.
    public static func check(path: String) throws(DBusError) {
        guard ObjectPath.isValid(path) else { throw .invalidArgs("invalid object path '\(path)'") }
    }

    /// `dbus_validate_interface`.
    public static func check(interface: String) throws(DBusError) {
        guard dbus_validate_interface(interface, nil) != 0 else { throw .invalidArgs("invalid interface name '\(interface)'") }
    }

    /// `dbus_validate_member`.
    public static func check(member: String) throws(DBusError) {
        guard dbus_validate_member(member, nil) != 0 else { throw .invalidArgs("invalid member name '\(member)'") }
    }

    /// `dbus_validate_bus_name`.
    public static func check(busName: String) throws(DBusError) {
        guard dbus_validate_bus_name(busName, nil) != 0 else { throw .invalidArgs("invalid bus name '\(busName)'") }
    }

    /// `dbus_validate_error_name`.
    public static func isValidErrorName(_ name: String) -> Bool {
        dbus_validate_error_name(name, nil) != 0
    }
}
