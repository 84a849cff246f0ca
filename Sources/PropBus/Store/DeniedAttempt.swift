/// A refused attempt (`--history-denied`): who tried what, when, and what it was told. Never
/// the value it tried to write: a refused secret must not end up on disk.
public struct DeniedAttempt: Sendable {
    /// When it was refused, in nanoseconds since the epoch.
    public var time: Int64
    /// The key it named (empty when the call named none, e.g. a path).
    public var key: String
    /// The method it called (`Set`, `Apply`, …), in ``WriteSet/Caller/via``, with who called.
    public var caller: WriteSet.Caller
    /// The error it got (`org.freedesktop.DBus.Error.AccessDenied`, …).
    public var error: String

    public init(time: Int64, key: String, caller: WriteSet.Caller, error: String) {
        self.time = time
        self.key = key
        self.caller = caller
        self.error = error
    }
}
