import CommandLineKit
import DBus
import Dispatch
import Glibc
import PropBus
import SystemKit

/// `propctl exec KEY [INPUT] [--type TYPE] [--no-wait]`: `Command.Start`, then the execution's
/// `Finished` or `Failed` signal.
///
/// Start rather than Execute, so that the id is known at once: it is printed on stderr, and
/// SIGINT or SIGTERM cancels exactly that execution before propctl exits (130 or 143).
enum ExecVerb: Subcommand {
    static let commandInterface = PropBusAPI.commandInterface

    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let key = try PropbusClient.key(parsed.positional("KEY") ?? "")
        let typeText = parsed.option("type") ?? "s"
        let type: DBusType
        do { type = try DBusType(parsing: typeText) } catch {
            throw CommandFailure(.usage, "--type '\(typeText)' is not a single complete D-Bus type")
        }
        let input: DBusValue
        do { input = try ValueText.parse(parsed.positional("INPUT") ?? "", as: type) } catch {
            throw CommandFailure.badValue("INPUT is not a valid '\(type.signature)' value: \(error.message)")
        }
        let client = try await PropbusClient.connect(parsed)
        let path = Key.objectPath(ofGroup: key.text)
        let json = parsed.flag("json")
        if parsed.flag("no-wait") {
            let id = try await start(client, key, path, input)
            Output.line(json ? Output.json(.object([("key", .string(key.text)), ("id", .unsignedInteger(id))])) : String(id))
            return
        }

        let waiter = LoopBound.handOver(ExecutionWaiter(client: client, key: key, path: path), to: client.connection.queue)
        try await ExecutionWaiter.subscribe(waiter, on: client.connection, to: ExecutionWaiter.rule(path))
        let id = try await start(client, key, path, input)
        Output.error("propctl exec: execution \(id) of \(key) started")
        let (result, interruption) = await ExecutionWaiter.wait(waiter, for: id)
        switch result {
        case .success(let value):
            Output.line(json ? Output.json(.object([("key", .string(key.text)), ("id", .unsignedInteger(id)), ("result", ValueText.jsonValue(value))]))
                             : ValueText.format(value))
        case .failure(let error):
            let failure = CommandFailure(error)
            if let interruption {
                Output.error("propctl exec: \(failure.message)")
                exit(128 + interruption)
            }
            throw failure
        }
    }

    /// Calls `Start`: the execution's id.
    private static func start(_ client: PropbusClient, _ key: Key, _ path: String, _ input: DBusValue) async throws(CommandFailure) -> UInt64 {
        let reply: [DBusValue]
        do {
            reply = try await client.connection.call(destination: PropbusClient.busName, path: path, interface: commandInterface,
                                                     member: "Start", arguments: [.variant(input)])
        } catch where error.name == DBusError.Name.unknownObject || error.name == DBusError.Name.unknownInterface {
            // The bus speaks of objects; the user named a command.
            throw await client.unknownCommand(key.text)
        } catch {
            throw CommandFailure(error)
        }
        guard case .uint64(let id)? = reply.first else { throw CommandFailure(.dbusError, "propbusd answered Start with \(reply)") }
        return id
    }
}

/// Waits for one execution's outcome, cancelling it on SIGINT or SIGTERM.
///
/// Every property is touched only on the connection's queue: the verb holds it as a ``LoopBound``.
final class ExecutionWaiter {
    private let client: PropbusClient
    private let key: Key
    private let path: String
    /// Outcomes seen before the id was known: a fast execution may end before Start's reply is handled.
    private var outcomes: [UInt64: Result<DBusValue, DBusError>] = [:]
    private var id: UInt64?
    private var interruption: Int32?
    private var continuation: CheckedContinuation<(Result<DBusValue, DBusError>, Int32?), Never>?
    private var sources: [DispatchSourceSignal] = []

    init(client: PropbusClient, key: Key, path: String) {
        self.client = client
        self.key = key
        self.path = path
    }

    /// The command's signals at `path`.
    static func rule(_ path: String) -> MatchRule {
        MatchRule(sender: PropbusClient.busName, path: path, interface: ExecVerb.commandInterface)
    }

    /// Subscribes to the command's signals (`rule`) and takes over SIGINT and SIGTERM: before
    /// Start, so that neither the outcome nor an early Ctrl-C can be missed.
    static func subscribe(_ waiter: LoopBound<ExecutionWaiter>, on connection: Connection, to rule: MatchRule) async throws(CommandFailure) {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            connection.queue.async {
                waiter.value.listen(to: rule, as: waiter)
                done.resume()
            }
        }
        do {
            try await connection.addMatch(rule)
            try await connection.addMatch(Self.ownerChanges)
        } catch {
            throw CommandFailure(error)
        }
    }

    /// The handlers of ``subscribe(_:on:to:)``, on the queue.
    private func listen(to rule: MatchRule, as waiter: LoopBound<ExecutionWaiter>) {
        let connection = client.connection
        connection.addSignalHandler(matching: rule) { [self] message in received(message) }
        // A daemon that dies takes the execution's outcome with it: no Finished will come.
        connection.addSignalHandler(matching: Self.ownerChanges) { [self] message in
            guard let arguments = try? message.arguments(), arguments.count == 3, arguments[2].stringValue == "" else { return }
            end(.failure(DBusError(name: DBusError.Name.noReply,
                                   message: "propbusd left the bus while execution \(id.map(String.init) ?? "?") of \(key) ran")))
        }
        connection.whenDisconnected {
            connection.queue.async {
                let waiter = waiter.value
                waiter.end(.failure(DBusError(name: DBusError.Name.disconnected,
                                              message: "the bus went away while execution \(waiter.id.map(String.init) ?? "?") of \(waiter.key) ran")))
            }
        }
        for number in [SIGINT, SIGTERM] {
            let source = DispatchSource.makeSignalSource(signal: number, queue: connection.queue)
            source.setEventHandler { [self] in interrupted(by: number) }
            source.resume()
            sources.append(source)
        }
    }

    private static let ownerChanges = MatchRule.nameOwnerChanged(arg0: PropbusClient.busName)

    /// The outcome of execution `id`, and the signal that cancelled it, if one did.
    static func wait(_ waiter: LoopBound<ExecutionWaiter>, for id: UInt64) async -> (Result<DBusValue, DBusError>, Int32?) {
        await withCheckedContinuation { continuation in
            waiter.queue.async {
                let waiter = waiter.value
                waiter.continuation = continuation
                waiter.id = id
                if waiter.interruption != nil { waiter.cancel() }
                if let outcome = waiter.outcomes[id] { waiter.end(outcome) }
            }
        }
    }

    private func received(_ message: Message) {
        guard let arguments = try? message.arguments(), case .uint64(let executionID)? = arguments.first else { return }
        switch message.member {
        case "Finished" where arguments.count == 2:
            outcomes[executionID] = .success(arguments[1].unwrappingVariantOnce)
        case "Failed" where arguments.count == 3:
            outcomes[executionID] = .failure(DBusError(name: arguments[1].stringValue ?? DBusError.Name.failed,
                                                       message: arguments[2].stringValue ?? ""))
        default:
            return
        }
        if executionID == id, let outcome = outcomes[executionID] { end(outcome) }
    }

    private func interrupted(by number: Int32) {
        guard interruption == nil else { return }
        interruption = number
        if id != nil { cancel() }
    }

    /// Asks the daemon to cancel; the execution then ends with a `Failed` signal.
    private func cancel() {
        guard let id else { return }
        let client = client, path = path
        Task { _ = try? await client.call(path, ExecVerb.commandInterface, "Cancel", [.uint64(id)]) }
    }

    private func end(_ outcome: Result<DBusValue, DBusError>) {
        continuation?.resume(returning: (outcome, interruption))
        continuation = nil
    }
}
