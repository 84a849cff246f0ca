import DBus
import PropBus
@testable import PropBusFleet
@testable import PropBusService
import XCTest

/// The fleet's members of the Manager interface, as the daemon adds them to its service with or
/// without `--fleet`: the interface is the same either way, and without a fleet they say so.
final class FleetManagerMembersTests: XCTestCase, @unchecked Sendable {
    private var bus: TestBus!
    private var serviceConnection: Connection!
    private var client: Connection!
    private var service: Service?

    override func setUp() async throws {
        bus = try TestBus.start()
        serviceConnection = try await bus.connect()
        client = try await bus.connect()
        // Made and kept on the service's queue: the service is not Sendable.
        try await onQueue(serviceConnection) { [self, serviceConnection] () throws in
            let store = MemoryStore()
            let model = try PropertyModel(store: store)
            model.commitRound()
            service = Service(connection: serviceConnection!, model: model, store: store,
                              managerExtension: FleetManagerMembers(access: .open))
        }
    }

    override func tearDown() async throws {
        if let serviceConnection { _ = await onQueue(serviceConnection) { [self] in service = nil } }
        serviceConnection?.close()
        client?.close()
        bus?.stop()
    }

    private func manager(_ member: String, _ arguments: [DBusValue] = []) async throws -> [DBusValue] {
        try await client.call(destination: serviceConnection.uniqueName, path: Key.rootPath, interface: PropBusAPI.managerInterface,
                              member: member, arguments: arguments)
    }

    private func managerProperty(_ name: String) async throws -> DBusValue {
        let reply = try await client.call(destination: serviceConnection.uniqueName, path: Key.rootPath, interface: PropBusAPI.propertiesInterface,
                                          member: "Get", arguments: [.string(PropBusAPI.managerInterface), .string(name)])
        return reply.first?.unwrappingVariantOnce ?? .string("")
    }

    /// The service's test of the Manager's privileges, with the fleet's members in: the layer
    /// methods write and declare who may, `ListFleetHosts` is a listing.
    func testTheFleetsManagerMethodsDeclareTheirPrivilege() async throws {
        let open = await onQueue(serviceConnection) { [self] () -> [String] in
            let methods = service!.managerDescription().methods.values.map { $0 }
            let unchecked = methods.filter { $0.writes && $0.access.isNone }.map(\.name)
            XCTAssertEqual(unchecked, [], "methods that write but declare no privilege")
            for name in ["SetFleetLayer", "RemoveFleetLayer"] {
                XCTAssertEqual(methods.first { $0.name == name }?.writes, true, "\(name) is not a write")
            }
            return methods.filter(\.access.isNone).map(\.name).sorted()
        }
        XCTAssertEqual(open, ["ListBindings", "ListBindingsPage", "ListCommands", "ListExecutions", "ListFleetHosts", "ListHistory", "ListProperties", "ListPropertiesCompact", "ListUsage", "UnregisterHandler"])
    }

    /// Without `--fleet` (no fleet attached): `FleetState` off, `FleetRevision` 0, and the
    /// fleet's methods answer `Unavailable` (docs/dbus-api.md).
    func testWithoutAFleetTheMembersAnswerOffZeroAndUnavailable() async throws {
        let state = try await managerProperty("FleetState")
        XCTAssertEqual(state, .string("off"))
        let revision = try await managerProperty("FleetRevision")
        XCTAssertEqual(revision, .uint64(0))
        for (member, arguments) in [("ListFleetHosts", [DBusValue]()),
                                    ("SetFleetLayer", [.string("mandatory"), .string("lab.volume"), .variant(.int32(1)), .array(of: .string, [])]),
                                    ("RemoveFleetLayer", [.string("mandatory"), .string("lab.volume")])] {
            do {
                _ = try await manager(member, arguments)
                XCTFail("\(member) succeeded without a fleet")
            } catch let error as DBusError {
                XCTAssertEqual(error.name, "org.propbus.PropBus1.Error.Unavailable", "\(member): \(error)")
                XCTAssertEqual(error.message, "propbusd runs without --fleet: there is no fleet", member)
            }
        }
    }
}
