import DBus
import PropBus
@testable import PropBusFleet
@testable import PropBusService

/// A host of the fleet in this process, for the in-process fleet tests: a service on
/// `connection` whose model `declare` fills, with a running ``Fleet`` (host "a", prefix
/// `/lab/`) against `etcd`. Call on the connection's queue and keep the service there: it is
/// not Sendable.
func startFleetHost(on connection: Connection, store: any PropertyStore, etcd: FakeEtcd,
                    declaring declare: (PropertyModel) throws -> Void = { _ in }) throws -> Service {
    let model = try PropertyModel(store: store)
    try declare(model)
    model.commitRound()
    let members = FleetManagerMembers(access: .open)
    let service = Service(connection: connection, model: model, store: store, managerExtension: members)
    var configuration = try FleetConfiguration.parse("etcd://127.0.0.1:1/lab")
    configuration.hostName = "a"
    let fleet = try Fleet(configuration: configuration, service: service, revisions: [:], cursor: 0, port: etcd)
    // As the daemon wires it: the service's gate, and the Manager's fleet members answer for it.
    members.attach(fleet)
    fleet.start()
    return service
}

extension Service {
    /// The fleet that is this service's gate, for the tests that look into it.
    var fleet: Fleet? { gate as? Fleet }
}
