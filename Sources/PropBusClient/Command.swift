import DBus

/// A command of the daemon (`viewmodel.executeSearch`): whether it may run, whether it runs,
/// and its executions. The seeds' `RACCommand`, across processes.
///
/// Made by ``PropBusClient/command(_:input:output:)``. Failures are ``PropBusClientError``s
/// carrying the daemon's error name: `NotEnabled`, `ExecutionFailed`, `Cancelled`, `TimedOut`, …
public final class Command<Input: DBusValueConvertible, Output: DBusValueConvertible>: Sendable {
    /// The command's key, e.g. `viewmodel.executeSearch`.
    public let key: String
    /// The command's `Enabled` state as a property (`KEY.Enabled`).
    public let enabled: Property<Bool>
    /// The command's `Executing` state as a property (`KEY.Executing`): true from the moment an
    /// execution is accepted until all executions ended.
    public let executing: Property<Bool>
    private let client: PropBusClient
    private let path: String

    init(client: PropBusClient, key: String) {
        self.client = client
        self.key = key
        path = DaemonNames.objectPath(of: key)
        enabled = client.property(key + ".Enabled", as: Bool.self)
        executing = client.property(key + ".Executing", as: Bool.self)
    }

    /// Whether the command may run now, then every change (e.g. to drive a button's `enabled`).
    public var isEnabled: AsyncStream<Bool> { enabled.values }

    /// Whether an execution runs now, then every change (e.g. to drive a spinner).
    public var isExecuting: AsyncStream<Bool> { executing.values }

    /// Runs the command with `input` and waits for its result.
    public func execute(_ input: Input) async throws(PropBusClientError) -> Output {
        let reply = try await client.callDaemon(path: path, interface: DaemonNames.commandInterface,
                                                member: "Execute", [.variant(input.dbusValue)],
                                                // An execution takes as long as it takes (the command's own
                                                // `timeout` bounds it), not libdbus's 25 s default.
                                                timeoutMilliseconds: Int32.max)
        let raw = reply.first?.unwrappingVariant ?? .structure([])
        guard let output = Output(dbusValue: raw) else { throw .decoding("the result of \(key)", expected: Output.dbusType, actual: raw) }
        return output
    }

    /// Starts an execution with `input` and returns its id at once, for ``cancel(_:)``.
    @discardableResult
    public func start(_ input: Input) async throws(PropBusClientError) -> UInt64 {
        let reply = try await client.callDaemon(path: path, interface: DaemonNames.commandInterface,
                                                member: "Start", [.variant(input.dbusValue)])
        guard case .uint64(let id)? = reply.first else {
            throw PropBusClientError(name: DBusError.Name.failed, message: "Start of \(key) replied \(reply)")
        }
        return id
    }

    /// Cancels a running execution; it fails with `Cancelled`. An id that does not run is `InvalidArgs`.
    public func cancel(_ execution: UInt64) async throws(PropBusClientError) {
        _ = try await client.callDaemon(path: path, interface: DaemonNames.commandInterface, member: "Cancel", [.uint64(execution)])
    }
}
