import DBus
import PropBus
import PropBusExec
import SystemKit

/// Serves `org.propbus.PropBus1.Handler` for one command: each `Run` spawns the argv (without a
/// shell) and replies with what it printed; `Cancel` stops that process group.
///
/// Everything is confined to the connection's queue: the verb holds the server as a
/// ``LoopBound``, and process completions hop back to the queue through one.
final class HandlerServer {
    static let path = PropBusAPI.handlerPath
    static let interface = PropBusAPI.handlerInterface

    private let connection: Connection
    private let key: Key
    private let argv: [String]
    private var tree: ObjectTree?
    /// Running executions: their process and the `Run` call waiting for the result.
    private var running: [UInt64: (process: CommandProcess, call: MethodCall)] = [:]
    /// The I/O of every running process, on one thread; a `Run` beyond its capacity fails with
    /// `LimitsExceeded`.
    private let io = CommandIOLoop(capacity: 256)

    init(connection: Connection, key: Key, argv: [String]) {
        self.connection = connection
        self.key = key
        self.argv = argv
    }

    private static let ownerRule = MatchRule.nameOwnerChanged(arg0: PropbusClient.busName)

    /// Exports the handler object of `server` (for `key`, on `connection`, its queue's),
    /// subscribes to propbusd's restarts, then registers.
    static func start(_ server: LoopBound<HandlerServer>, for key: Key, on connection: Connection) async throws(CommandFailure) {
        await onQueue(connection) { server.value.export() }
        do { try await connection.addMatch(Self.ownerRule) } catch { throw CommandFailure(error) }
        try await register(key, on: connection)
    }

    /// The object and the restart handler of ``start(_:for:on:)``, on the queue.
    private func export() {
        let tree = ObjectTree(connection: connection)
        tree.export(ExportedObject { [unowned self] in [handlerDescription()] }, at: Self.path)
        self.tree = tree
        // A restarted propbusd has forgotten its handlers: register again.
        let connection = connection, key = key
        connection.addSignalHandler(matching: Self.ownerRule) { message in
            guard let arguments = try? message.arguments(), arguments.count == 3, arguments[2].stringValue?.isEmpty == false else { return }
            Task { try? await Self.register(key, on: connection) }
        }
    }

    private static func register(_ key: Key, on connection: Connection) async throws(CommandFailure) {
        do {
            _ = try await connection.call(destination: PropbusClient.busName, path: Key.rootPath, interface: PropbusClient.managerInterface,
                                          member: "RegisterHandler", arguments: [.string(key.text)])
        } catch {
            throw CommandFailure(error)
        }
    }

    /// Stops every running process of `server` (their executions fail as the connection closes).
    static func stop(_ server: LoopBound<HandlerServer>, on connection: Connection) async {
        await onQueue(connection) {
            for (_, entry) in server.value.running { entry.process.terminate(grace: 1) }
        }
    }

    private static func onQueue(_ connection: Connection, _ body: @escaping @Sendable () -> Void) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            connection.queue.async {
                body()
                continuation.resume()
            }
        }
    }

    private func handlerDescription() -> InterfaceDescription {
        InterfaceDescription(Self.interface, methods: [
            MethodDescription("Run", in: [("key", .string), ("id", .uint64), ("input", .variant)], out: [("result", .variant)]) { [unowned self] call throws(DBusError) in
                let id = try call.uint64("id"), input = try call.variant("input")
                do {
                    let server = LoopBound(self, on: connection.queue)
                    let process = try CommandProcess.execute(argv, command: key, execution: id, input: input,
                                                             outputLimit: 1 << 20, loop: io) { outcome in
                        server.queue.async { server.value.finish(id, outcome) }
                    }
                    running[id] = (process, call)
                } catch let error as PropBusError {
                    throw DBusError(name: error.name, message: "command \(key): \(error.message)")
                } catch {
                    throw DBusError(name: DBusError.Name.failed, message: "command \(key): \(error)")
                }
                return .deferred
            },
            MethodDescription("Cancel", in: [("key", .string), ("id", .uint64)]) { [unowned self] call throws(DBusError) in
                running[try call.uint64("id")]?.process.terminate(grace: 2)
                return .reply([])
            },
        ])
    }

    private func finish(_ id: UInt64, _ outcome: CommandProcess.Outcome) {
        guard let entry = running.removeValue(forKey: id) else { return }
        switch outcome.result(of: key) {
        case .success(let text): entry.call.reply([.variant(.string(text))])
        case .failure(let error): entry.call.fail(DBusError(name: error.name, message: error.message))
        }
    }
}
