/// What a message would weigh on the wire: its size, headers included, and its largest array.
///
/// A message can be refused for either: the bus's message limit, or the protocol's limit on
/// one array (64 MiB), which holds whatever the message limit is.
public struct MessageSize: Sendable, Equatable {
    /// The whole message, in bytes.
    public var bytes: Int
    /// The largest array in it, in bytes.
    public var largestArray: Int

    public init(bytes: Int, largestArray: Int) {
        self.bytes = bytes
        self.largestArray = largestArray
    }

    /// Whether an array passes the protocol's limit.
    public var arrayTooLarge: Bool { largestArray > ObjectTree.protocolArrayLimit }

    /// What is too large, in words ("would be N bytes, more than the L-byte message limit"),
    /// or `nil` when a message of this size may be sent under `limit`. Always real sizes.
    public func excess(over limit: Int) -> String? {
        if bytes > limit { return "would be \(bytes) bytes, more than the \(limit)-byte message limit" }
        if arrayTooLarge {
            return "would hold an array of \(largestArray) bytes, more than the \(ObjectTree.protocolArrayLimit) bytes D-Bus allows in one array"
        }
        return nil
    }
}
