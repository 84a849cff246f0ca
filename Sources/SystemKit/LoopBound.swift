import Dispatch

/// A value that may travel across threads but is only ever used on one serial queue
/// (swift-nio's `NIOLoopBound`, for Dispatch): it is `Sendable` so a closure can carry it to
/// that queue, and every access checks that it runs there (`dispatchPrecondition`), so a
/// confinement mistake stops the program at the access rather than racing silently.
///
/// The check is kept in release builds (NIOLoopBound keeps its precondition too): a box is
/// opened where work hops back to its queue (a timer, a reply, an answer from another thread),
/// never per message, so the check costs nothing on the hot paths.
///
/// The one audited `@unchecked Sendable` box for "made on the queue, used on the queue".
public struct LoopBound<Value>: @unchecked Sendable {
    // Safety: `stored` is read only through `value`, which checks the queue; it was made on
    // that queue (checked in `init`), so every use of it is on one serial queue.
    private let stored: Value
    /// The queue the value belongs to.
    public let queue: DispatchQueue

    /// Binds `value` to `queue`; must be called on that queue.
    public init(_ value: Value, on queue: DispatchQueue) {
        dispatchPrecondition(condition: .onQueue(queue))
        self.stored = value
        self.queue = queue
    }

    /// Binds `value`, made on another thread, to `queue`: the caller hands it over (`sending`:
    /// the compiler checks that the caller does not use it afterwards), and waits for the
    /// queue's turn to bind it there. Not on `queue` itself (it would wait for itself).
    public static func handOver(_ value: sending Value, to queue: DispatchQueue) -> LoopBound {
        queue.sync { LoopBound(value, on: queue) }
    }

    /// The value; only on ``queue``.
    public var value: Value {
        dispatchPrecondition(condition: .onQueue(queue))
        return stored
    }
}

/// A reference that does not keep its object alive, for ``LoopBound``: a timer or a callback
/// from another thread finds its owner on the owner's queue, or nothing once it is gone.
public struct WeakReference<Object: AnyObject> {
    public weak var object: Object?

    public init(_ object: Object) {
        self.object = object
    }
}

extension LoopBound {
    /// Binds a weak reference to `object` to `queue`; must be called on that queue.
    public init<Object>(weak object: Object, on queue: DispatchQueue) where Value == WeakReference<Object> {
        self.init(WeakReference(object), on: queue)
    }

    /// The object, if it still exists; only on ``queue``.
    public func object<Object>() -> Object? where Value == WeakReference<Object> {
        value.object
    }

    /// Runs `body` with the object on ``queue`` (after `deadline`, if given) if it still exists
    /// then; callable from any thread.
    public func async<Object>(after deadline: DispatchTime? = nil, _ body: @escaping @Sendable (Object) -> Void)
        where Value == WeakReference<Object> {
        let run: @Sendable () -> Void = {
            if let object = self.value.object { body(object) }
        }
        if let deadline { queue.asyncAfter(deadline: deadline, execute: run) } else { queue.async(execute: run) }
    }
}
