import DBus
import Dispatch

/// One committed change, as the daemon's `Changed` signal announces it on its root object
/// (before the change's `PropertiesChanged`). It carries no values.
public struct Change: Hashable, Sendable {
    /// The change's id; history rows of the change carry the same id.
    public var id: UInt64
    /// The change that caused this one (a binding's propagation, a command's state flip, a
    /// revert, an override's end), or 0.
    public var parent: UInt64
    /// Whom it was made for: the caller, or the caller of the change it follows; 4294967295
    /// for the daemon's own work (a reload, a model file, a TTL's end).
    public var uid: UInt32
    /// What made it, as history's `via` says it: `Set`, `Apply`, `Revert`, `binding from KEY`,
    /// `command state`, `reload`, …
    public var cause: String
    /// The keys it changed.
    public var keys: [String]
    /// The unique bus name of the connection whose call made it, when the daemon says
    /// (`""` otherwise).
    public var sender: String
    /// Whether this client's own connection made it: a write of one's own, or what it caused.
    public var isOwn: Bool

    /// Decodes `Changed(t change, t parent, u uid, s cause, as keys[, s sender])`.
    init?(_ message: Message, ownName: String) {
        guard let arguments = try? message.arguments(), arguments.count >= 5,
              case .uint64(let id) = arguments[0], case .uint64(let parent) = arguments[1],
              case .uint32(let uid) = arguments[2], let cause = arguments[3].stringValue,
              case .array(_, let keys) = arguments[4] else { return nil }
        self.id = id
        self.parent = parent
        self.uid = uid
        self.cause = cause
        self.keys = keys.compactMap(\.stringValue)
        sender = arguments.dropFirst(5).first?.stringValue ?? ""
        isOwn = !sender.isEmpty && sender == ownName
    }
}

extension PropBusClient {
    /// Every change the daemon commits from the moment the stream is subscribed, as its
    /// `Changed` signal announces it; ``Change/isOwn`` tells this client's writes from others'.
    /// Ends when the client closes.
    public var changes: AsyncStream<Change> {
        let (stream, continuation) = AsyncStream<Change>.makeStream(bufferingPolicy: .bufferingNewest(Property<Bool>.bufferLimit))
        Task { [self] in
            await addMatchOnce(MatchRule(sender: DaemonNames.busName, path: DaemonNames.rootPath, member: "Changed"))
            queue.async { [self] in
                let token = addChangeObserver { [uniqueName] message in
                    if let change = Change(message, ownName: uniqueName) { continuation.yield(change) }
                }
                onClose { continuation.finish() }
                continuation.onTermination = { _ in self.queue.async { self.changeObservers[token] = nil } }
            }
        }
        return stream
    }

    private func addChangeObserver(_ observer: @escaping (Message) -> Void) -> Int {
        dispatchPrecondition(condition: .onQueue(queue))
        let token = (changeObservers.keys.max() ?? 0) + 1
        changeObservers[token] = observer
        return token
    }
}
