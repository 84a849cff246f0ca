import Dispatch

/// What the bus holds of this connection's messages that their receivers have not read yet,
/// and the bound kept on it.
///
/// dbus-daemon charges each message to its sender until every receiver has read it, and past
/// the sender's `max_incoming_bytes` (127 MiB on a stock system or session bus) stops reading
/// from the sender: a client that asks for large replies and never reads them would stop the
/// service for everyone, through as many connections as it likes. A service cannot see what a
/// receiver read, but the bus tells it what it holds of the service's messages:
/// `org.freedesktop.DBus.Debug.Stats.GetConnectionStats(own name)`'s `IncomingBytes`. The
/// estimate is the last answer plus every byte sent since it was asked (all of them counted
/// as unread), and a large message (``largeMessage`` and more) is refused while the estimate
/// with it would pass ``limit``: small ones still go, in the room between the limit and the
/// bus's own. The bus is asked again once a quarter of the limit was sent since, and every
/// 100 ms while the estimate is above half of it, so the room comes back as readers read.
///
/// A bus that refuses the Stats interface (the system bus allows it to root only unless a
/// policy file allows the service's user) gives no bound: then only the per-caller quotas hold.
/// dbus-broker accounts per receiving peer and never stops reading from a sender for it.
///
/// Owned by its ``Connection``. `@unchecked Sendable` as the connection is: every field is
/// touched on the connection's queue only (``ask()`` checks it), including by the timer that
/// asks again.
public final class BusBacklog: @unchecked Sendable {
    /// The most bytes of this connection's messages the bus should hold; `nil`: no bound. Set
    /// on the connection's queue.
    public var limit: Int?
    /// Messages smaller than this are never refused.
    static let largeMessage = 64 << 10
    private unowned let connection: Connection
    /// `IncomingBytes` at the last answer.
    private var held = 0
    /// Bytes sent since the question of the last answer was asked.
    private var sentSince = 0
    /// Bytes sent in all (what a question remembers, to count what was sent after it).
    private var sentTotal = 0
    private var asking = false
    private var repollScheduled = false
    /// Whether the bus answered a question yet (`nil`), refused it (`false`) or answers (`true`).
    private(set) var available: Bool?

    init(connection: Connection) {
        self.connection = connection
    }

    /// What the bus may hold of this connection's messages now, at most.
    public var estimate: Int { held + sentSince }

    /// Whether a message of `size` bytes may be sent now; asks the bus again when not.
    func admits(_ size: Int) -> Bool {
        guard let limit, available != false, size >= Self.largeMessage else { return true }
        guard estimate + size > limit else { return true }
        ask()
        return false
    }

    /// A message of `size` bytes went out.
    func sent(_ size: Int) {
        sentTotal += size
        sentSince += size
        guard let limit, available != false, sentSince >= limit / 4 || (available == nil && sentSince >= Self.largeMessage) else { return }
        ask()
    }

    /// Asks the bus what it holds of this connection's messages.
    private func ask() {
        dispatchPrecondition(condition: .onQueue(connection.queue))
        guard !asking, available != false, !connection.uniqueName.isEmpty,
              let message = try? Message.methodCall(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                                    interface: "org.freedesktop.DBus.Debug.Stats", member: "GetConnectionStats")
        else { return }
        do { try message.append([.string(connection.uniqueName)]) } catch { return }
        asking = true
        let mark = sentTotal
        connection.call(message, timeoutMilliseconds: 5000) { [weak self] result in
            guard let self else { return }
            asking = false
            guard case .success(let reply) = result, let fields = (try? reply.arguments())?.first?.stringKeyedEntries,
                  case .uint32(let incoming)? = fields["IncomingBytes"]?.unwrappingVariant else {
                available = false
                return
            }
            available = true
            held = Int(incoming)
            sentSince = sentTotal - mark
            if let limit, estimate > limit / 2 { askAgainSoon() }
        }
    }

    /// Asks again in 100 ms: while much is held, the room comes back only as readers read.
    private func askAgainSoon() {
        guard !repollScheduled else { return }
        repollScheduled = true
        connection.queue.asyncAfter(deadline: .now() + .milliseconds(100)) { [weak self] in
            guard let self else { return }
            repollScheduled = false
            ask()
        }
    }
}
