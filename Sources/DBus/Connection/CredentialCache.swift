import Dispatch

/// The credentials of the connections that call us: looked up once per unique name with
/// `org.freedesktop.DBus.GetConnectionCredentials`, asynchronously, and forgotten when the name
/// leaves the bus.
///
/// Work waiting for a name whose lookup is in flight is held, in order, and run in that order
/// when the bus answers; other names are not held up. Unique names are never reused, so a
/// cached answer stays true for as long as the name exists.
///
/// Confined to the connection's queue. Forgetting needs `NameOwnerChanged`: the owner must have
/// subscribed to ``nameOwnerChangedRule`` on the bus (`AddMatch`).
final class CredentialCache {
    /// The bus's `NameOwnerChanged`, which tells when a name (and its credentials) goes away.
    static let nameOwnerChangedRule = MatchRule.nameOwnerChanged()

    // Unowned is safe here: the connection outlives the cache (the tree that owns the cache holds
    // the connection strongly). The reverse is not true, see `signalHandlerID`.
    private unowned let connection: Connection
    /// The NameOwnerChanged handler this cache put on the connection; removed in `deinit`, so a
    /// cache dropped while its connection lives (`requiresCredentials` turned off) leaves nothing
    /// behind that could call into freed memory.
    private var signalHandlerID: Int?
    private var known: [String: Credentials] = [:]
    private var lookups: [String: Lookup] = [:]

    private struct Lookup {
        var waiting: [(Result<Credentials, DBusError>) -> Void]
        /// The name left the bus while the lookup was in flight: answer the waiters, keep nothing.
        var departed = false
    }

    init(connection: Connection) {
        dispatchPrecondition(condition: .onQueue(connection.queue))
        self.connection = connection
        // Weak as well as removed in deinit: the connection holds the handler, not the cache.
        signalHandlerID = connection.addSignalHandler(matching: Self.nameOwnerChangedRule) { [weak self] message in
            guard let self, let args = try? message.arguments(), args.count == 3, let name = args[0].stringValue,
                  name.hasPrefix(":"), args[2].stringValue == "" else { return }
            known[name] = nil
            lookups[name]?.departed = true
        }
    }

    deinit {
        guard let signalHandlerID else { return }
        // The handler list is the connection's queue's: remove there (the owner may drop the
        // cache from elsewhere, e.g. a tree released by a client's task).
        let connection = connection
        connection.onQueueOrAsync { connection.removeSignalHandler(signalHandlerID) }
    }

    /// The credentials of `name` when they are known already (no closure, no wait: a call's
    /// hot path).
    func cached(_ name: String) -> Credentials? { known[name] }

    /// How many names are cached; for tests and diagnostics.
    var count: Int { known.count }

    /// Runs `body` with the credentials of `name`: at once when they are known, else when the
    /// bus answers, after any work already waiting for the same name.
    func withCredentials(of name: String, _ body: @escaping (Result<Credentials, DBusError>) -> Void) {
        dispatchPrecondition(condition: .onQueue(connection.queue))
        if let credentials = known[name] {
            body(.success(credentials))
            return
        }
        if lookups[name] != nil {
            lookups[name]!.waiting.append(body)
            return
        }
        lookups[name] = Lookup(waiting: [body])
        let message: Message
        do {
            message = try Message.methodCall(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                             interface: "org.freedesktop.DBus", member: "GetConnectionCredentials")
            try message.append(.string(name))
        } catch {
            finish(name, .failure(error))
            return
        }
        connection.call(message) { [weak self] result in
            self?.finish(name, result.flatMap { reply in
                Result { () throws(DBusError) in
                    guard let entries = try reply.arguments().first?.stringKeyedEntries else {
                        throw DBusError.failed("GetConnectionCredentials returned no a{sv}")
                    }
                    return try Credentials(reply: entries)
                }
            })
        }
    }

    private func finish(_ name: String, _ result: Result<Credentials, DBusError>) {
        guard let lookup = lookups.removeValue(forKey: name) else { return }
        if case .success(let credentials) = result, !lookup.departed { known[name] = credentials }
        for body in lookup.waiting { body(result) }
        // The answer may arrive outside a dispatch round (a timeout); the work it released
        // queued replies and signals that a round end must send.
        connection.scheduleRound()
    }
}
