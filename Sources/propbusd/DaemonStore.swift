import PropBus
import PropBusSystem

/// The daemon's store: the ports the model and the service are given, and the lifecycle of
/// the file behind them, which only the daemon knows is SQLite.
///
/// The file is opened by the "store" step (only read), created by the start-up commit once the
/// name is owned (a daemon that loses the name leaves no file behind), and closed by that
/// step's stop after the final commit (a clean exit leaves a checkpointed file: no WAL for the
/// next start to replay). The concrete store is kept as its own type for that, so nothing finds
/// it again by a downcast of a port.
final class DaemonStore {
    /// Where rounds are committed and what start-up loads.
    let store: any PropertyStore
    /// Change history and refused attempts; `nil` in memory.
    let history: (any HistoryStore)?
    /// The file; `nil` with `--in-memory`.
    private let database: SQLiteStore?

    /// A store that keeps nothing across runs, and no history (`--in-memory`).
    init() {
        store = MemoryStore()
        history = nil
        database = nil
    }

    /// The store at `path`, opened lazily: a new file is created by ``createIfNeeded()``.
    /// A damaged file is an error naming it, unless `recover`: then it is moved aside (kept,
    /// each move logged through `log`) and the daemon starts empty.
    init(path: String, history options: HistoryOptions, recover: Bool, log: (String) -> Void) throws(PropBusError) {
        let database = try Self.open(path, recover: recover, log: log)
        database.history.options = options
        self.database = database
        store = database
        history = database.history
    }

    private static func open(_ path: String, recover: Bool, log: (String) -> Void) throws(PropBusError) -> SQLiteStore {
        do {
            // A new store is created once the name is owned (createIfNeeded()).
            return try SQLiteStore(path: path, createLazily: true)
        } catch {
            // Only damage is worth setting the file aside; a full disk or a permission is not.
            guard recover, SQLiteStore.isCorruption(error) else {
                guard SQLiteStore.isCorruption(error) else { throw error }
                throw PropBusError(error.code, error.message + "\npropbusd: start it with --recover to move the damaged files aside (they are kept) and start empty")
            }
            let moved = try SQLiteStore.moveAside(path)
            log(error.message)
            log("--recover: kept the damaged files as \(moved.joined(separator: ", ")); starting with an empty store")
            return try SQLiteStore(path: path)
        }
    }

    /// Writes the file if it does not exist yet (nothing in memory): once the name is owned.
    func createIfNeeded() throws(PropBusError) {
        try database?.createIfNeeded()
    }

    /// Closes the file after the final commit.
    func close() {
        database?.close()
    }
}
