/// A D-Bus error: a name such as `org.freedesktop.DBus.Error.InvalidArgs` and a message.
///
/// libdbus's C `DBusError` is turned into this at the boundary; nothing further in sees the C
/// struct.
public struct DBusError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The error name, e.g. `org.freedesktop.DBus.Error.UnknownMethod`.
    public var name: String
    /// A human-readable message.
    public var message: String

    public init(name: String, message: String) {
        self.name = name
        self.message = message
    }

    public var description: String { "\(name): \(message)" }
}

extension DBusError {
    /// Standard error names from the D-Bus specification.
    public enum Name {
        public static let failed = "org.freedesktop.DBus.Error.Failed"
        public static let noMemory = "org.freedesktop.DBus.Error.NoMemory"
        public static let serviceUnknown = "org.freedesktop.DBus.Error.ServiceUnknown"
        public static let nameHasNoOwner = "org.freedesktop.DBus.Error.NameHasNoOwner"
        public static let noReply = "org.freedesktop.DBus.Error.NoReply"
        public static let fileNotFound = "org.freedesktop.DBus.Error.FileNotFound"
        public static let noServer = "org.freedesktop.DBus.Error.NoServer"
        public static let disconnected = "org.freedesktop.DBus.Error.Disconnected"
        public static let timeout = "org.freedesktop.DBus.Error.Timeout"
        public static let invalidArgs = "org.freedesktop.DBus.Error.InvalidArgs"
        public static let invalidSignature = "org.freedesktop.DBus.Error.InvalidSignature"
        public static let unknownMethod = "org.freedesktop.DBus.Error.UnknownMethod"
        public static let unknownObject = "org.freedesktop.DBus.Error.UnknownObject"
        public static let unknownInterface = "org.freedesktop.DBus.Error.UnknownInterface"
        public static let unknownProperty = "org.freedesktop.DBus.Error.UnknownProperty"
        public static let propertyReadOnly = "org.freedesktop.DBus.Error.PropertyReadOnly"
        public static let accessDenied = "org.freedesktop.DBus.Error.AccessDenied"
        public static let notSupported = "org.freedesktop.DBus.Error.NotSupported"
        public static let limitsExceeded = "org.freedesktop.DBus.Error.LimitsExceeded"
    }

    public static func invalidArgs(_ message: String) -> DBusError { .init(name: Name.invalidArgs, message: message) }
    public static func unknownMethod(_ message: String) -> DBusError { .init(name: Name.unknownMethod, message: message) }
    public static func unknownObject(_ message: String) -> DBusError { .init(name: Name.unknownObject, message: message) }
    public static func unknownInterface(_ message: String) -> DBusError { .init(name: Name.unknownInterface, message: message) }
    public static func unknownProperty(_ message: String) -> DBusError { .init(name: Name.unknownProperty, message: message) }
    public static func propertyReadOnly(_ message: String) -> DBusError { .init(name: Name.propertyReadOnly, message: message) }
    public static func failed(_ message: String) -> DBusError { .init(name: Name.failed, message: message) }
}
