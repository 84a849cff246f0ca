import DBus
import PropBus
@testable import PropBusFleet
@testable import PropBusService
import XCTest

/// The fixture of the in-process fleet tests: a private bus, the service's connection and a
/// client's, and a host of the fleet (``startFleetHost(on:store:etcd:declaring:)``) against
/// ``etcd``; the host is stopped and everything closed after each test.
class FleetHostTestCase: XCTestCase, @unchecked Sendable {
    var bus: TestBus!
    var serviceConnection: Connection!
    var client: Connection!
    /// Made and kept on the service connection's queue: the service is not Sendable.
    var service: Service?
    let etcd = FakeEtcd()

    /// Starts the bus, both connections and the host. `makeStore` runs on the service's queue,
    /// where the store stays; `declare` fills the host's model before the fleet starts.
    func startHost(store makeStore: @escaping @Sendable () -> any PropertyStore,
                   declaring declare: @escaping @Sendable (PropertyModel) throws -> Void = { _ in }) async throws {
        bus = try TestBus.start()
        serviceConnection = try await bus.connect()
        client = try await bus.connect()
        let etcd = etcd
        try await onQueue(serviceConnection) { [self, serviceConnection] () throws in
            service = try startFleetHost(on: serviceConnection!, store: makeStore(), etcd: etcd, declaring: declare)
        }
    }

    override func tearDown() async throws {
        if let serviceConnection {
            _ = await onQueue(serviceConnection) { [self] in
                service?.fleet?.stop()
                service = nil
            }
        }
        serviceConnection?.close()
        client?.close()
        bus?.stop()
        try await super.tearDown()
    }
}
