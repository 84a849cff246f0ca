/// An error of the propbus model, mapping one to one onto a D-Bus error name.
///
/// Every message names the key and says what was expected.
public struct PropBusError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The error's identity.
    public var code: Code
    /// A human-readable message that names the key.
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// The D-Bus error name for this error.
    public var name: String { code.dbusName }

    public var description: String { "\(name): \(message)" }

    /// The error codes of the API (docs/dbus-api.md, "Errors"), plus the standard D-Bus names propbus uses.
    public enum Code: String, Sendable, CaseIterable {
        case invalidKey = "InvalidKey"
        case unknownKey = "UnknownKey"
        case typeMismatch = "TypeMismatch"
        case readOnly = "ReadOnly"
        case outOfRange = "OutOfRange"
        case invalidValue = "InvalidValue"
        case conflict = "Conflict"
        case transformFailed = "TransformFailed"
        case invalidExpression = "InvalidExpression"
        case notEnabled = "NotEnabled"
        case executionFailed = "ExecutionFailed"
        case timedOut = "TimedOut"
        case cancelled = "Cancelled"
        case handlerVanished = "HandlerVanished"
        /// An exec command's stdout is not text (UTF-8 without NUL bytes).
        case invalidOutput = "InvalidOutput"
        case limitsExceeded = "LimitsExceeded"
        case exists = "Exists"
        case storeFailed = "StoreFailed"
        /// A fleet key cannot be written: etcd cannot be reached.
        case unavailable = "Unavailable"
        /// A mandatory layer file locks the key for this caller; the message names
        /// the key and the file.
        case locked = "Locked"
        // Standard names, used where the D-Bus specification has one.
        case invalidArgs = "org.freedesktop.DBus.Error.InvalidArgs"
        case unknownProperty = "org.freedesktop.DBus.Error.UnknownProperty"
        case accessDenied = "org.freedesktop.DBus.Error.AccessDenied"

        /// The full D-Bus error name.
        public var dbusName: String {
            rawValue.contains(".") ? rawValue : PropBusAPI.errorPrefix + rawValue
        }
    }
}

extension PropBusError {
    static func invalidArgs(_ message: String) -> PropBusError { .init(.invalidArgs, message) }
    static func unknownKey(_ key: String) -> PropBusError { .init(.unknownKey, "no property named \(key)") }
}
