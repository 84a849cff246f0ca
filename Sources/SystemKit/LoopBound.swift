import Dispatch

/// A value that may travel across threads but is only ever used on one serial queue
/// (swift-nio's `NIOLoopBound`, for Dispatch): it is `Sendable` so a closure can carry it to
/// that queue, and every access checks that it runs there (`dispatchPrecondition`), so a
/// confinement mistake stops the program at the access rather than racing silently.
///
/// The one audited `@unchecked Sendable` box for "made on the queue, used on the queue".
public struct LoopBound<Value>: @unchecked Sendable {
    private let stored: Value
    /// The queue the value belongs to.
    public let queue: DispatchQueue

    /// Binds `value` to `queue`; must be called on that queue.
    public init(_ value: Value, on queue: DispatchQueue) {
        dispatchPrecondition(condition: .onQueue(queue))
        self.stored = value
        self.queue = queue
    }

    /// The value; only on ``queue``.
    public var value: Value {
        dispatchPrecondition(condition: .onQueue(queue))
        return stored
    }
}
