/// The caller whose call made a signal go out: charged for it as for a reply, since a bus
/// holds a signal against its sender until every receiver has read it.
public struct SignalCause: Hashable, Sendable {
    /// The caller's unique name.
    public var sender: String
    /// Its uid, when the tree looked its credentials up to decide by them.
    public var userID: UInt32?

    public init(sender: String, userID: UInt32?) {
        self.sender = sender
        self.userID = userID
    }
}

/// What a tree's signals may carry, and who pays for them: the largest value a change signal
/// carries, and which calls caused the signals of a round (the call being handled when a change
/// was noted: its handler's writes, and what they set going at once, bindings included; or the
/// cause a signal queued later, outside any call, was given). A signal several calls
/// caused is shared between them.
///
/// Owned by its ``ObjectTree``, confined like it to the connection's queue.
public final class SignalCharges {
    /// The largest value a change signal carries (marshalled, in bytes): a larger one is
    /// announced by invalidation (its name in `PropertiesChanged`'s `invalidated_properties`,
    /// left out of `InterfacesAdded`), as `EmitsChangedSignal=invalidates` does, and readers
    /// `Get` it, a reply charged to them. A signal goes to every subscriber, read or not. No
    /// bound by default; the service sets one.
    public var maximumValueSize = Int.max
    /// Told of the bytes of each signal a call caused (`size` computes them), as the round's
    /// signals go out, so the service charges them as replies. Runs on the queue.
    public var charge: ((_ causes: Set<SignalCause>, _ size: () -> Int) -> Void)?
    /// The call being handled now, if any.
    private(set) var current: SignalCause?
    /// The causes of each pending `PropertiesChanged`, by object and interface.
    private var causes: [ObjectTree.ChangeKey: Set<SignalCause>] = [:]

    /// Runs `body` (a call's handler) with `cause` as the cause of what it notes.
    func handling<T>(_ cause: SignalCause?, _ body: () throws(DBusError) -> T) throws(DBusError) -> T {
        current = cause
        defer { current = nil }
        return try body()
    }

    /// A change of `key` was noted: the current call caused it.
    func noted(_ key: ObjectTree.ChangeKey) {
        guard let current else { return }
        causes[key, default: []].insert(current)
    }

    /// The causes of `key`'s signal, forgotten as it is sent.
    func take(_ key: ObjectTree.ChangeKey) -> Set<SignalCause> {
        causes.removeValue(forKey: key) ?? []
    }

    /// The round's signals were dropped (a failed commit).
    func reset() {
        causes.removeAll()
    }

    /// Charges a signal of `size` bytes to its `causes` (none: the service's own), and counts
    /// it in what `backlog`'s bus may hold.
    func charge(_ causes: Set<SignalCause>, counting backlog: BusBacklog, size: () -> Int) {
        guard !causes.isEmpty || backlog.limit != nil else { return }
        let bytes = size()
        backlog.sent(bytes)
        if !causes.isEmpty { charge?(causes) { bytes } }
    }
}
