import DBus
import PropBus

/// What the service asks of a component that holds some of its keys somewhere else too (the
/// fleet, `--fleet`, shares the fleet keys with other hosts): every write call's model work
/// goes through the gate, which keeps it in the round when it writes none of the gate's keys,
/// or holds the call and replies later, once the keys' owner accepted it.
///
/// The service knows no more of the gate than this protocol: which keys are the gate's, what
/// it sends where and when it answers are the gate's own. Without one (``Service/gate`` `nil`)
/// every write is the service's alone. Called on the service's queue only, like the service.
public protocol WriteGate: AnyObject {
    /// Runs `body`, a write call's model work, for `call`: kept in the round as without a gate
    /// if it wrote none of the gate's keys, else taken back out of the round and answered later
    /// (`.deferred`), once the keys' owner accepted it and its result is in the model.
    /// - Parameters:
    ///   - compareAndSet: the call fails with `Conflict` instead of being tried again when
    ///     another writer came first.
    ///   - rerunAfterCommit: the work runs again once accepted (what it makes must be this
    ///     host's, such as the binding `Bind` made), and that run's reply counts.
    ///   - reply: the call's reply, evaluated once its writes are in the model; a
    ///     ``WriteRun`` with its own reply overrides it.
    func route(_ call: MethodCall, compareAndSet: Bool, rerunAfterCommit: Bool, reply: @escaping () -> [DBusValue],
               _ body: @escaping () throws(PropBusError) -> WriteRun) throws(DBusError) -> MethodResult

    /// CreateProperty of one of the gate's keys with a `lifetime` (nanoseconds of TTL, or `nil`:
    /// its creator's connection): the gate takes the lease first, then runs `create` (the call's
    /// write, through ``route(_:compareAndSet:rerunAfterCommit:reply:_:)``), whose reply calls
    /// `confirm` once the key exists. Answers later.
    func createLeasedKey(_ call: MethodCall, key: String, lifetime: UInt64?, holder: LeaseHolder,
                         _ create: @escaping (_ confirm: @escaping () -> Void) throws(DBusError) -> MethodResult) throws(DBusError) -> MethodResult

    /// Ends what connection `name`, which left the bus, held through the gate (the leases of
    /// the gate's keys it created with a connection lifetime).
    func endLeasedKeys(heldBy name: String)

    /// The revision the gate's keys' owner holds for `definition`'s key, shown in listings;
    /// `nil`: none, or not one of the gate's keys. Reads the gate's own
    /// tables only: listings call it while they walk the model.
    func listedRevision(of definition: PropertyDefinition) -> Int64?

    /// The lease of `definition`'s key, if it is one of the gate's keys with a lifetime
    /// (`lifetime` in listings); like ``listedRevision(of:)``, without touching the model.
    func listedLifetime(of definition: PropertyDefinition) -> Lease?

    /// Model files were applied anew (a reload), before that round's commit: the changes the
    /// gate makes to keep its keys as it needs them (bindings it no longer allows end).
    func modelFilesApplied() -> [PropertyChange]

    /// That round committed: keys the files declared anew may be offered to the keys' owner.
    func modelFilesCommitted()
}

/// Members a component adds to the Manager interface beside the service's own, with the
/// service or without the component running (the fleet's `ListFleetHosts`, `FleetState` …
/// answer also without `--fleet`): asked each time the Manager's description is built.
public protocol ManagerExtension: AnyObject {
    /// Methods added to the Manager's own.
    func managerMethods() -> [MethodDescription]
    /// Properties listed before the Manager's own.
    func managerProperties() -> [PropertyDescription]
}
