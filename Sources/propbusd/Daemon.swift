import DBus
import Dispatch
import FoundationEssentials
import Glibc
import PropBus
import PropBusService

/// The daemon's lifecycle: connect, export, own the name, and shut down on a signal.
///
/// `@unchecked Sendable`: `store` and `model` are written once by ``openStore()`` before
/// ``start()`` and afterwards touched only on the connection's queue; `service` and
/// `connection` are written once during start-up on that queue and read afterwards only there.
final class Daemon: @unchecked Sendable {
    let options: DaemonOptions
    let queue = DispatchQueue(label: "org.propbus.propbusd")
    private var connection: Connection?
    private var service: Service?
    private var store: PropertyStore?
    private var model: PropertyModel?
    private var commands: CommandTable?
    private var signalSources: [DispatchSourceSignal] = []

    init(options: DaemonOptions) { self.options = options }

    /// Opens and checks the store and loads the model, before anything touches the bus: a
    /// damaged store must stop the daemon before it owns its name. On failure prints why and exits.
    func openStore(environment: [String: String] = ProcessInfo.processInfo.environment) {
        do {
            let store: PropertyStore
            if options.inMemory {
                store = MemoryStore()
            } else {
                let systemBus = if case .system = options.bus { true } else { false }
                let directory = StateDirectory.resolve(environment: environment, option: options.stateDirectory, systemBus: systemBus)
                try StateDirectory.create(directory)
                store = try openDatabase(directory + "/" + SQLiteStore.fileName)
            }
            let model = try PropertyModel(store: store, limits: options.limits)
            let commands = CommandTable(model: model, store: store, maximumRunning: options.maximumExecutions)
            for (key, stored) in model.storedCommands {
                do { _ = try commands.create(key: key.text, options: stored) } catch {
                    Diagnostics.write("propbusd: stored command \(key) could not be created again: \(error.message)\n")
                }
            }
            try loadModelFiles(into: model, commands: commands, environment: environment)
            // Stored bindings start as they were made: the leading side wins.
            for (binding, error) in model.resynchronizeBindings().failures {
                Diagnostics.write("propbusd: binding \(binding.id) (\(binding.key) ↔ \(binding.to)) could not be synchronized at startup: \(error.message)\n")
            }
            // Declarations are applied before the bus is reached, so commit them here.
            try store.commit()
            model.commitRound()
            commands.commitRound()
            self.model = model
            self.commands = commands
            self.store = store
        } catch {
            Self.fail(error.message, code: 1)
        }
    }

    /// Registers what the config directory's model files and `--model` files declare.
    private func loadModelFiles(into model: PropertyModel, commands: CommandTable, environment: [String: String]) throws(PropBusError) {
        let systemBus = if case .system = options.bus { true } else { false }
        let paths = ModelFile.files(in: ModelFile.configDirectory(environment: environment, systemBus: systemBus)) + options.models
        for path in paths {
            let file = try ModelFile(contentsOf: path)
            _ = try file.apply(to: model, commands: commands)
        }
    }

    private func openDatabase(_ path: String) throws(PropBusError) -> SQLiteStore {
        do {
            return try SQLiteStore(path: path)
        } catch {
            guard options.recover else {
                throw PropBusError(error.code, error.message + "\npropbusd: start it with --recover to move the damaged files aside (they are kept) and start empty")
            }
            let moved = try SQLiteStore.moveAside(path)
            Diagnostics.write("propbusd: \(error.message)\npropbusd: --recover: kept the damaged files as \(moved.joined(separator: ", ")); starting with an empty store\n")
            return try SQLiteStore(path: path)
        }
    }

    /// Starts serving; on failure prints why and exits.
    func start() async {
        do {
            let connection = try await Connection.connect(to: options.bus, queue: queue)
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
                queue.async { [self] in
                    do {
                        guard let store, let model else { throw PropBusError(.storeFailed, "the store was not opened") }
                        var serviceOptions = options.service
                        if options.enforcesAccess {
                            // The propbus group is resolved once, now; writers options on each check.
                            serviceOptions.access = .enforcing(daemonUserID: geteuid())
                        }
                        // Export everything before owning the name: no client may see a half-built daemon.
                        service = Service(connection: connection, model: model, store: store, commands: commands, options: serviceOptions)
                        self.connection = connection
                        connection.onDisconnect = {
                            Self.fail("lost the connection to the bus", code: 1)
                        }
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
            installSignalHandlers()
            SystemdNotifier.notify("READY=1\nSTATUS=Serving \(Service.busName)")
        } catch let error as DBusError {
            Self.fail("cannot start: \(error.name): \(error.message)", code: 1)
        } catch {
            Self.fail("cannot start: \(error)", code: 1)
        }
    }

    private func installSignalHandlers() {
        for number in [SIGTERM, SIGINT] {
            // libdispatch on Linux takes the signal itself; the source must live as long as we do.
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler { [self] in stop() }
            source.resume()
            signalSources.append(source)
        }
    }

    /// SIGTERM/SIGINT: tell systemd, cancel running executions (their callers get
    /// `Cancelled`), release the name, flush, exit 0.
    private func stop() {
        SystemdNotifier.notify("STOPPING=1")
        guard let connection, let service else { exit(0) }
        service.stopAllExecutions {
            Task {
                try? await connection.releaseName(Service.busName)
                connection.flush()
                exit(0)
            }
        }
    }

    static func fail(_ message: String, code: Int32) -> Never {
        Diagnostics.write("propbusd: \(message)\n")
        exit(code)
    }
}
