import DBus
import SystemKit

/// The app's handlers of `handler=true` commands: the daemon calls
/// `org.propbus.PropBus1.Handler.Run(s key, t id, v input) → v` on this connection for each
/// execution, and `Cancel(s key, t id)` when it is cancelled or timed out.
///
/// Confined to the client's queue: made, read and changed there only.
final class CommandHandlers {
    /// One served command: runs an execution's input, answers its result or error.
    typealias Handler = @Sendable (DBusValue) async throws(PropBusClientError) -> DBusValue

    private let client: PropBusClient
    private var tree: ObjectTree?
    private var handlers: [String: Handler] = [:]
    /// Running executions' tasks, by command key and execution id.
    private var running: [String: [UInt64: Task<Void, Never>]] = [:]

    init(client: PropBusClient) {
        self.client = client
        let tree = ObjectTree(connection: client.connection)
        tree.export(ExportedObject { [unowned self] in [description()] }, at: DaemonNames.handlerPath)
        self.tree = tree
    }

    func add(_ key: String, _ handler: @escaping Handler) {
        handlers[key] = handler
    }

    func remove(_ key: String) {
        handlers[key] = nil
        for task in (running.removeValue(forKey: key) ?? [:]).values { task.cancel() }
    }

    /// Registers every served command again (the daemon restarted and forgot them).
    func registerAgain() {
        for key in handlers.keys {
            Task { [client] in
                _ = try? await client.callDaemon(path: DaemonNames.rootPath, interface: DaemonNames.managerInterface,
                                                 member: "RegisterHandler", [.string(key)])
            }
        }
    }

    private func description() -> InterfaceDescription {
        InterfaceDescription(DaemonNames.handlerInterface, methods: [
            MethodDescription("Run", in: [("key", .string), ("id", .uint64), ("input", .variant)], out: [("result", .variant)]) { [unowned self] call throws(DBusError) in
                let key = try call.string("key"), id = try call.uint64("id"), input = try call.variant("input")
                guard let handler = handlers[key] else {
                    throw DBusError(name: "org.propbus.PropBus1.Error.HandlerVanished", message: "this client does not serve \(key)")
                }
                // Made on the queue, answered on the queue: the task carries them there.
                let server = LoopBound(self, on: client.queue), pending = LoopBound(call, on: client.queue)
                running[key, default: [:]][id] = Task {
                    let outcome: Result<DBusValue, PropBusClientError>
                    do throws(PropBusClientError) { outcome = .success(try await handler(input)) } catch { outcome = .failure(error) }
                    server.queue.async {
                        server.value.running[key]?[id] = nil
                        switch outcome {
                        case .success(let value): pending.value.reply([.variant(value)])
                        case .failure(let error): pending.value.fail(DBusError(name: error.name, message: error.message))
                        }
                    }
                }
                return .deferred
            },
            MethodDescription("Cancel", in: [("key", .string), ("id", .uint64)]) { [unowned self] call throws(DBusError) in
                running[try call.string("key")]?[try call.uint64("id")]?.cancel()
                return .reply([])
            },
        ])
    }
}

/// This client's registration as a command's handler; ``stop()`` ends it.
public final class CommandService: Sendable {
    /// The command served.
    public let key: String
    private let client: PropBusClient

    init(client: PropBusClient, key: String) {
        self.client = client
        self.key = key
    }

    /// Stops handling the command: running executions fail with `HandlerVanished`.
    public func stop() async {
        await client.onQueue { [client, key] in client.handlers?.remove(key) }
        _ = try? await client.callDaemon(path: DaemonNames.rootPath, interface: DaemonNames.managerInterface,
                                         member: "UnregisterHandler", [.string(key)])
    }
}

extension PropBusClient {
    /// Becomes the handler of the `handler=true` command `key`: each execution runs `handler`
    /// with its input; its result is the execution's, an error it throws fails the execution
    /// with that error's name. A cancelled or timed-out execution cancels the handler's task.
    /// Registers again when the daemon restarts. `Exists` if another connection serves it.
    public func serve<Input: DBusValueConvertible, Output: DBusValueConvertible>(
        _ key: String, input: Input.Type = Input.self, output: Output.Type = Output.self,
        _ handler: @escaping @Sendable (Input) async throws(PropBusClientError) -> Output
    ) async throws(PropBusClientError) -> CommandService {
        let wrapped: CommandHandlers.Handler = { raw throws(PropBusClientError) in
            guard let input = Input(dbusValue: raw) else {
                throw PropBusClientError(name: "org.freedesktop.DBus.Error.InvalidArgs",
                                         message: "command \(key) takes '\(Input.dbusType.signature)', got '\(raw.signature)'")
            }
            return try await handler(input).dbusValue
        }
        await onQueue { [self] in
            if handlers == nil { handlers = CommandHandlers(client: self) }
            handlers?.add(key, wrapped)
        }
        do {
            _ = try await callDaemon(path: DaemonNames.rootPath, interface: DaemonNames.managerInterface,
                                     member: "RegisterHandler", [.string(key)])
        } catch {
            await onQueue { [self] in handlers?.remove(key) }
            throw error
        }
        return CommandService(client: self, key: key)
    }
}
