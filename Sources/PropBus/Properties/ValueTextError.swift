/// Text that is not a valid value of the expected D-Bus type.
///
/// The message says what was expected and what was found, e.g.
/// "expected a boolean (true/false) for type 'b', got 'maybe'".
public struct ValueTextError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What was expected, what was found, and where inside a container.
    public var message: String
    /// What was expected and where, without any part of the text refused: for problems others
    /// may read (a model file's, listed to anyone by `SkippedModelFiles`), where the text may be a
    /// secret the author meant to declare.
    public var withoutValue: String

    /// Creates an error with `message`; `withoutValue` when the message quotes the text.
    public init(_ message: String, withoutValue: String? = nil) {
        self.message = message
        self.withoutValue = withoutValue ?? message
    }

    /// The message.
    public var description: String { message }
}
