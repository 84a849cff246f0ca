import DBus
import Dispatch
import Glibc
import PropBus
import PropBusModelFiles
import PropBusSystem
import PropBusService
import SystemKit

/// The daemon's lifecycle: connect, export, own the name, tell systemd, and shut down on a signal.
///
/// Made and opened (``openStore()``) on the main thread, then handed over to ``queue`` by
/// ``launch(options:notifier:)``: from then on everything is the queue's, and work that runs
/// elsewhere (reading model files, the start-up's awaits) hops back through a ``LoopBound``.
final class Daemon {
    let options: DaemonOptions
    let notifier: SystemdNotifier
    let queue = DispatchQueue(label: "org.propbus.propbusd")
    private var connection: Connection?
    private var service: Service?
    private var store: PropertyStore?
    /// The state directory's lock, held until exit: one daemon per store.
    private var lock: StateDirectoryLock?
    private var model: PropertyModel?
    private var commands: CommandTable?
    /// The fleet mirror's etcd revisions and cursor, as the store loaded them.
    private var fleetRevisions: [Key: FleetRevisions] = [:]
    private var fleetCursor: Int64 = 0
    private var fleetSource: String?
    private let modelFiles = ModelFileSet()
    /// The model files to read: the config directory's, then `--model` ones (read again at each reload).
    private var modelPaths: () -> [String] = { [] }
    /// Reads and parses model files for a reload, one reload at a time, so that a slow disk or
    /// a big file does not hold up the calls on ``queue``.
    private let modelFileReader = DispatchQueue(label: "org.propbus.propbusd.model-files")
    private var signalSources: [DispatchSourceSignal] = []
    private var watchdog: DispatchSourceTimer?
    private var stopping = false

    init(options: DaemonOptions, notifier: SystemdNotifier) {
        self.options = options
        self.notifier = notifier
    }

    /// Opens and checks the store and loads the model, before anything touches the bus: a
    /// damaged store must stop the daemon before it owns its name. On failure prints why and exits.
    ///
    /// Only reads and checks: what the model files and stored bindings change is committed by
    /// ``start()`` once the name is owned, so a daemon that loses the race for the name (or the
    /// lock) leaves the store as it found it.
    func openStore(environment: [String: String] = Environment.current) {
        do {
            let store: PropertyStore
            if options.inMemory {
                Log.info("version \(Service.version) starting: store in memory, bus \(Self.describe(options.bus))")
                store = MemoryStore()
            } else {
                let systemBus = if case .system = options.bus { true } else { false }
                let directory = StateDirectory.resolve(environment: environment, option: options.stateDirectory, systemBus: systemBus)
                try StateDirectory.create(directory)
                // Before the store is opened: a second daemon must not even read a store in use.
                lock = try StateDirectoryLock(directory: directory)
                let path = directory + "/" + SQLiteStore.fileName
                Log.info("version \(Service.version) starting: store \(path), bus \(Self.describe(options.bus))")
                let database = try openDatabase(path)
                database.historyOptions = options.history
                store = database
            }
            let loaded = try store.load()
            fleetRevisions = loaded.externalRevisions
            fleetCursor = loaded.externalCursor
            fleetSource = loaded.externalSource
            let model = PropertyModel(store: store, loaded: loaded, limits: options.limits)
            for reason in model.refusedAtLoad { Log.info(reason) }
            // Stored bindings and commands act with their principals' rights of today, from their
            // first sync and first predicate on (the service sets the same checks again from the
            // policy it is given).
            if options.enforcesAccess {
                model.bindingAuthority = BindingAuthority.enforcing(.enforcing(daemonUserID: geteuid(), accounts: .system))
            }
            model.bindingStateHandler = { Log.info(Service.bindingStateLine($0, $1)) }
            let commands = CommandTable(model: model, maximumRunning: options.maximumExecutions)
            // A predicate may read a key that is gone (or comes with a model file below): the
            // command then starts disabled rather than being lost.
            for (key, error) in commands.recreate(loaded.commands, allowingMissingKeys: true) {
                Log.info("stored command \(key) could not be created again: \(error.message)")
            }
            let systemBus = if case .system = options.bus { true } else { false }
            let directory = ModelFile.configDirectory(environment: environment, systemBus: systemBus)
            let extra = options.models
            modelPaths = { ModelFile.files(in: directory) + extra }
            modelFiles.maximumFileSize = options.maximumModelFileSize
            if options.fleet != nil {
                // Before the fleet connects, the mirror's revisions as loaded tell what etcd has.
                let loadedRevisions = fleetRevisions
                modelFiles.shared = FleetLayout.sharedDefinitions { [unowned self] key in
                    if let fleet = service?.fleet { return fleet.holdsDefinition(of: key) }
                    return (loadedRevisions[key]?.definition ?? 0) > 0
                }
            }
            // Who a lock refuses: the `for` names resolve in the system's databases on each check.
            model.lockAuthority = LockAuthority(daemonUserID: geteuid(), checksCredentials: options.enforcesAccess, accounts: .system)
            model.layerProblemHandler = { Log.info("layer file problem: \($0)") }
            let report = try modelFiles.load(modelPaths(), into: model, commands: commands, strict: options.strictModels)
            _ = commands.refresh(after: report.changes)
            logSkippedModelFiles()
            // After the model files: their keys take their layer values now, not one by one.
            let layered = model.applyLayerFiles(LayerFiles.read(configDirectory: options.configDirectory, vendorDirectory: options.vendorDirectory))
            _ = commands.refresh(after: layered.changes)
            logLayerProblems()
            if options.fleet != nil {
                // A store from before Bind refused them: such a binding would write a fleet key
                // on this host only, whenever an execution starts or ends.
                for (binding, reason) in model.unbindStateDrivingFleetKeys().ended {
                    Log.info("dropped stored binding \(binding.id) (\(binding.key) ↔ \(binding.to)): \(reason)")
                }
            }
            // Stored bindings start as they were made: the leading side wins (except over a fleet
            // key: that write would have to go to etcd, and the fleet's value stands).
            for (binding, error) in model.resynchronizeBindings(sparingFleetKeys: options.fleet != nil).failures {
                Log.info("binding \(binding.id) (\(binding.key) ↔ \(binding.to)) could not be synchronized at startup: \(error.message)")
            }
            // The declarations stay buffered in the store until the name is owned (start()).
            model.commitRound()
            commands.commitRound()
            self.model = model
            self.commands = commands
            self.store = store
        } catch {
            Self.fail(error.message, code: 1)
        }
    }

    /// Each layer-file problem once per read: at start and at each reload.
    private func logLayerProblems() {
        for problem in model?.layerProblems ?? [] { Log.info("layer file problem: \(problem)") }
    }

    private func logSkippedModelFiles() {
        for skipped in modelFiles.skipped {
            // The reason starts with file:line:column, as compilers write it.
            // One line per problem: a file with several mistakes reports them all at once.
            for problem in skipped.reason.split(separator: "\n") { Log.info("skipped model file \(problem)") }
        }
    }

    /// SIGHUP and `Manager.Reload`: reads the model files again (off the queue, on
    /// ``modelFileReader``) and applies the difference between rounds, with sd_notify's reload
    /// protocol around it; then calls `done`, on the queue, with the files skipped.
    private func reload(because origin: String, then done: @escaping @Sendable (Result<[ModelFileSet.Skipped], DBusError>) -> Void) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard service != nil, !stopping else { return done(.failure(Self.notServing)) }
        notifier.notify("RELOADING=1\nSTATUS=Reloading model files\nMONOTONIC_USEC=\(Self.monotonicMicroseconds())")
        Log.info("reloading model files (\(origin))")
        let paths = modelPaths(), maximumSize = modelFiles.maximumFileSize
        let configDirectory = options.configDirectory, vendorDirectory = options.vendorDirectory
        let daemon = LoopBound(self, on: queue)
        modelFileReader.async {
            let files = ModelFileSet.read(paths, maximumSize: maximumSize)
            let layers = LayerFiles.read(configDirectory: configDirectory, vendorDirectory: vendorDirectory)
            daemon.queue.async {
                done(Result { () throws(DBusError) in try daemon.value.apply(files, layers: layers) })
            }
        }
    }

    private static let notServing = DBusError(name: DBusError.Name.failed, message: "propbusd is not serving; nothing to reload")

    /// The second half of ``reload(because:then:)``: applies the files read, on the queue.
    private func apply(_ files: [ModelFileSet.ReadFile], layers: LayerFileSet) throws(DBusError) -> [ModelFileSet.Skipped] {
        dispatchPrecondition(condition: .onQueue(queue))
        // A SIGTERM while the files were read said STOPPING=1; READY=1 would contradict it.
        guard let model, let commands, let service, !stopping else { throw Self.notServing }
        defer {
            notifier.notify("READY=1\nSTATUS=Serving \(service.propertyCount) properties as \(Service.busName)")
        }
        var report: ModelFileSet.Report
        // History says these changes came from a reload (Manager.Reload or SIGHUP).
        model.origin = .reload
        defer { model.origin = .daemon }
        // Keys the model files create now meet the files read before; what is wrong is logged
        // once, below, with the files just read.
        let problemHandler = model.layerProblemHandler
        model.layerProblemHandler = nil
        defer { model.layerProblemHandler = problemHandler }
        do {
            report = try modelFiles.load(files: files, into: model, commands: commands, strict: false)
        } catch {
            throw error.dbusError
        }
        // In the same round: one PropertiesChanged per object for what the files changed together.
        let layered = model.applyLayerFiles(layers)
        report.changes += layered.changes
        do throws(DBusError) {
            try service.applyReload(report, skipped: modelFiles.skipped, lockChanged: layered.lockChanged)
        } catch {
            // The round was rolled back (and the store's refusal logged): nothing of this
            // reload stays, in the model or here.
            modelFiles.rollbackLoad()
            throw error
        }
        Log.info("reloaded model files: \(report.loaded.count) loaded, \(modelFiles.skipped.count) skipped, \(report.retired.count) keys left the bus (their stored values are kept)")
        logSkippedModelFiles()
        logLayerProblems()
        return modelFiles.skipped + Service.skipped(model.layerProblems)
    }

    /// `CLOCK_MONOTONIC` in microseconds, as systemd's `MONOTONIC_USEC=` wants it with RELOADING=1.
    static func monotonicMicroseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1_000
    }

    private func openDatabase(_ path: String) throws(PropBusError) -> SQLiteStore {
        do {
            // A new store is created once the name is owned (start()).
            return try SQLiteStore(path: path, createLazily: true)
        } catch {
            // Only damage is worth setting the file aside; a full disk or a permission is not.
            guard options.recover, SQLiteStore.isCorruption(error) else {
                guard SQLiteStore.isCorruption(error) else { throw error }
                throw PropBusError(error.code, error.message + "\npropbusd: start it with --recover to move the damaged files aside (they are kept) and start empty")
            }
            let moved = try SQLiteStore.moveAside(path)
            Log.info(error.message)
            Log.info("--recover: kept the damaged files as \(moved.joined(separator: ", ")); starting with an empty store")
            return try SQLiteStore(path: path)
        }
    }

    /// Opens the store (``openStore()``) on this thread, hands the daemon over to its queue, then
    /// starts serving (``start(_:bus:)``) in the background; the caller runs the main queue
    /// (`dispatchMain`).
    static func launch(options: DaemonOptions, notifier: SystemdNotifier) {
        let daemon = Daemon(options: options, notifier: notifier)
        daemon.openStore()
        // The daemon is the queue's from here on.
        let bound = LoopBound.handOver(daemon, to: daemon.queue)
        Task { await start(bound, bus: options.bus) }
    }

    /// Starts serving; on failure prints why and exits.
    ///
    /// READY=1 goes to systemd only once every object is exported and the name is owned: a unit
    /// ordered after propbusd.service, or a client woken by it, finds the daemon complete.
    private static func start(_ bound: LoopBound<Daemon>, bus: BusAddress) async {
        let queue = bound.queue
        // From here on SIGTERM shuts down cleanly, even before the name is owned.
        queue.async { bound.value.installSignalHandlers() }
        do {
            let connection = try await Connection.connect(to: bus, queue: queue)
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
                queue.async {
                    do {
                        try bound.value.export(on: connection)
                        continuation.resume()
                    } catch {
                        continuation.resume(throwing: error)
                    }
                }
            }
            for rule in Service.matchRules { try await connection.addMatch(rule) }
            let reply = try await connection.requestName(Service.busName)
            guard reply == .primaryOwner || reply == .alreadyOwner else {
                Self.fail("the name \(Service.busName) is already owned on this bus", code: 1)
            }
            queue.async { bound.value.serve() }
        } catch let error as DBusError {
            Self.fail("cannot start: \(error.name): \(error.message)", code: 1)
        } catch {
            Self.fail("cannot start: \(error)", code: 1)
        }
    }

    /// The first step of ``start(_:bus:)`` once connected, on the queue: makes and exports the
    /// service, before the name is owned.
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
        service = Service(connection: connection, model: model, store: store, commands: commands, options: serviceOptions)
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

    /// The last step of ``start(_:bus:)`` once the name is owned, on the queue: commits what start-up
    /// changed, starts the fleet and tells systemd.
    private func serve() {
        dispatchPrecondition(condition: .onQueue(queue))
        // A SIGTERM during start-up already said STOPPING=1; READY=1 would contradict it.
        guard !stopping else { return }
        // Fleet keys are plain local keys without --fleet, and may be written here: the
        // next start with --fleet must read the fleet in full (not resume from the
        // cursor), so that the fleet's values win. Cleared in the same commit as the model
        // files' declarations, which may already change fleet keys.
        let forgetsFleetCursor = options.fleet == nil && fleetCursor > 0
        if forgetsFleetCursor { model?.storeChanges.saveExternalCursor(0) }
        // Ours now: what the model files and stored bindings changed becomes durable.
        do throws(DBusError) { try service?.releaseCommits() } catch {
            Self.fail("cannot commit the model files' declarations: \(error.message)", code: 1)
        }
        do throws(PropBusError) { try (store as? SQLiteStore)?.createIfNeeded() } catch {
            Self.fail(error.message, code: 1)
        }
        // Leases that ended while the daemon was stopped end now, announced.
        service?.startLeases()
        if let configuration = options.fleet, let service {
            // After the name is owned: hosts boot offline, serving their mirror, and
            // the fleet connects in the background.
            do throws(FleetConfigurationError) {
                let fleet = try Fleet(configuration: configuration, service: service, revisions: fleetRevisions, cursor: fleetCursor,
                                      source: fleetSource)
                service.fleet = fleet
                fleet.start()
            } catch {
                Self.fail(error.message, code: 1)
            }
        } else if forgetsFleetCursor {
            fleetCursor = 0
            Log.info("started without --fleet on a store that mirrors a fleet: the next start with --fleet reads the fleet's keys again, and the fleet's values replace what is written here meanwhile")
        }
        Log.info("ready: serving \(service?.propertyCount ?? 0) properties as \(Service.busName)")
        notifier.notify("READY=1\nSTATUS=Serving \(service?.propertyCount ?? 0) properties as \(Service.busName)")
        startWatchdog()
    }

    private func installSignalHandlers() {
        dispatchPrecondition(condition: .onQueue(queue))
        for number in [SIGTERM, SIGINT] {
            // libdispatch on Linux takes the signal itself; the source must live as long as we do.
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler { [self] in stop() }
            source.resume()
            signalSources.append(source)
        }
        // SIGHUP reloads the model files (systemctl reload); its default action would kill us.
        let hangup = DispatchSource.makeSignalSource(signal: SIGHUP, queue: queue)
        hangup.setEventHandler { [self] in
            reload(because: "SIGHUP") { result in
                if case .failure(let error) = result { Log.info("reload failed: \(error.name): \(error.message)") }
            }
        }
        hangup.resume()
        signalSources.append(hangup)
    }

    /// Pings systemd's watchdog (`WatchdogSec=`) at half its period, from the connection's queue:
    /// a queue wedged in a handler or a lock stops the pings, and systemd restarts the daemon.
    private func startWatchdog() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let microseconds = notifier.watchdogMicroseconds else { return }
        let interval = DispatchTimeInterval.microseconds(Int(clamping: max(microseconds / 2, 1)))
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now(), repeating: interval, leeway: .microseconds(Int(clamping: microseconds / 20)))
        timer.setEventHandler { [notifier] in notifier.notify("WATCHDOG=1") }
        timer.resume()
        watchdog = timer
    }

    /// SIGTERM/SIGINT, in docs/install.md's order (STOPPING=1, refuse new calls, end executions,
    /// commit, release the name, checkpoint). Runs on the queue between dispatch rounds, so
    /// every call handled so far has been committed and answered.
    private func stop() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !stopping else { return }
        stopping = true
        // 1. systemd hears it first, also when the signal came from someone else.
        notifier.notify("STOPPING=1\nSTATUS=Shutting down")
        Log.info("stopping")
        guard let connection, let service else { exit(0) }
        // 2. Calls arriving from now on are answered NoServer, unhandled: nothing may change
        //    after the final commit.
        service.stopAcceptingCalls()
        // 3. Cancel running executions (their callers get Cancelled) and wait for their process
        //    groups, a grace period at most: systemd's KillMode=mixed leaves them to us.
        service.stopAllExecutions { [self] in finishStopping(connection, service) }
    }

    /// Steps 4–6 of ``stop()``, once no execution runs.
    private func finishStopping(_ connection: Connection, _ service: Service) {
        // Give up the fleet's presence key now, so other hosts see this one leave at once.
        service.fleet?.stop()
        // 4. Commit what changed outside a round.
        let status: Int32
        do {
            try service.commitBeforeExit()
            status = 0
        } catch {
            Log.info("the final commit failed, the last changes are lost: \(error.name): \(error.message)")
            status = 1
        }
        // A clean exit leaves a checkpointed store: no WAL for the next start to replay.
        (store as? SQLiteStore)?.close()
        // 5. Release the name before closing, so NameOwnerChanged tells clients at once and
        //    activation can start a new instance; bounded, so a wedged bus cannot hold us.
        Task {
            _ = try? await connection.call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                           interface: "org.freedesktop.DBus", member: "ReleaseName",
                                           arguments: [.string(Service.busName)], timeoutMilliseconds: 5_000)
            connection.flush()
            Log.info("stopped")
            // 6.
            exit(status)
        }
    }

    static func describe(_ bus: BusAddress) -> String {
        switch bus {
        case .session: "session"
        case .system: "system"
        case .address(let address): address
        }
    }

    static func fail(_ message: String, code: Int32) -> Never {
        Log.info(message)
        exit(code)
    }
}
