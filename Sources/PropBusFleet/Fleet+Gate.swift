import DBus
import PropBus
import PropBusService

/// The fleet as the service's ``WriteGate``: fleet keys' writes go to etcd first, their leases
/// are etcd's, and listings show the mirror's etcd revisions.
extension Fleet: WriteGate {
    public func route(_ call: MethodCall, compareAndSet: Bool, rerunAfterCommit: Bool, reply: @escaping () -> [DBusValue],
                      _ body: @escaping () throws(PropBusError) -> WriteRun) throws(DBusError) -> MethodResult {
        try write(call, compareAndSet: compareAndSet, rerunAfterCommit: rerunAfterCommit, reply: reply, body)
    }

    public func createLeasedKey(_ call: MethodCall, key: String, lifetime: UInt64?, holder: LeaseHolder,
                                _ create: @escaping (_ confirm: @escaping () -> Void) throws(DBusError) -> MethodResult) throws(DBusError) -> MethodResult {
        try createEphemeral(call, key: key, lifetime: lifetime, holder: holder, create)
    }

    public func endLeasedKeys(heldBy name: String) {
        endLifetimes(heldBy: name)
    }

    public func listedRevision(of definition: PropertyDefinition) -> Int64? {
        definition.scope == .fleet ? etcdRevision(of: definition.key) : nil
    }

    public func listedLifetime(of definition: PropertyDefinition) -> PropBus.Lease? {
        lifetime(of: definition)
    }

    public func modelFilesApplied() -> [PropertyChange] {
        endBindingsOfStateToFleetKeys()
    }

    public func modelFilesCommitted() {
        if state == .connected { pushLocalDefinitions() }
    }
}

/// The fleet's members of the Manager interface (`ListFleetHosts`, `SetFleetLayer`,
/// `RemoveFleetLayer`, `FleetState`, `FleetRevision`): the daemon gives them to its service
/// with or without `--fleet`, so that the interface is the same either way; without a fleet
/// they answer `off`, 0 and `Unavailable`.
///
/// The service's, on its queue: made before the service (the Manager's description is built
/// once), given the fleet when it starts (``attach(_:)``).
public final class FleetManagerMembers: ManagerExtension {
    /// Who may change the fleet's layers: the service's access policy.
    let access: AccessPolicy
    /// The running fleet; `nil` without `--fleet` (or before it starts).
    public private(set) var fleet: Fleet?

    /// Members that check callers with `access` (the service's ``Service/Options/access``).
    public init(access: AccessPolicy) {
        self.access = access
    }

    /// Makes `fleet` its service's write gate and the fleet these members answer for, in one
    /// step, so the two never disagree.
    public func attach(_ fleet: Fleet) {
        self.fleet = fleet
        fleet.service.gate = fleet
    }

    public func managerMethods() -> [MethodDescription] {
        [
            MethodDescription("ListFleetHosts", out: [("hosts", .array(.string))]) { [unowned self] call throws(DBusError) in
                guard let fleet else {
                    throw PropBusError(.unavailable, "propbusd runs without --fleet: there is no fleet").dbusError
                }
                return fleet.listHosts(call)
            },
        ] + fleetLayerMethods()
    }

    public func managerProperties() -> [PropertyDescription] {
        [
            PropertyDescription("FleetState", type: .string) { [unowned self] in .string((fleet?.state ?? .off).rawValue) },
            PropertyDescription("FleetRevision", type: .uint64) { [unowned self] in .uint64(UInt64(max(fleet?.cursor ?? 0, 0))) },
        ]
    }
}
