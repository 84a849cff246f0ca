import DBus
import PropBus

extension PropBusError {
    /// The same error as a D-Bus error reply.
    public var dbusError: DBusError { DBusError(name: name, message: message) }
}

/// Runs a model operation, turning its error into the D-Bus error of the same name.
package func bridged<T>(_ body: () throws(PropBusError) -> T) throws(DBusError) -> T {
    do { return try body() } catch { throw error.dbusError }
}
