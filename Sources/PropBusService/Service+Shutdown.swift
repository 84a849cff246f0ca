import DBus
import Dispatch

/// The service's part of the daemon's shutdown (the order docs/install.md gives: stop accepting
/// calls, end executions, commit, release the name); the daemon calls these in order, on
/// the connection's queue, between dispatch rounds.
extension Service {
    /// The answer to calls that arrive once the daemon is stopping. `NoServer`, which clients
    /// (propctl: exit 69) treat as "service unavailable": the name will have a new owner once
    /// systemd or D-Bus activation starts the daemon again.
    public static let shuttingDownError = DBusError(
        name: DBusError.Name.noServer,
        message: "propbusd is shutting down; \(busName) is unavailable until it is started again")

    /// The number of properties served, for the daemon's status line.
    public var propertyCount: Int { model.count }

    /// Stops accepting calls: every method call from now on is answered with
    /// ``shuttingDownError`` without being handled, so nothing changes after the final commit.
    public func stopAcceptingCalls() {
        dispatchPrecondition(condition: .onQueue(tree.connection.queue))
        tree.refuseCalls(with: Self.shuttingDownError)
    }

    /// Makes durable what changed outside a dispatch round (every round commits at its end), e.g.
    /// the outcome of executions ended by the shutdown. On failure the uncommitted changes are
    /// rolled back and the error says why.
    public func commitBeforeExit() throws(DBusError) {
        dispatchPrecondition(condition: .onQueue(tree.connection.queue))
        if let error = commit() { throw error }
    }
}
