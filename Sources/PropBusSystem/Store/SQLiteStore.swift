import CSQLite
import DBusValues
import Glibc
import PropBus

/// The durable store: one SQLite database in WAL mode with `synchronous=FULL`.
///
/// A round's rows come as one value (``WriteSet/store``, last write per key already kept) and
/// ``commit(_:durability:)`` writes them in one `BEGIN IMMEDIATE … COMMIT` transaction, so a
/// dispatch round costs one WAL fsync however many writes it holds (group commit). Nothing is
/// pending between commits. The external bookkeeping (``StoreChanges/externalRevisions``) lives
/// in the `fleet_keys` table and the `fleet_cursor`/`fleet_source` rows of `meta`: the names of
/// the schema that first held them.
///
/// Single owner, like the model: the service confines it to its connection's queue.
public final class SQLiteStore: PropertyStore {
    /// The schema version this release writes (`PRAGMA user_version`).
    public static let schemaVersion: Int64 = 12
    /// The database file name inside the state directory.
    public static let fileName = "propbus.db"
    /// `PRAGMA application_id` of a propbus store ('PBUS'), so that another application's
    /// SQLite file at the same path is recognised and refused rather than altered.
    public static let applicationID: Int32 = 0x5042_5553
    /// The tables a propbus store holds; a database with other tables belongs to someone else.
    static let tableNames: Set<String> = ["definitions", "stored_values", "meta", "bindings", "commands", "fleet_keys", "history", "history_recent", "history_caller", "history_key", "history_index", "history_by_change", "history_by_uid", "history_denied", "leases"]

    /// The database file.
    public let path: String
    /// `nil` only for a store created lazily (``init(path:createLazily:)``) until its first commit.
    // Internal, not private: the row writers and readers are extensions in other files.
    var database: SQLiteDatabase!
    var statements: Statements!
    /// A store written before `application_id` existed gets it with its next commit: opening
    /// writes nothing (see the daemon's start-up rule).
    private var pendingApplicationID = false
    /// The revision ceiling this connection last committed.
    private var committedCeiling: UInt64?
    /// Change history, written with each commit and read by the service (``HistoryStore``);
    /// what it keeps is ``SQLiteHistory/options``.
    public let history: SQLiteHistory

    struct Statements {
        var saveDefinition: SQLiteStatement
        var removeDefinition: SQLiteStatement
        var saveValue: SQLiteStatement
        var removeValue: SQLiteStatement
        var saveRevision: SQLiteStatement
        var saveNextBindingID: SQLiteStatement
        var saveBinding: SQLiteStatement
        var removeBinding: SQLiteStatement
        var saveCommand: SQLiteStatement
        var removeCommand: SQLiteStatement
        var saveExternalRevisions: SQLiteStatement
        var removeExternalRevisions: SQLiteStatement
        var saveExternalCursor: SQLiteStatement
        var saveLease: SQLiteStatement
        var removeLease: SQLiteStatement
        var saveNextLeaseHandle: SQLiteStatement
        var begin: SQLiteStatement
        var commit: SQLiteStatement
    }

    /// Opens (creating if needed) the database at `path`, checks its integrity and migrates its
    /// schema. A corrupt or unreadable file throws `StoreFailed` naming it.
    ///
    /// With `createLazily`, a store that does not exist yet is created by the first commit or
    /// by ``createIfNeeded()`` instead (it loads as empty): the daemon writes nothing to its store before it owns its
    /// name, not even a new file.
    public init(path: String, createLazily: Bool = false) throws(PropBusError) {
        self.path = path
        history = SQLiteHistory(path: path)
        if createLazily, access(path, F_OK) != 0 { return }
        try open()
    }

    /// Creates a store that was left to be created lazily and has not been yet (the daemon
    /// calls this once it owns its name, so the file exists from then on).
    public func createIfNeeded() throws(PropBusError) {
        if database == nil { try open() }
    }

    private func open() throws(PropBusError) {
        do {
            // Kept only once everything below succeeded: a failed lazy open is tried again.
            let database = try SQLiteDatabase(path: path)
            // An unreadable or non-database file fails here, on the first statement that reads it.
            let check = try database.textRows("PRAGMA quick_check")
            guard check == ["ok"] else {
                throw PropBusError(.storeFailed, "the store \(path) is corrupt: integrity check reported: \(check.prefix(5).joined(separator: "; "))")
            }
            let application = Int32(try database.textRows("PRAGMA application_id").first ?? "0") ?? 0
            let tables = Set(try database.textRows("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"))
            if application != 0, application != Self.applicationID {
                throw PropBusError(.storeFailed, "\(path) is not a propbus store: it is another application's SQLite database (application_id \(application)); move it away or choose another --state-dir")
            }
            if application == 0, !tables.isSubset(of: Self.tableNames) {
                throw PropBusError(.storeFailed, "\(path) is not a propbus store: it is an SQLite database with other tables (\(tables.subtracting(Self.tableNames).sorted().prefix(5).joined(separator: ", "))); move it away or choose another --state-dir")
            }
            pendingApplicationID = application == 0 && !tables.isEmpty
            let mode = try database.textRows("PRAGMA journal_mode=WAL")
            guard mode == ["wal"] else {
                throw PropBusError(.storeFailed, "the store \(path) cannot use WAL mode (journal_mode is \(mode.first ?? "unknown"))")
            }
            try database.execute("PRAGMA synchronous=FULL")
            // Only another process (e.g. someone's sqlite3 shell) can hold the write lock.
            try database.execute("PRAGMA busy_timeout=1000")
            try StoreSchema.migrate(database, path: path)
            self.database = database
            statements = Statements(
                saveDefinition: try database.prepare("INSERT OR REPLACE INTO definitions (key, type, default_value, options) VALUES (?1, ?2, ?3, ?4)"),
                removeDefinition: try database.prepare("DELETE FROM definitions WHERE key = ?1"),
                saveValue: try database.prepare("INSERT OR REPLACE INTO stored_values (key, value, revision) VALUES (?1, ?2, ?3)"),
                removeValue: try database.prepare("DELETE FROM stored_values WHERE key = ?1"),
                saveRevision: try database.prepare("INSERT OR REPLACE INTO meta (name, value) VALUES ('revision', ?1)"),
                saveNextBindingID: try database.prepare("INSERT OR REPLACE INTO meta (name, value) VALUES ('next_binding', ?1)"),
                saveBinding: try database.prepare("INSERT OR REPLACE INTO bindings (id, key, target, options) VALUES (?1, ?2, ?3, ?4)"),
                removeBinding: try database.prepare("DELETE FROM bindings WHERE id = ?1"),
                saveCommand: try database.prepare("INSERT OR REPLACE INTO commands (key, options) VALUES (?1, ?2)"),
                removeCommand: try database.prepare("DELETE FROM commands WHERE key = ?1"),
                saveExternalRevisions: try database.prepare("INSERT OR REPLACE INTO fleet_keys (key, value_revision, definition_revision) VALUES (?1, ?2, ?3)"),
                removeExternalRevisions: try database.prepare("DELETE FROM fleet_keys WHERE key = ?1"),
                saveExternalCursor: try database.prepare("INSERT OR REPLACE INTO meta (name, value) VALUES ('fleet_cursor', ?1)"),
                saveLease: try database.prepare("""
                    INSERT OR REPLACE INTO leases (handle, key, value, holder, uid, pid, comm, since, expires)
                    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                    """),
                removeLease: try database.prepare("DELETE FROM leases WHERE handle = ?1"),
                saveNextLeaseHandle: try database.prepare("INSERT OR REPLACE INTO meta (name, value) VALUES ('next_lease', ?1)"),
                // Prepared once: a fleet host commits once per remote change, and parsing these
                // each time was a visible part of that.
                begin: try database.prepare("BEGIN IMMEDIATE"),
                commit: try database.prepare("COMMIT"))
            try history.attach(database)
        } catch let error as PropBusError {
            throw error
        } catch let error as SQLiteError {
            throw Self.describe(error, path: path)
        } catch {
            throw PropBusError(.storeFailed, "the store \(path) is corrupt or unreadable: \(error)")
        }
    }

    /// Tells damage apart from the disk or the permissions: only damage is "corrupt" (and only
    /// then does the daemon suggest `--recover`, which sets the file aside).
    static func describe(_ error: SQLiteError, path: String) -> PropBusError {
        switch error.code & 0xff {
        case SQLITE_CORRUPT, SQLITE_NOTADB:
            return PropBusError(.storeFailed, "the store \(path) is corrupt: \(error)")
        case SQLITE_FULL:
            return PropBusError(.storeFailed, "cannot use the store \(path): the disk is full (\(error)); free some space and start again")
        case SQLITE_READONLY, SQLITE_PERM, SQLITE_AUTH, SQLITE_CANTOPEN:
            return PropBusError(.storeFailed, "cannot open the store \(path): permission denied or read-only (\(error)); check the owner and mode of the file and its directory")
        case SQLITE_IOERR:
            return PropBusError(.storeFailed, "cannot read the store \(path): input/output error (\(error)); check the disk")
        default:
            return PropBusError(.storeFailed, "cannot open the store \(path): \(error)")
        }
    }

    /// Whether a failure to open names a damaged store (the case for `--recover`), rather than
    /// a full disk, a permission or an I/O error.
    public static func isCorruption(_ error: PropBusError) -> Bool {
        error.message.contains(" is corrupt")
    }

    /// Checkpoints the WAL into the database and empties it, for a clean exit.
    public func close() {
        try? database?.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    }

    // MARK: PropertyStore

    public func load() throws(PropBusError) -> StoredState {
        var state = StoredState()
        guard database != nil else { return state }
        do {
            // Sized once: arrays grown by doubling leave freed blocks behind in the heap, which
            // a 100k-property daemon kept as resident memory.
            let count = Int(try database.textRows("SELECT count(*) FROM definitions").first ?? "0") ?? 0
            state.definitions.reserveCapacity(count)
            state.definitionValues.reserveCapacity(count)
            // Each definition with its stored value, in one pass: the values come aligned with
            // the definitions (StoredState.definitionValues), not through a dictionary by key.
            let definitions = try database.prepare("""
                SELECT d.key, d.type, d.default_value, d.options, v.value, v.revision
                FROM definitions d LEFT JOIN stored_values v ON v.key = d.key ORDER BY d.key
                """)
            // Most definitions share their type, default and options (a model's hundreds of `i`
            // keys defaulting to 0): each distinct triple is decoded and checked once, and the
            // others are copies of it under their own key.
            var templates: [DefinitionTemplate: PropertyDefinition] = [:]
            while try definitions.step() {
                let keyText = definitions.text(0) ?? ""
                do {
                    let template = DefinitionTemplate(type: definitions.text(1) ?? "", defaultValue: definitions.blob(2), options: definitions.blob(3))
                    if var definition = templates[template] {
                        definition.key = try Key(keyText)
                        state.definitions.append(definition)
                    } else {
                        let definition = try Self.definition(key: keyText, type: template.type, defaultValue: template.defaultValue, options: template.options)
                        templates[template] = definition
                        state.definitions.append(definition)
                    }
                } catch {
                    throw PropBusError(.storeFailed, "the store \(path) holds an unreadable definition of \(keyText): \(error)")
                }
                if definitions.isNull(4) {
                    state.definitionValues.append(nil)
                    continue
                }
                do {
                    state.definitionValues.append((try ValueCodec.decode(definitions.blob(4)), UInt64(bitPattern: definitions.integer(5))))
                } catch {
                    throw PropBusError(.storeFailed, "the store \(path) holds an unreadable value of \(keyText): \(error)")
                }
            }
            templates = [:]
            // Values whose key has no definition (a model file's key not declared yet), read
            // only when there are any: counting is cheaper than a second pass over the keys.
            let valueCount = Int(try database.textRows("SELECT count(*) FROM stored_values").first ?? "0") ?? 0
            let joined = state.definitionValues.reduce(0) { $0 + ($1 == nil ? 0 : 1) }
            let values = try database.prepare("SELECT key, value, revision FROM stored_values WHERE key NOT IN (SELECT key FROM definitions)")
            while valueCount > joined, try values.step() {
                let keyText = values.text(0) ?? ""
                do {
                    let key = try Key(keyText)
                    state.values[key] = (try ValueCodec.decode(values.blob(1)), UInt64(bitPattern: values.integer(2)))
                } catch {
                    throw PropBusError(.storeFailed, "the store \(path) holds an unreadable value of \(keyText): \(error)")
                }
            }
            let revision = try database.prepare("SELECT value FROM meta WHERE name = 'revision'")
            while try revision.step() { state.revision = UInt64(bitPattern: revision.integer(0)) }
            let nextBinding = try database.prepare("SELECT value FROM meta WHERE name = 'next_binding'")
            while try nextBinding.step() { state.nextBindingID = UInt64(bitPattern: nextBinding.integer(0)) }
            let bindings = try database.prepare("SELECT id, key, target, options FROM bindings ORDER BY id")
            while try bindings.step() {
                let id = UInt64(bitPattern: bindings.integer(0))
                do {
                    state.bindings.append(try Self.binding(id: id, key: bindings.text(1) ?? "", to: bindings.text(2) ?? "",
                                                           options: bindings.blob(3)))
                } catch {
                    throw PropBusError(.storeFailed, "the store \(path) holds an unreadable binding \(id): \(error)")
                }
            }
            let fleet = try database.prepare("SELECT key, value_revision, definition_revision FROM fleet_keys")
            while try fleet.step() {
                if let key = try? Key(fleet.text(0) ?? "") {
                    state.externalRevisions[key] = ExternalRevisions(value: fleet.integer(1), definition: fleet.integer(2))
                }
            }
            let cursor = try database.prepare("SELECT value FROM meta WHERE name = 'fleet_cursor'")
            while try cursor.step() { state.externalCursor = cursor.integer(0) }
            let source = try database.prepare("SELECT value FROM meta WHERE name = 'fleet_source'")
            while try source.step() { state.externalSource = source.text(0) }
            try loadLeases(into: &state)
            let commands = try database.prepare("SELECT key, options FROM commands ORDER BY key")
            while try commands.step() {
                let keyText = commands.text(0) ?? ""
                do {
                    guard let options = try ValueCodec.decode(commands.blob(1)).stringKeyedEntries else {
                        throw ValueCodecError("options are not an a{sv}")
                    }
                    state.commands.append((try Key(keyText), options))
                } catch {
                    throw PropBusError(.storeFailed, "the store \(path) holds an unreadable command \(keyText): \(error)")
                }
            }
        } catch let error as PropBusError {
            throw error
        } catch {
            throw PropBusError(.storeFailed, "cannot read the store \(path): \(error)")
        }
        return state
    }

    /// Whether the connection is at `synchronous=NORMAL` (set for replayable commits).
    private var synchronousIsNormal = false

    /// Writes the round's rows (``WriteSet/store``) in one `BEGIN IMMEDIATE … COMMIT`, straight
    /// from the value, with the round's history in the same transaction (transient keys' in
    /// memory). A round with no rows touches no disk; one with only a revision reservation
    /// writes that row alone.
    public func commit(_ writeSet: WriteSet, durability: StoreChanges.Durability) throws(PropBusError) {
        let changes = writeSet.store
        let recorded = history.options.isEnabled && !writeSet.isEmpty ? writeSet : nil
        guard changes.hasWrites || pendingApplicationID else {
            // A round of transient keys only: the reservation alone (one small write per block
            // of revisions). On a full or read-only disk the round fails: its revisions would
            // come again after a crash, and a CompareAndSet holding one would succeed on another
            // value.
            if let reservation = changes.reservation { try reserve(through: reservation) }
            if let recorded { history.committed(recorded) }
            return
        }
        if database == nil { try open() }
        var ceiling: UInt64?
        do {
            try useSynchronous(normal: durability == .replayable)
            try statements.begin.run([])
            if pendingApplicationID { try database.execute("PRAGMA application_id = \(Self.applicationID)") }
            // Sorted, so a round's writes touch B-tree pages in order.
            for (key, write) in changes.definitions.sorted(by: { $0.key < $1.key }) {
                switch write {
                case .save(let definition):
                    try statements.saveDefinition.run([
                        .text(key.text), .text(definition.type.signature),
                        .blob(ValueCodec.encode(definition.defaultValue)), .blob(ValueCodec.encode(Self.options(of: definition))),
                    ])
                case .delete:
                    try statements.removeDefinition.run([.text(key.text)])
                }
            }
            for (key, write) in changes.values.sorted(by: { $0.key < $1.key }) {
                switch write {
                case .save(let stored):
                    // Encoded once for the value and its history row.
                    let bytes = recorded == nil ? ValueCodec.encode(stored.value) : try history.encodeStored(stored.value, of: key)
                    try statements.saveValue.run([.text(key.text), .blob(bytes), .integer(Int64(bitPattern: stored.revision))])
                case .delete:
                    try statements.removeValue.run([.text(key.text)])
                }
            }
            if changes.revision != nil || changes.reservation != nil {
                ceiling = max(changes.revision ?? 0, changes.reservation ?? 0)
                // The model records its ceiling with every durable write; rewriting the same
                // value would only add a page to the commit.
                if ceiling != committedCeiling { try statements.saveRevision.run([.integer(Int64(bitPattern: ceiling!))]) }
            }
            if let next = changes.nextBindingID { try statements.saveNextBindingID.run([.integer(Int64(bitPattern: next))]) }
            for (id, write) in changes.bindings.sorted(by: { $0.key < $1.key }) {
                switch write {
                case .save(let binding):
                    try statements.saveBinding.run([.integer(Int64(bitPattern: id)), .text(binding.key.text), .text(binding.to.text),
                                                    .blob(ValueCodec.encode(Self.options(of: binding)))])
                case .delete:
                    try statements.removeBinding.run([.integer(Int64(bitPattern: id))])
                }
            }
            for (key, write) in changes.commands.sorted(by: { $0.key < $1.key }) {
                switch write {
                case .save(let options): try statements.saveCommand.run([.text(key.text), .blob(ValueCodec.encode(.vardict(options)))])
                case .delete: try statements.removeCommand.run([.text(key.text)])
                }
            }
            for (key, write) in changes.externalRevisions.sorted(by: { $0.key < $1.key }) {
                switch write {
                case .save(let revisions):
                    try statements.saveExternalRevisions.run([.text(key.text), .integer(revisions.value), .integer(revisions.definition)])
                case .delete:
                    try statements.removeExternalRevisions.run([.text(key.text)])
                }
            }
            if let cursor = changes.externalCursor { try statements.saveExternalCursor.run([.integer(cursor)]) }
            try writeLeases(changes)
            // In the same transaction as the values: history and values never disagree.
            if let recorded { try history.record(recorded) }
            if let source = changes.externalSource {
                // Rare (a first contact, or a move): not worth a prepared statement.
                try database.prepare("INSERT OR REPLACE INTO meta (name, value) VALUES ('fleet_source', ?1)").run([.text(source)])
            }
            try statements.commit.run([])
        } catch {
            if database.inTransaction { try? database.execute("ROLLBACK") }
            if recorded != nil { history.commitFailed() }
            throw PropBusError(.storeFailed, "cannot commit to the store \(path): \(error)")
        }
        if let ceiling { committedCeiling = ceiling }
        if let recorded { history.committed(recorded) }
        pendingApplicationID = false
    }

    /// Writes a revision ceiling alone (a round of transient keys that used up its block).
    private func reserve(through reservation: UInt64) throws(PropBusError) {
        if database == nil { try open() }
        do {
            try useSynchronous(normal: false)
            try statements.begin.run([])
            try statements.saveRevision.run([.integer(Int64(bitPattern: reservation))])
            try statements.commit.run([])
            committedCeiling = reservation
        } catch {
            if database.inTransaction { try? database.execute("ROLLBACK") }
            throw PropBusError(.storeFailed, "cannot reserve revisions up to \(reservation) in the store \(path): \(error)")
        }
    }

    /// Sets `synchronous` for the next commit: NORMAL for a mirror-only one, FULL otherwise.
    /// Switched only when the kind of commit changes (a fleet host's remote changes come in
    /// runs). A later full commit's fsync covers a mirror-only one's pages too: WAL frames are
    /// written in order.
    private func useSynchronous(normal: Bool) throws(SQLiteError) {
        guard normal != synchronousIsNormal else { return }
        do {
            try database.execute(normal ? "PRAGMA synchronous=NORMAL" : "PRAGMA synchronous=FULL")
            synchronousIsNormal = normal
        } catch where normal {
            // Staying at FULL is only slower.
        }
    }
}
