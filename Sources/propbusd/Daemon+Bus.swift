import DBus
import Dispatch
import Glibc
import PropBus
import PropBusFleet
import PropBusRender
import PropBusService
import SystemKit

/// The bus connection's and the name's start and stop: the round trips, which run in tasks and
/// answer the lifecycle on the daemon's queue.
extension Daemon {
    /// Connects, exports the service and subscribes, before the name is owned.
    func connect(then done: @escaping (Result<Void, LifecycleError>) -> Void) {
        let daemon = LoopBound(self, on: queue)
        let bus = options.bus, queue = self.queue
        Self.roundTrip(on: queue, then: done) { () async -> Result<Void, LifecycleError> in
            do {
                let connection = try await Connection.connect(to: bus, queue: queue)
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
                    queue.async {
                        do {
                            try daemon.value.export(on: connection)
                            continuation.resume()
                        } catch {
                            continuation.resume(throwing: error)
                        }
                    }
                }
                for rule in Service.matchRules { try await connection.addMatch(rule) }
                return .success(())
            } catch {
                return .failure(Self.startFailure(error))
            }
        }
    }

    /// Asks for the name; READY=1 comes only after it (``serve()``): a unit ordered after
    /// propbusd.service, or a client woken by it, finds the daemon complete.
    func requestName(then done: @escaping (Result<Void, LifecycleError>) -> Void) {
        guard let connection else { return done(.failure(LifecycleError(code: 1, message: "cannot start: not connected"))) }
        Self.roundTrip(on: queue, then: done) { () async -> Result<Void, LifecycleError> in
            do {
                let reply = try await connection.requestName(Service.busName)
                guard reply == .primaryOwner || reply == .alreadyOwner else {
                    return .failure(LifecycleError(code: 1, message: "the name \(Service.busName) is already owned on this bus"))
                }
                return .success(())
            } catch {
                return .failure(Self.startFailure(error))
            }
        }
    }

    private static func startFailure(_ error: any Error) -> LifecycleError {
        if let error = error as? DBusError { return LifecycleError(code: 1, message: "cannot start: \(error.name): \(error.message)") }
        return LifecycleError(code: 1, message: "cannot start: \(error)")
    }

    /// Releases the name before the connection closes, so NameOwnerChanged tells clients at
    /// once and activation can start a new instance.
    func releaseName(then done: @escaping (LifecycleError?) -> Void) {
        guard let connection else { return done(nil) }
        Self.roundTrip(on: queue, then: done) { () async -> LifecycleError? in
            _ = try? await connection.call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                           interface: "org.freedesktop.DBus", member: "ReleaseName",
                                           arguments: [.string(Service.busName)], timeoutMilliseconds: Int32(Self.releaseNameTimeout))
            return nil
        }
    }

    /// Sends what is still queued (the ReleaseName) before exit; off the queue, since `flush`
    /// waits for the queue.
    func flush(then done: @escaping (LifecycleError?) -> Void) {
        guard let connection else { return done(nil) }
        Self.roundTrip(on: queue, then: done) { () async -> LifecycleError? in
            connection.flush()
            return nil
        }
    }

    /// Runs a component's bus round trips in a task, and gives `done` their result on `queue`
    /// (where the runner waits for it). Called on `queue`.
    private static func roundTrip<Value: Sendable>(on queue: DispatchQueue, then done: @escaping (Value) -> Void,
                                                   _ work: @escaping @Sendable () async -> Value) {
        let answer = LoopBound(Answer(done), on: queue)
        Task {
            let result = await work()
            queue.async { answer.value.call(result) }
        }
    }

    /// Once connected, on the queue: makes and exports the service, before the name is owned.
    private func export(on connection: Connection) throws {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let store, let model else { throw PropBusError(.storeFailed, "the store was not opened") }
        var serviceOptions = options.service
        serviceOptions.configDirectory = options.configDirectory
        if options.enforcesAccess {
            // The propbus group is resolved once, now; writers options on each check.
            serviceOptions.access = .enforcing(daemonUserID: geteuid(), accounts: .system)
            // Only where callers are known: quotas are charged to their uids.
            let quotas = Quotas.enforcing(daemonUserID: geteuid(), overrides: options.quotas)
            model.quotas = quotas
            commands?.quotas = quotas
        }
        // Export everything before owning the name: no client may see a half-built daemon.
        let fleetMembers = FleetManagerMembers(access: serviceOptions.access)
        self.fleetMembers = fleetMembers
        // The renders consume the rounds the store commits, and run their programs in the
        // service's one I/O loop beside the executions.
        let renders = DaemonRenders(store: store.store, access: serviceOptions.access, connection: connection)
        self.renders = renders
        serviceOptions.otherProcesses = RenderRunner.maximumConcurrentRuns
        service = Service(connection: connection, model: model, store: renders.committedRounds, history: store.history, commands: commands,
                          options: serviceOptions, managerExtension: ManagerExtensions([fleetMembers, renders.members]))
        service?.storeFailureHandler = { Log.storeFailure($0.message) }
        service?.holdsCommits = true
        service?.skippedModelFiles = modelFiles.skipped
        service?.announcedLayerProblems = model.layerProblems
        service?.reloadHandler = { [unowned self] done in reload(because: "Manager.Reload", then: done) }
        self.connection = connection
        let service = LoopBound(service, on: queue)
        connection.whenDisconnected {
            service.value?.killAllExecutions(timeout: 1)
            Self.fail("lost the connection to the bus", code: 1)
        }
    }
}

/// A component's answer, carried back to the queue in a ``LoopBound`` from a bus round trip's
/// task (Swift 6.0's region checker cannot follow a bare closure in one).
private final class Answer<Value> {
    let call: (Value) -> Void

    init(_ call: @escaping (Value) -> Void) {
        self.call = call
    }
}
