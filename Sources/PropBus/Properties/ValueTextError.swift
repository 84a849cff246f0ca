/// Text that is not a valid value of the expected D-Bus type.
///
/// The message says what was expected and what was found, e.g.
/// "expected a boolean (true/false) for type 'b', got 'maybe'".
public struct ValueTextError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What was expected, what was found, and where inside a container.
    public var message: String

    /// Creates an error with `message`.
    public init(_ message: String) {
        self.message = message
    }

    /// The message.
    public var description: String { message }
}
