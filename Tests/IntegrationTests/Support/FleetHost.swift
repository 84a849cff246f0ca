import DBus
import Foundation
import PropBus
import XCTest

/// One simulated host of a fleet: its own private bus, state directory and `propbusd --fleet`,
/// with a client on that bus. Several of them share one etcd (``EtcdCluster``).
final class FleetHost: @unchecked Sendable {
    let name: String
    let bus: PrivateBus
    let client: Client
    let stateDirectory: URL
    private(set) var daemon: Daemon

    private init(name: String, bus: PrivateBus, client: Client, stateDirectory: URL, daemon: Daemon) {
        self.name = name
        self.bus = bus
        self.client = client
        self.stateDirectory = stateDirectory
        self.daemon = daemon
    }

    /// `--fleet etcd://HOST:PORT[,…]/PREFIX` for the members' client URLs (`http://…`).
    static func fleetURL(endpoints: [String], prefix: String) -> String {
        let members = endpoints.map { $0.replacingOccurrences(of: "http://", with: "").replacingOccurrences(of: "https://", with: "") }
        return "etcd://" + members.joined(separator: ",") + "/" + prefix
    }

    /// The daemon's arguments for this host.
    func arguments(endpoints: [String], prefix: String, extra: [String] = []) -> [String] {
        ["--state-dir", stateDirectory.path, "--fleet", Self.fleetURL(endpoints: endpoints, prefix: prefix), "--fleet-host", name] + extra
    }

    /// Starts a host (bus, daemon, client); the daemon owns its name before this returns, whether
    /// etcd answers or not (hosts boot offline).
    static func start(name: String, endpoints: [String], prefix: String, extra: [String] = []) async throws -> FleetHost {
        let bus = try await PrivateBus.start()
        let client = try await Client.connect(to: bus)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("propbus-fleet-\(name)-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let arguments = ["--state-dir", directory.path, "--fleet", fleetURL(endpoints: endpoints, prefix: prefix), "--fleet-host", name] + extra
        let daemon = try await Daemon.start(on: bus, arguments: arguments, watcher: client)
        return FleetHost(name: name, bus: bus, client: client, stateDirectory: directory, daemon: daemon)
    }

    /// Stops the daemon and starts it again with the same state directory and `arguments`.
    func restart(arguments: [String]) async throws {
        await daemon.stop()
        _ = await eventually { !((try? await self.client.nameHasOwner()) ?? true) }
        daemon = try await Daemon.start(on: bus, arguments: arguments, watcher: client)
    }

    /// `Manager.FleetState`.
    func fleetState() async throws -> String {
        try await client.call(PropBusAPI.properties, "Get", [.string(PropBusAPI.manager), .string("FleetState")])
            .first?.unwrappingVariantOnce.stringValue ?? ""
    }

    /// Waits until `Manager.FleetState` is `state`; whether it got there.
    func waitForFleetState(_ state: String, timeout: TimeInterval = 15) async -> Bool {
        await eventually(timeout: timeout) { (try? await self.fleetState()) == state }
    }

    /// Waits until `key` reads `value` here; whether it did.
    func waitForValue(_ key: String, _ value: DBusValue, timeout: TimeInterval = 10) async -> Bool {
        await eventually(timeout: timeout) { (try? await self.client.get(key)) == value }
    }

    func stop() async {
        client.close()
        await daemon.stop()
        await bus.stop()
        try? FileManager.default.removeItem(at: stateDirectory)
    }
}
