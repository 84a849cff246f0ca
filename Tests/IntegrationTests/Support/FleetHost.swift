import DBus
import Foundation
import PropBus

/// One simulated host of a fleet: its own private `dbus-daemon`, state directory and
/// `propbusd --fleet etcd://…/PREFIX`, and a client connection on its bus.
///
/// The bus outlives the daemon, so a test can stop, kill and restart the daemon (as a reboot
/// or a crash would) and keep its client and signal subscriptions. All hosts share this
/// machine's hostname, so each daemon gets its host's name with `--fleet-host` (its presence
/// key `PREFIX/hosts/<name>`).
///
/// `@unchecked Sendable`: `process` is only replaced by the test's own task, between calls.
final class FleetHost: @unchecked Sendable {
    /// The host's name in the fleet (`--fleet-host`).
    let name: String
    let bus: PrivateBus
    let client: Client
    /// The daemon's state directory: kept across restarts (the mirror and the watch cursor).
    let stateDirectory: URL
    /// `etcd://127.0.0.1:P[,127.0.0.1:Q…]/PREFIX`
    private(set) var fleetURL: String
    private(set) var process: ChildProcess?
    /// Options every start of this host's daemon gets (e.g. `--fleet-ca`, `--fleet-credentials`).
    var standingArguments: [String] = []

    private init(name: String, bus: PrivateBus, client: Client, fleetURL: String) {
        self.name = name
        self.bus = bus
        self.client = client
        self.fleetURL = fleetURL
        stateDirectory = bus.directory.appendingPathComponent("state")
    }

    /// A new host on a new bus; its daemon is not started yet.
    static func make(name: String, endpoints: [String], prefix: String, busKind: PrivateBus.Kind = .session) async throws -> FleetHost {
        let bus = try await PrivateBus.start(busKind)
        let client = try await Client.connect(to: bus)
        return FleetHost(name: name, bus: bus, client: client, fleetURL: fleetURL(endpoints: endpoints, prefix: prefix))
    }

    /// The `--fleet` argument for `endpoints` (`http://127.0.0.1:P` as EtcdCluster gives them).
    static func fleetURL(endpoints: [String], prefix: String) -> String {
        let hosts = endpoints.map { $0.replacingOccurrences(of: "http://", with: "").replacingOccurrences(of: "https://", with: "") }
        return "etcd://\(hosts.joined(separator: ","))/\(prefix)"
    }

    /// Starts `propbusd --fleet …` (with `endpoints` instead of the host's own when given) and
    /// waits until it owns its name and, if `connected`, until its `FleetState` is `connected`
    /// (before that it refuses fleet writes). A daemon that exits first fails with its stderr.
    /// With `fleet` false, the daemon starts on the same store without `--fleet` (as an operator
    /// might for a while).
    func start(endpoints: [String]? = nil, prefix: String? = nil, extraArguments: [String] = [],
               connected: Bool = true, fleet: Bool = true) async throws {
        if let endpoints, let prefix { fleetURL = Self.fleetURL(endpoints: endpoints, prefix: prefix) }
        let fleetArguments = fleet ? ["--fleet", fleetURL, "--fleet-host", name] : []
        let process = try ChildProcess(BuildProducts.propbusd, ["--address", bus.address, "--state-dir", stateDirectory.path]
                                       + fleetArguments + standingArguments + extraArguments,
                                       environment: bus.environment)
        self.process = process
        var owned = false
        _ = await eventually(timeout: 15) {
            owned = (try? await self.client.nameHasOwner()) ?? false
            return owned || !process.isRunning
        }
        guard owned else {
            await process.stop()
            throw TestSetupError("\(name): propbusd --fleet \(fleetURL) did not own its name (\(process.termination?.description ?? "still running")); stderr:\n\(process.stderr)")
        }
        if fleet, connected, !(await waitForFleetState("connected")) {
            let state = (try? await fleetState()) ?? "unreadable"
            throw TestSetupError("\(name): FleetState is \(state), not connected, 15 s after the start; stderr:\n\(process.stderr)")
        }
    }

    /// Stops the daemon cleanly (SIGTERM) and waits until its name is gone.
    func stop() async {
        guard let process else { return }
        await process.stop()
        _ = await eventually(timeout: 10) { !((try? await self.client.nameHasOwner()) ?? true) }
    }

    /// Kills the daemon at once (SIGKILL), as a crash or a power cut would.
    func kill() async {
        guard let process else { return }
        process.signal(SIGKILL)
        _ = await process.waitForExit(timeout: 10)
        _ = await eventually(timeout: 10) { !((try? await self.client.nameHasOwner()) ?? true) }
    }

    /// What the daemon printed on stderr so far (for failure messages).
    var stderr: String { process?.stderr ?? "" }

    /// Stops everything: daemon, client, bus.
    func tearDown() async {
        client.close()
        await process?.stop()
        await bus.stop()
    }

    // MARK: Tools, as users run them

    /// `propctl --address <bus> …`
    func propctl(_ arguments: [String], timeout: TimeInterval = 15) async throws -> CommandResult {
        try await runCommand(BuildProducts.propctl, ["--address", bus.address] + arguments, environment: bus.environment, timeout: timeout)
    }

    /// `busctl --address=<bus> -- …`
    func busctl(_ arguments: [String], timeout: TimeInterval = 15) async throws -> CommandResult {
        try await runCommand("busctl", ["--address=\(bus.address)", "--"] + arguments, environment: bus.environment, timeout: timeout)
    }

    /// `gdbus call --address <bus> --dest org.propbus.PropBus1 --object-path PATH --method M ARGS…`
    func gdbusCall(_ path: String, _ method: String, _ arguments: [String], timeout: TimeInterval = 15) async throws -> CommandResult {
        try await runCommand("gdbus", ["call", "--address", bus.address, "--dest", PropBusAPI.busName,
                                       "--object-path", path, "--method", method, "--timeout", "10"] + arguments,
                             environment: bus.environment, timeout: timeout)
    }

    // MARK: The fleet's D-Bus API

    /// Creates a fleet-scoped key (`CreateProperty` with option `scope` = `"fleet"`).
    func createFleet(_ key: String, _ type: String, default defaultValue: DBusValue,
                     options: [String: DBusValue] = [:]) async throws {
        var options = options
        options["scope"] = .string("fleet")
        try await client.create(key, type, default: defaultValue, options: options)
    }

    /// Sends `Properties.Set` of `key` to each of `values`, all before the first reply (in order,
    /// from the connection's queue), and returns the replies' errors (nil for success), in order.
    func pipelinedSets(_ key: String, _ values: [DBusValue]) async throws -> [DBusError?] {
        let (path, name) = PropBusAPI.locate(key)
        var messages: [Message] = []
        for value in values {
            let set = try Message.methodCall(destination: PropBusAPI.busName, path: path, interface: PropBusAPI.properties, member: "Set")
            try set.append([.string(PropBusAPI.values), .string(name), .variant(value)])
            messages.append(set)
        }
        let connection = client.connection
        let outcomes = UncheckedBox(messages)
        return await withCheckedContinuation { continuation in
            connection.queue.async {
                var errors: [Int: DBusError?] = [:]
                for (index, message) in outcomes.value.enumerated() {
                    connection.call(message, timeoutMilliseconds: 20_000) { result in
                        if case .failure(let error) = result { errors[index] = .some(error) } else { errors[index] = .some(nil) }
                        if errors.count == outcomes.value.count {
                            continuation.resume(returning: (0..<errors.count).map { errors[$0]! })
                        }
                    }
                }
            }
        }
    }

    /// A Manager property (`FleetState`, `FleetRevision`), read with Properties.Get.
    func managerProperty(_ name: String) async throws -> DBusValue {
        let reply = try await client.call(PropBusAPI.properties, "Get", [.string(PropBusAPI.manager), .string(name)])
        guard reply.count == 1 else { throw TestSetupError("Get(Manager, \(name)) replied \(reply)") }
        return reply[0].unwrappingVariant
    }

    /// `FleetState`: `off`, `connecting`, `connected` or `unavailable`.
    func fleetState() async throws -> String {
        let value = try await managerProperty("FleetState")
        guard let state = value.stringValue else { throw TestSetupError("FleetState is \(value), not a string") }
        return state
    }

    /// Waits until `FleetState` is `state`; false if it is not within `timeout`.
    func waitForFleetState(_ state: String, timeout: TimeInterval = 15) async -> Bool {
        await eventually(timeout: timeout) { (try? await self.fleetState()) == state }
    }

    /// Waits until `key` reads `value` here; false if it does not within `timeout`.
    func waitFor(_ key: String, _ value: DBusValue, timeout: TimeInterval = 10) async -> Bool {
        await eventually(timeout: timeout) { (try? await self.client.get(key)) == value }
    }

    /// The `etcd_revision` ListProperties reports for `key` (nil when it has none).
    func etcdRevision(_ key: String) async throws -> Int64? {
        guard let row = try await client.list(prefix: key).first(where: { $0.key == key }) else {
            throw TestSetupError("\(name): ListProperties has no \(key)")
        }
        return row.metadata["etcd_revision"].flatMap(Fleet.integer)
    }

    /// Records signals on this bus matching the fields, from *any* sender: a daemon that
    /// signals before it owns `org.propbus.PropBus1` (a resync at start) is heard too. Only
    /// propbusd emits such signals on this private bus.
    func recordFromAnySender(path: String? = nil, pathNamespace: String? = nil, interface: String? = nil,
                             member: String? = nil) async throws -> SignalRecorder {
        let rule = MatchRule(path: path, pathNamespace: pathNamespace, interface: interface, member: member)
        let recorder = SignalRecorder()
        client.connection.queue.sync {
            _ = client.connection.addSignalHandler(matching: rule) { message in recorder.append(ReceivedSignal(message)) }
        }
        try await client.connection.addMatch(rule)
        return recorder
    }

    /// Records the Manager's PropertiesChanged (FleetState, FleetRevision).
    func recordManagerChanges() async throws -> SignalRecorder {
        try await client.record(path: PropBusAPI.rootPath, interface: PropBusAPI.properties, member: "PropertiesChanged")
    }
}

/// Hands values that are not `Sendable` (libdbus messages) to the connection's queue, which is
/// then their only user. `@unchecked Sendable`: the sender never touches them again.
struct UncheckedBox<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
