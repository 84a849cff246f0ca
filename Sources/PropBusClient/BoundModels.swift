/// The model sides of a client's live two-way bindings, so that a command executed in the
/// same main-actor turn as a model write sends that write first (Observation reports a write
/// before it lands; the binding sends it on the next turn).
@MainActor
final class BoundModels {
    /// How many bindings are live, readable from any thread: no hop to the main actor when none.
    nonisolated let count = Locked(0)
    private var senders: [ObjectIdentifier: () -> Void] = [:]

    nonisolated init() {}

    func add(_ owner: AnyObject, sendUnsentWrite: @escaping () -> Void) {
        senders[ObjectIdentifier(owner)] = sendUnsentWrite
        count.withLock { $0 = senders.count }
    }

    func remove(_ owner: AnyObject) {
        senders[ObjectIdentifier(owner)] = nil
        count.withLock { $0 = senders.count }
    }

    /// Sends every model write not sent yet.
    func sendUnsentWrites() {
        for send in senders.values { send() }
    }
}

/// The bound model writes a client sent and the daemon has not answered yet, and who waits for
/// none to be left (``PropBusClient/commitBoundWrites()``). Confined to the client's queue.
final class BoundWrites {
    private var pending = 0
    private var waiters: [CheckedContinuation<Void, Never>] = []

    /// A bound write was sent.
    func sent() {
        pending += 1
    }

    /// A bound write was answered.
    func answered() {
        pending -= 1
        guard pending == 0 else { return }
        let waiting = waiters
        waiters = []
        for waiter in waiting { waiter.resume() }
    }

    /// Resumes `continuation` once no bound write is on its way (at once if none is).
    func whenNoneLeft(_ continuation: CheckedContinuation<Void, Never>) {
        if pending == 0 { continuation.resume() } else { waiters.append(continuation) }
    }
}
