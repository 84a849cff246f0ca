import DBus

/// The daemon's command signals (`Started`, `Finished`, `Failed`) as the client routes them: to
/// the `execute` waiting for an execution's outcome, and to every observer of a command.
///
/// Confined to the client's queue (the client calls it there and only there).
final class CommandSignals {
    /// What one signal said, still undecoded (each observer decodes its own output type).
    enum Event {
        case started(UInt64)
        case finished(UInt64, DBusValue)
        case failed(UInt64, PropBusClientError)

        var id: UInt64 {
            switch self {
            case .started(let id), .finished(let id, _), .failed(let id, _): id
            }
        }
    }

    /// Outcomes of executions nobody waits for yet, kept per command (the newest).
    static let earlyLimit = 256

    /// Per command object: the `execute` calls waiting, by execution id.
    private var waiting: [String: [UInt64: CheckedContinuation<Event, Never>]] = [:]
    /// Per command object: outcomes that came before their `execute` asked (oldest first).
    private var early: [String: [(UInt64, Event)]] = [:]
    /// Per command object: observers' handlers, by token.
    private var observers: [String: [Int: (Event) -> Void]] = [:]
    private var nextToken = 0
    /// Set once the client closed or lost the bus: every wait ends with it at once.
    private var ended: PropBusClientError?
    /// `Start` calls sent and not answered: a closing client waits for their ids to cancel them.
    var startsInFlight = 0

    /// Routes one signal of a command object.
    func received(_ message: Message) {
        guard let path = message.path, let arguments = try? message.arguments(), case .uint64(let id)? = arguments.first else { return }
        let event: Event
        switch (message.member, arguments.count) {
        case ("Started", 2): event = .started(id)
        case ("Finished", 2): event = .finished(id, arguments[1].unwrappingVariant)
        case ("Failed", 3):
            event = .failed(id, PropBusClientError(name: arguments[1].stringValue ?? DBusError.Name.failed,
                                                   message: arguments[2].stringValue ?? ""))
        default: return
        }
        for observer in observers[path]?.values ?? [:].values { observer(event) }
        if case .started = event { return }
        if let continuation = waiting[path]?.removeValue(forKey: id) {
            continuation.resume(returning: event)
        } else {
            var kept = early[path] ?? []
            kept.append((id, event))
            if kept.count > Self.earlyLimit { kept.removeFirst(kept.count - Self.earlyLimit) }
            early[path] = kept
        }
    }

    /// Resumes `continuation` with the outcome of execution `id` of `path` (at once if it came).
    func awaitOutcome(path: String, id: UInt64, _ continuation: CheckedContinuation<Event, Never>) {
        if let ended {
            continuation.resume(returning: .failed(id, ended))
        } else if var kept = early[path], let index = kept.firstIndex(where: { $0.0 == id }) {
            let event = kept.remove(at: index).1
            early[path] = kept
            continuation.resume(returning: event)
        } else {
            waiting[path, default: [:]][id] = continuation
        }
    }

    /// The executions some `execute` still waits for, to cancel when the client closes.
    var awaited: [(path: String, id: UInt64)] {
        waiting.flatMap { path, ids in ids.keys.map { (path, $0) } }
    }

    /// Ends every wait with `error` (the client closed or lost the bus).
    func failAll(_ error: PropBusClientError) {
        ended = ended ?? error
        let all = waiting
        waiting = [:]
        for (_, ids) in all {
            for (id, continuation) in ids { continuation.resume(returning: .failed(id, error)) }
        }
    }

    func addObserver(path: String, _ observer: @escaping (Event) -> Void) -> Int {
        nextToken += 1
        observers[path, default: [:]][nextToken] = observer
        return nextToken
    }

    func removeObserver(path: String, _ token: Int) {
        observers[path]?[token] = nil
    }
}
