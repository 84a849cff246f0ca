import DBus
import PropBus

extension Service {
    /// Throws `AccessDenied` naming `key` unless the caller of `call` may write it (SPEC §7).
    ///
    /// `writers` is the `writers` option of the property or command, if it has one.
    func authorizeWrite(_ key: String, writers: [String]?, by call: MethodCall) throws(DBusError) {
        // Placeholder until access control lands (issue 6): everything is allowed.
    }
}
