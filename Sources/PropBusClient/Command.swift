import DBus

/// One event of a command's executions, as every observer sees it (RACCommand's
/// `executionSignals` and `errors`, for everyone and not only the caller).
public enum CommandEvent<Output: DBusValueConvertible>: Sendable {
    /// An execution was accepted (by anyone).
    case started(id: UInt64)
    /// An execution ended with a result.
    case finished(id: UInt64, result: Output)
    /// An execution failed: `NotEnabled` is never one (nothing started), `ExecutionFailed`,
    /// `Cancelled`, `TimedOut`, `HandlerVanished` and a handler's own errors are.
    case failed(id: UInt64, error: PropBusClientError)
}

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
    ///
    /// Writes of bound model properties made before the call (``PropertyChannel``) reach the
    /// daemon first: a text typed and a search tapped in the same turn run on that text.
    /// Cancelling the task that awaits it cancels the execution on the daemon; the call then
    /// throws the daemon's `Cancelled`.
    public func execute(_ input: Input) async throws(PropBusClientError) -> Output {
        await client.commitBoundWrites()
        await client.subscribeToCommand(path)
        let id = try await startExecution(input)
        let event = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<CommandSignals.Event, Never>) in
                client.queue.async { [client, path] in client.commandSignals.awaitOutcome(path: path, id: id, continuation) }
            }
        } onCancel: { [self] in
            Task { try? await cancel(id) }
        }
        switch event {
        case .finished(_, let raw):
            guard let output = Output(dbusValue: raw) else { throw .decoding("the result of \(key)", expected: Output.dbusType, actual: raw) }
            return output
        case .failed(_, let error):
            throw error
        case .started:
            preconditionFailure("an outcome is never a start")
        }
    }

    /// Starts an execution with `input` and returns its id at once, for ``cancel(_:)``; bound
    /// writes made before reach the daemon first, as for ``execute(_:)``.
    @discardableResult
    public func start(_ input: Input) async throws(PropBusClientError) -> UInt64 {
        await client.commitBoundWrites()
        return try await startExecution(input)
    }

    private func startExecution(_ input: Input) async throws(PropBusClientError) -> UInt64 {
        let id = try await client.start(commandAt: path, input: input.dbusValue)
        // Cancelled while the id was on its way: nothing else can cancel that execution.
        if Task.isCancelled { Task { [self] in try? await cancel(id) } }
        return id
    }

    /// Cancels a running execution; it fails with `Cancelled`. An id that does not run is `InvalidArgs`.
    public func cancel(_ execution: UInt64) async throws(PropBusClientError) {
        _ = try await client.callDaemon(path: path, interface: DaemonNames.commandInterface, member: "Cancel", [.uint64(execution)])
    }

    /// Every execution's start, result and failure from the moment the stream is subscribed
    /// (in the background: ``subscribedExecutions()`` returns once it is), whoever ran it;
    /// ends when the client closes.
    public var executions: AsyncStream<CommandEvent<Output>> {
        let (stream, continuation) = AsyncStream<CommandEvent<Output>>.makeStream(bufferingPolicy: .bufferingNewest(Property<Bool>.bufferLimit))
        Task { await follow(into: continuation) }
        return stream
    }

    /// ``executions``, returned once subscribed: every execution started after it returns is seen.
    public func subscribedExecutions() async -> AsyncStream<CommandEvent<Output>> {
        let (stream, continuation) = AsyncStream<CommandEvent<Output>>.makeStream(bufferingPolicy: .bufferingNewest(Property<Bool>.bufferLimit))
        await follow(into: continuation)
        return stream
    }

    /// Subscribes, then hands every event of this command to `continuation` (on the queue).
    private func follow(into continuation: AsyncStream<CommandEvent<Output>>.Continuation) async {
        let client = client, path = path, key = key
        await client.subscribeToCommand(path)
        await client.onQueue {
            let token = client.commandSignals.addObserver(path: path) { event in
                switch event {
                case .started(let id): continuation.yield(.started(id: id))
                case .finished(let id, let raw):
                    if let output = Output(dbusValue: raw) {
                        continuation.yield(.finished(id: id, result: output))
                    } else {
                        continuation.yield(.failed(id: id, error: .decoding("the result of \(key)", expected: Output.dbusType, actual: raw)))
                    }
                case .failed(let id, let error): continuation.yield(.failed(id: id, error: error))
                }
            }
            client.onClose { continuation.finish() }
            continuation.onTermination = { _ in client.queue.async { client.commandSignals.removeObserver(path: path, token) } }
        }
    }

    /// The result of every execution that finishes, whoever ran it.
    public var results: AsyncStream<Output> {
        let events = executions
        return AsyncStream { continuation in
            let task = Task {
                for await event in events { if case .finished(_, let result) = event { continuation.yield(result) } }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// The error of every execution that fails, whoever ran it.
    public var errors: AsyncStream<PropBusClientError> {
        let events = executions
        return AsyncStream { continuation in
            let task = Task {
                for await event in events { if case .failed(_, let error) = event { continuation.yield(error) } }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }
}
