import DBus
import Dispatch
import Glibc
import PropBus
import PropBusFleet
import PropBusModelFiles
import PropBusSystem
import PropBusService
import SystemKit

/// The daemon's pieces, started in order by a ``Lifecycle`` and stopped in reverse order: the
/// state directory's lock, the store, the model files, the signal handlers, the bus connection
/// with every object exported, the name, the start-up's commit, the fleet, the renders and serving
/// (READY=1, the watchdog).
///
/// Made on the main thread, then handed over to ``queue`` by ``launch(options:notifier:)``:
/// from then on everything is the queue's, and work that runs elsewhere (reading model files,
/// the bus round trips) hops back through a ``LoopBound``.
final class Daemon {
    let options: DaemonOptions
    let notifier: SystemdNotifier
    let queue = DispatchQueue(label: "org.propbus.propbusd")
    private var lifecycle: Lifecycle?
    var connection: Connection?
    var service: Service?
    /// The store's ports and its file's lifecycle (opened, created, closed).
    var store: DaemonStore?
    /// The state directory's lock, held until exit: one daemon per store.
    private var lock: StateDirectoryLock?
    /// The state directory, resolved when locked; `nil` with `--in-memory`.
    private var stateDirectory: String?
    /// What the store held at start, from the store step to the model step.
    private var loaded: StoredState?
    var model: PropertyModel?
    var commands: CommandTable?
    /// The fleet (`--fleet`), the service's write gate once started.
    private var fleet: Fleet?
    /// The renders (docs/render.md): made with the service, started after the fleet.
    var renders: DaemonRenders?
    /// The Manager's fleet members, with or without `--fleet` (made with the service); told of
    /// the fleet when it starts.
    var fleetMembers: FleetManagerMembers?
    /// The fleet mirror's etcd revisions and cursor, as the store loaded them.
    private var fleetRevisions: [Key: FleetRevisions] = [:]
    private var fleetCursor: Int64 = 0
    private var fleetSource: String?
    /// Set by the start-up's commit: this start without --fleet cleared a fleet mirror's cursor.
    private var forgetsFleetCursor = false
    let modelFiles = ModelFileSet()
    /// The model files to read: the config directory's, then `--model` ones (read again at each reload).
    private var modelPaths: () -> [String] = { [] }
    /// Reads and parses model files for a reload, one reload at a time, so that a slow disk or
    /// a big file does not hold up the calls on ``queue``.
    private let modelFileReader = DispatchQueue(label: "org.propbus.propbusd.model-files")
    private var signalSources: [DispatchSourceSignal] = []
    private var watchdog: DispatchSourceTimer?
    private var stopping = false
    private let environment: [String: String]

    init(options: DaemonOptions, notifier: SystemdNotifier, environment: [String: String] = Environment.current) {
        self.options = options
        self.notifier = notifier
        self.environment = environment
    }

    /// The pieces in start order. Until the name is owned nothing is written (the store's
    /// declarations stay buffered, a new store file is not created) and nothing is announced,
    /// so the stops of the first five only let go; the stops from the name on undo the
    /// start in today's shutdown order: STOPPING=1 (said by ``stop()`` before the first stop),
    /// refuse calls and end executions, leave the fleet, the final commit, ReleaseName, flush.
    private func components() -> [Component] {
        [
            // Before the store is opened: a second daemon must not even read a store in use.
            // Held until exit (the kernel lets go of the flock).
            Step("state directory lock", start: { [unowned self] () throws(LifecycleError) in try lockStateDirectory() }),
            // A damaged store must stop the daemon before it touches the bus. Only read: the
            // final commit and the checkpoint belong to the start-up's commit, after the name.
            Step("store", start: { [unowned self] () throws(LifecycleError) in try openStore() }),
            Step("model files", start: { [unowned self] () throws(LifecycleError) in try loadModel() }),
            // From here on SIGTERM shuts down cleanly, even before the name is owned; one that
            // came earlier waited, blocked since main's first line (HandledSignals), and is
            // delivered now. The sources stay until exit.
            Step("signal handlers", start: { [unowned self] in installSignalHandlers() }),
            Step("bus connection", start: { [unowned self] done in connect(then: done) },
                 stop: { [unowned self] done in flush(then: done) }),
            // Bounded: a wedged bus cannot hold the exit.
            Step("bus name", stopTimeout: .milliseconds(Self.releaseNameTimeout),
                 start: { [unowned self] done in requestName(then: done) },
                 stop: { [unowned self] done in releaseName(then: done) }),
            Step("start-up commit", start: { [unowned self] () throws(LifecycleError) in try commitStartUp() },
                 stop: { [unowned self] () throws(LifecycleError) in try commitBeforeExit() }),
            Step("fleet", start: { [unowned self] () throws(LifecycleError) in try startFleet() },
                 stop: { [unowned self] in fleet?.stop() }),
            // Renders read what start-up committed, then follow every committed round.
            Step("renders", stopTimeout: .seconds(5), start: { [unowned self] done in
                if let service { renders?.start(modelFiles.renders, service: service, queue: queue) }
                done(.success(()))
            }, stop: { [unowned self] done in
                guard let renders else { return done(nil) }
                renders.stop { done(nil) }
            }),
            Step("serving", start: { [unowned self] done in
                     serve()
                     done(.success(()))
                 },
                 stop: { [unowned self] done in stopServing(then: done) }),
        ]
    }

    /// How long ReleaseName may take at exit, in milliseconds.
    static let releaseNameTimeout = 5_000

    /// Resolves, creates and locks the state directory (nothing with `--in-memory`).
    private func lockStateDirectory() throws(LifecycleError) {
        guard !options.inMemory else { return }
        do {
            let systemBus = if case .system = options.bus { true } else { false }
            let directory = StateDirectory.resolve(environment: environment, option: options.stateDirectory, systemBus: systemBus)
            try StateDirectory.create(directory)
            lock = try StateDirectoryLock(directory: directory)
            stateDirectory = directory
        } catch {
            throw LifecycleError(code: 1, message: error.message)
        }
    }

    /// What history keeps: the options, and where callers are known (access control) each
    /// uid's `history-bytes` quota, root and the daemon's own user exempt.
    private var historyOptions: HistoryOptions {
        var history = options.history
        if options.enforcesAccess {
            history.maximumBytesPerUID = Int(clamping: options.quotas[.historyBytes] ?? Quota.historyBytes.defaultLimit)
            history.exemptUIDs = [0, geteuid()]
        }
        return history
    }

    /// Opens and checks the store: only reads.
    private func openStore() throws(LifecycleError) {
        do {
            let store: DaemonStore
            if let directory = stateDirectory {
                let path = directory + "/" + SQLiteStore.fileName
                Log.info("version \(Service.version) starting: store \(path), bus \(Self.describe(options.bus))")
                store = try DaemonStore(path: path, history: historyOptions, recover: options.recover) { Log.info($0) }
            } else {
                Log.info("version \(Service.version) starting: store in memory, bus \(Self.describe(options.bus))")
                store = DaemonStore()
            }
            let loaded = try store.store.load()
            fleetRevisions = loaded.externalRevisions
            fleetCursor = loaded.externalCursor
            fleetSource = loaded.externalSource
            self.loaded = loaded
            self.store = store
        } catch {
            throw LifecycleError(code: 1, message: error.message)
        }
    }

    /// Loads the model from the store, the model files and the layer files.
    ///
    /// Only reads and checks: what the model files and stored bindings change is committed by
    /// ``commitStartUp()`` once the name is owned, so a daemon that loses the race for the name
    /// (or the lock) leaves the store as it found it.
    private func loadModel() throws(LifecycleError) {
        guard let store = store?.store, let loaded else { throw LifecycleError(code: 1, message: "the store was not opened") }
        self.loaded = nil
        do {
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
                    if let fleet { return fleet.holdsDefinition(of: key) }
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
            let held = options.fleet != nil ? model.boundKeys { $0.scope == .fleet } : []
            for (binding, error) in model.resynchronizeBindings(holding: held).failures {
                Log.info("binding \(binding.id) (\(binding.key) ↔ \(binding.to)) could not be synchronized at startup: \(error.message)")
            }
            // The declarations stay buffered in the store until the name is owned (commitStartUp()).
            model.commitRound()
            commands.commitRound()
            self.model = model
            self.commands = commands
        } catch {
            throw LifecycleError(code: 1, message: error.message)
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
    func reload(because origin: String, then done: @escaping @Sendable (Result<[ModelFileSet.Skipped], DBusError>) -> Void) {
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
        renders?.load(modelFiles.renders)
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

    /// Makes the daemon on this thread, hands it over to its queue and starts its components
    /// there; the caller parks the main thread (``HandledSignals/parkMainThread()``). The process exits once the
    /// components are stopped again: after a start that failed (1) or a SIGTERM (0, or 1 when
    /// the final commit failed).
    static func launch(options: DaemonOptions, notifier: SystemdNotifier) {
        let daemon = Daemon(options: options, notifier: notifier)
        // The daemon is the queue's from here on.
        let bound = LoopBound.handOver(daemon, to: daemon.queue)
        daemon.queue.async { bound.value.run() }
    }

    private func run() {
        dispatchPrecondition(condition: .onQueue(queue))
        let lifecycle = Lifecycle(components(), queue: queue, log: Self.logStep)
        self.lifecycle = lifecycle
        lifecycle.start { [unowned self] status in
            if stopping { Log.info("stopped") }
            exit(status)
        }
    }

    /// The runner's lines: a step as one line ("lifecycle: stopping bus name"), so a journal
    /// shows where a start or a shutdown stopped; a failure as its own message.
    private static func logStep(_ line: String) {
        let isStep = line.hasPrefix("starting ") || line.hasPrefix("stopping ")
        Log.info(isStep ? "lifecycle: \(line)" : line)
    }

    /// Once the name is owned: what start-up changed becomes durable (a new store file is
    /// created only now), and leases that ended while the daemon was stopped end, announced.
    private func commitStartUp() throws(LifecycleError) {
        dispatchPrecondition(condition: .onQueue(queue))
        // Fleet keys are plain local keys without --fleet, and may be written here: the
        // next start with --fleet must read the fleet in full (not resume from the
        // cursor), so that the fleet's values win. Cleared in the same commit as the model
        // files' declarations, which may already change fleet keys.
        forgetsFleetCursor = options.fleet == nil && fleetCursor > 0
        if forgetsFleetCursor { model?.storeChanges.saveExternalCursor(0) }
        do throws(DBusError) { try service?.releaseCommits() } catch {
            throw LifecycleError(code: 1, message: "cannot commit the model files' declarations: \(error.message)")
        }
        do throws(PropBusError) { try store?.createIfNeeded() } catch {
            throw LifecycleError(code: 1, message: error.message)
        }
        service?.startLeases()
    }

    /// The start-up commit's stop: commits what changed outside a round, then closes the store
    /// (a clean exit leaves a checkpointed store: no WAL for the next start to replay), before
    /// the name is released.
    private func commitBeforeExit() throws(LifecycleError) {
        dispatchPrecondition(condition: .onQueue(queue))
        defer { store?.close() }
        do throws(DBusError) { try service?.commitBeforeExit() } catch {
            throw LifecycleError(code: 1, message: "the final commit failed, the last changes are lost: \(error.name): \(error.message)")
        }
    }

    /// After the name is owned: hosts boot offline, serving their mirror, and the fleet
    /// connects in the background.
    private func startFleet() throws(LifecycleError) {
        dispatchPrecondition(condition: .onQueue(queue))
        if let configuration = options.fleet, let service, let fleetMembers {
            do throws(FleetConfigurationError) {
                let fleet = try Fleet(configuration: configuration, service: service, revisions: fleetRevisions, cursor: fleetCursor,
                                      source: fleetSource)
                // The service's writes of fleet keys go through it, and the Manager answers for it.
                self.fleet = fleet
                fleetMembers.attach(fleet)
                fleet.start()
            } catch {
                throw LifecycleError(code: 1, message: error.message)
            }
        } else if forgetsFleetCursor {
            fleetCursor = 0
            Log.info("started without --fleet on a store that mirrors a fleet: the next start with --fleet reads the fleet's keys again, and the fleet's values replace what is written here meanwhile")
        }
    }

    /// The last piece: tells systemd, and pings its watchdog.
    private func serve() {
        dispatchPrecondition(condition: .onQueue(queue))
        Log.info("ready: serving \(service?.propertyCount ?? 0) properties as \(Service.busName)")
        notifier.notify("READY=1\nSTATUS=Serving \(service?.propertyCount ?? 0) properties as \(Service.busName)")
        startWatchdog()
    }

    /// Serving's stop: calls arriving from now on are answered NoServer, unhandled (nothing may
    /// change after the final commit); running executions are cancelled (their callers get
    /// Cancelled) and their process groups waited for, a grace period at most: systemd's
    /// KillMode=mixed leaves them to us. The watchdog keeps pinging until exit.
    private func stopServing(then done: @escaping (LifecycleError?) -> Void) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let service else { return done(nil) }
        service.stopAcceptingCalls()
        service.stopAllExecutions { done(nil) }
    }

    private func installSignalHandlers() {
        dispatchPrecondition(condition: .onQueue(queue))
        for number in [SIGTERM, SIGINT] {
            // libdispatch on Linux reads the signal from a signalfd (blocked, as HandledSignals
            // keeps it); the source must live as long as we do.
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

    /// SIGTERM/SIGINT, in docs/install.md's order: systemd hears STOPPING=1 first (also when
    /// the signal came from someone else), then the pieces stop in reverse order (refuse new
    /// calls and end executions, leave the fleet, commit, release the name), then exit. Runs on
    /// the queue between dispatch rounds, so every call handled so far has been committed and
    /// answered.
    private func stop() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !stopping else { return }
        stopping = true
        notifier.notify("STOPPING=1\nSTATUS=Shutting down")
        Log.info("stopping")
        lifecycle?.shutdown()
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
