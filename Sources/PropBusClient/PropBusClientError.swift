import DBusValues

/// An error from the daemon or the bus, carrying the D-Bus error name.
///
/// The daemon's own errors are `org.propbus.PropBus1.Error.*` (``Name``); the bus's and the
/// standard ones are `org.freedesktop.DBus.Error.*`. Compare ``name`` with the constants, or use
/// the `is…` shorthands.
public struct PropBusClientError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The D-Bus error name, e.g. `org.propbus.PropBus1.Error.Conflict`.
    public var name: String
    /// The daemon's message: it names the key and what was expected.
    public var message: String

    /// An error with this name and message.
    public init(name: String, message: String) {
        self.name = name
        self.message = message
    }

    init(_ error: DBusError) {
        self.init(name: error.name, message: error.message)
    }

    /// `name: message`.
    public var description: String { "\(name): \(message)" }

    /// The error names a client meets most often.
    public enum Name {
        /// A `CompareAndSet` whose revision moved.
        public static let conflict = "org.propbus.PropBus1.Error.Conflict"
        /// A value of another type than the key's.
        public static let typeMismatch = "org.propbus.PropBus1.Error.TypeMismatch"
        /// A value outside the key's range or choices.
        public static let outOfRange = "org.propbus.PropBus1.Error.OutOfRange"
        /// A key that does not exist.
        public static let unknownKey = "org.propbus.PropBus1.Error.UnknownKey"
        /// A write of a read-only key through the daemon's own methods (`Reset`, `CompareAndSet`).
        public static let readOnly = "org.propbus.PropBus1.Error.ReadOnly"
        /// A `set` of a read-only key: `Properties.Set` answers the standard error.
        public static let propertyReadOnly = "org.freedesktop.DBus.Error.PropertyReadOnly"
        /// A write of a key a mandatory layer file locks; the message names the file.
        public static let locked = "org.propbus.PropBus1.Error.Locked"
        /// A caller who may not do this (writers, secret keys); the message names the key.
        public static let accessDenied = "org.freedesktop.DBus.Error.AccessDenied"
        /// A command executed while it is not enabled.
        public static let notEnabled = "org.propbus.PropBus1.Error.NotEnabled"
        /// A command whose program or handler failed.
        public static let executionFailed = "org.propbus.PropBus1.Error.ExecutionFailed"
        /// An execution that was cancelled.
        public static let cancelled = "org.propbus.PropBus1.Error.Cancelled"
        /// The daemon is not on the bus (`org.freedesktop.DBus.Error.ServiceUnknown`).
        public static let serviceUnknown = DBusError.Name.serviceUnknown
        /// The connection to the bus is gone.
        public static let disconnected = DBusError.Name.disconnected
    }

    /// Whether this is a `CompareAndSet` conflict.
    public var isConflict: Bool { name == Name.conflict }

    /// A reply the client could not decode as the type it was asked for.
    static func decoding(_ what: String, expected: DBusType, actual: DBusValue) -> PropBusClientError {
        PropBusClientError(name: Name.typeMismatch,
                           message: "\(what): expected a value of type '\(expected.signature)', the daemon sent '\(actual.signature)'")
    }
}
