/// The method calls a connection has received and not handled yet, served fairly, and the
/// signals that arrived behind them.
///
/// Calls are not handled as libdbus delivers them, in arrival order, all in one round: a client
/// pipelining thousands of calls would then hold every other client's reply until all of its
/// own were done (and the replies of the whole round in memory). Instead calls wait in one
/// queue per sender, and each round serves the senders in turn, one call each, until the
/// round's budget is spent. A sender's own calls stay in order. A signal that arrives after
/// calls still waiting is delivered once those were handled, so it never overtakes what was
/// sent before it (a client leaving the bus).
///
/// Owned by its ``Connection``, confined to the connection's queue.
struct HeldCalls {
    /// The most calls held in memory: beyond it, messages stay in libdbus (which stops reading
    /// the socket, so the bus holds the rest).
    static let maximum = 20_000
    /// Calls waiting, per sender, in arrival order.
    private var queues: [String: [(sequence: UInt64, message: Message)]] = [:]
    /// Senders with waiting calls, in the order they are served.
    private var ring: [String] = []
    /// Calls waiting in all.
    private(set) var count = 0
    /// The one waiting call while no other waits, outside the per-sender queues: a synchronous
    /// client's every call is one, and the queues (its sender's name made, hashed in and out)
    /// only matter once calls of several senders wait together. Moved into them when a second
    /// call arrives, so fairness and order are those of the queues.
    private var sole: (sequence: UInt64, message: Message)?
    /// Signals that arrived after calls still waiting.
    private var signals: [(sequence: UInt64, message: Message)] = []
    private var nextSequence: UInt64 = 0
    /// An emptied sender queue, kept for the next new sender: with one synchronous client every
    /// call empties its sender's queue, and a fresh one would be an allocation per call.
    private var spare: [(sequence: UInt64, message: Message)] = []
    private static let keptQueueCapacity = 16

    /// Whether signals wait behind calls.
    var holdsSignals: Bool { !signals.isEmpty }

    /// Holds a received call.
    mutating func hold(_ message: Message) {
        nextSequence += 1
        count += 1
        guard count > 1 else {
            sole = (nextSequence, message)
            return
        }
        if let waiting = sole {
            sole = nil
            enqueue(waiting)
        }
        enqueue((nextSequence, message))
    }

    private mutating func enqueue(_ call: (sequence: UInt64, message: Message)) {
        let sender = call.message.sender ?? ""
        // One lookup for a sender that has calls waiting: its queue is appended to in place.
        guard queues[sender]?.append(call) == nil else { return }
        var queue = takeSpare()
        queue.append(call)
        queues[sender] = queue
        ring.append(sender)
    }

    private mutating func takeSpare() -> [(sequence: UInt64, message: Message)] {
        var queue: [(sequence: UInt64, message: Message)] = []
        swap(&queue, &spare)
        return queue
    }

    /// The next call, taking the senders in turn.
    mutating func nextCall() -> Message? {
        if let waiting = sole {
            sole = nil
            count -= 1
            return waiting.message
        }
        guard !ring.isEmpty else { return nil }
        let sender = ring.removeFirst()
        var calls = queues.removeValue(forKey: sender)!
        let next = calls.removeFirst()
        count -= 1
        if !calls.isEmpty {
            queues[sender] = calls
            ring.append(sender)
        } else if calls.capacity <= Self.keptQueueCapacity {
            spare = calls
        }
        return next.message
    }

    /// Holds `message`, a signal, when calls wait before it; `false`: deliver it now.
    mutating func holdSignal(_ message: Message) -> Bool {
        guard count > 0 else { return false }
        nextSequence += 1
        signals.append((nextSequence, message))
        return true
    }

    /// The held signals that no waiting call precedes, taken out in order.
    mutating func deliverableSignals() -> [Message] {
        guard !signals.isEmpty else { return [] }
        let oldestCall = sole?.sequence ?? queues.values.compactMap { $0.first?.sequence }.min() ?? UInt64.max
        var ready: [Message] = []
        while let first = signals.first, first.sequence < oldestCall {
            signals.removeFirst()
            ready.append(first.message)
        }
        return ready
    }
}
