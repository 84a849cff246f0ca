import DBusValues
import Glibc
import PropBus

/// What change history keeps, and for how long (`propbusd --no-history`, `--history-max-rows`,
/// `--history-max-age`).
public struct HistoryOptions: Sendable {
    /// Whether changes are recorded at all.
    public var isEnabled = true
    /// The most rows the store keeps; the oldest go first.
    public var maximumRows = 1_000_000
    /// Rows older than this many seconds go (`nil`: kept until ``maximumRows``).
    public var maximumAge: Int?
    /// The most changes of transient keys kept in memory (they are never written to disk).
    public var maximumTransientRows = 10_000
    /// The most old rows one pruning step deletes (of each bound): pruning runs between
    /// rounds in small steps of its own (``SQLiteStore/pruneHistory()``), so no call waits for it.
    public var pruneBatch = 256
    /// The most rows commits leave in `history_recent` before a step between rounds moves them
    /// all into `history` and its indexes (a step comes a few milliseconds after the commit
    /// that reached it, so they are not many more). A commit only appends to
    /// that table, which has no index: indexing a commit's rows in it would dirty a page of the
    /// `(key, revision)` index per key the commit wrote, each costing the WAL write, its
    /// checksum and a checkpoint's copy; a batch of rows shares those pages.
    public var indexBatch = 512
    /// The most changes kept per key, the latest (`nil`: no limit per key).
    public var maximumPerKey: Int?
    /// Whether refused attempts (AccessDenied) are recorded (`--history-denied`).
    public var recordsDenied = false
    /// The most refused attempts kept; the oldest go first.
    public var maximumDeniedRows = 10_000

    public init() {}
}

/// One key's change, as history shows it.
public struct HistoryRecord: Sendable {
    /// The change it belongs to (one Apply of several keys is one change): its highest revision.
    public var change: UInt64
    /// The key's revision after the change (for a deletion: the round's revision).
    public var revision: UInt64
    /// When it was committed, in nanoseconds since the epoch.
    public var time: Int64
    public var key: Key
    /// `created`, `changed`, `redefined` or `deleted`.
    public var kind: String
    /// The value before and after (`nil`: the key did not exist).
    public var oldValue: DBusValue?
    public var newValue: DBusValue?
    public var via: String
    public var caller: WriteSet.Caller?
    /// Whether the key was transient (this record lives in memory only).
    public var transient: Bool
}

/// The SQL side of history (the `history` table) and its in-memory part for transient keys.
///
/// Owned by its ``SQLiteStore``, confined like it to the service's queue.
final class HistoryTable {
    /// The two tables rows live in: `history_recent` (what commits appended since the last
    /// move, no index) and `history` (indexed). Every query reads both.
    private static let tables = ["history", "history_recent"]
    private var insert: SQLiteStatement?
    private var moveRecent: SQLiteStatement?
    private var removeMoved: SQLiteStatement?
    /// The next row's id: commits give ids themselves, so rows keep them when moved and ids
    /// grow across both tables.
    private var nextID: Int64 = 1
    /// Rows in `history_recent`, counted at open and kept up to date.
    private var recentCount = 0
    /// Set when a pruning step found nothing to delete in `history`: the next one moves the
    /// recent rows first, whatever their number (a bound smaller than ``HistoryOptions/indexBatch``).
    private var moveBeforePruning = false
    /// The caller whose fields ``insert`` holds bound (parameters 10…17), when `callerIsBound`.
    private var boundCaller: WriteSet.Caller?
    private var callerIsBound = false
    private var pruneOldest: SQLiteStatement?
    private var pruneOlderThan: SQLiteStatement?
    private var countOfKey: SQLiteStatement?
    private var pruneOldestOfKey: SQLiteStatement?
    /// Rows per key, for ``HistoryOptions/maximumPerKey``: counted (an index range) when a key
    /// is first written, then kept up to date; forgotten when other pruning deleted rows.
    private var rowsOfKey: [Key: Int] = [:]
    /// Keys with more rows than ``HistoryOptions/maximumPerKey``, for the next pruning step.
    private var keysOverLimit: Set<Key> = []
    /// The oldest row's time (`nil`: not read yet, or no rows), for ``HistoryOptions/maximumAge``.
    private var oldestTime: Int64?
    private var oldestTimeIsKnown = false
    private var database: SQLiteDatabase?
    /// Rows in the table, counted once at open and kept up to date.
    private var rowCount = 0
    /// Transient keys' changes, oldest first, bounded by ``HistoryOptions/maximumTransientRows``.
    private(set) var transientRecords: [HistoryRecord] = []

    func attach(_ database: SQLiteDatabase) throws(SQLiteError) {
        self.database = database
        callerIsBound = false
        insert = try database.prepare("""
            INSERT INTO history_recent (id, \(Self.columns)) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)
            """)
        // All of them, oldest first; then the table is emptied as a whole (a DELETE without
        // WHERE frees its pages without visiting its rows).
        moveRecent = try database.prepare("""
            INSERT INTO history (id, \(Self.columns)) SELECT id, \(Self.columns) FROM history_recent ORDER BY id
            """)
        removeMoved = try database.prepare("DELETE FROM history_recent")
        pruneOldest = try database.prepare("DELETE FROM history WHERE id IN (SELECT id FROM history ORDER BY id LIMIT ?1)")
        pruneOlderThan = try database.prepare("DELETE FROM history WHERE id IN (SELECT id FROM history WHERE time < ?1 ORDER BY id LIMIT ?2)")
        // The recent rows are few and unindexed: scanned.
        countOfKey = try database.prepare("SELECT (SELECT count(*) FROM history WHERE key = ?1) + (SELECT count(*) FROM history_recent WHERE key = ?1)")
        pruneOldestOfKey = try database.prepare("DELETE FROM history WHERE id IN (SELECT id FROM history WHERE key = ?1 ORDER BY revision, id LIMIT ?2)")
        recentCount = Int(try database.textRows("SELECT count(*) FROM history_recent").first ?? "0") ?? 0
        rowCount = recentCount + (Int(try database.textRows("SELECT count(*) FROM history").first ?? "0") ?? 0)
        let lastID = try database.textRows("SELECT max(coalesce((SELECT max(id) FROM history), 0), coalesce((SELECT max(id) FROM history_recent), 0))")
        nextID = (Int64(lastID.first ?? "0") ?? 0) + 1
    }

    static func now() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
    }

    /// `created`, `changed`, `redefined` or `deleted`.
    private static func kind(of entry: WriteSet.Entry) -> String {
        switch (entry.before, entry.after) {
        case (nil, _): return "created"
        case (_, nil): return "deleted"
        case (let old?, let new?): return old.value == new.value && old.definition != new.definition ? "redefined" : "changed"
        }
    }

    /// ``WriteSet/Entry/isTransient``, reading the one field through the optionals instead of
    /// copying the entry (`after ?? before`): asked of every key of every commit, twice.
    private static func isTransient(_ entry: WriteSet.Entry) -> Bool {
        !(entry.after?.definition.persistent ?? entry.before?.definition.persistent ?? true)
    }

    /// The records of `writeSet`'s changes, persistent or transient ones.
    static func records(of writeSet: WriteSet, transient: Bool, time: Int64) -> [HistoryRecord] {
        var records: [HistoryRecord] = []
        for change in writeSet.changes where change.entries.contains(where: { isTransient($0) == transient }) {
            let id = change.id
            for entry in change.entries where isTransient(entry) == transient {
                let kind = Self.kind(of: entry)
                records.append(HistoryRecord(
                    change: id, revision: entry.after?.revision ?? writeSet.revision, time: time, key: entry.key, kind: kind,
                    oldValue: entry.before?.value, newValue: entry.after?.value, via: entry.via ?? change.origin.via,
                    caller: change.origin.caller, transient: transient))
            }
        }
        return records
    }

    /// Writes the persistent keys' changes; call inside the commit's transaction. Deletes
    /// nothing: what passes the bounds is pruned later, between rounds (``prune(options:)``).
    ///
    /// Binds straight from the write set, one parameter at a time, and the caller's fields
    /// only when they differ from the last row's (a connection's writes, a change's keys):
    /// this runs for every key of every durable write.
    func record(_ writeSet: WriteSet, options: HistoryOptions) throws(SQLiteError) {
        guard let insert else { return }
        let time = Self.now()
        for change in writeSet.changes where change.entries.contains(where: { !Self.isTransient($0) }) {
            let id = Int64(bitPattern: change.id), via = change.origin.via, caller = change.origin.caller
            for entry in change.entries where !Self.isTransient(entry) {
                insert.reset()
                try insert.bind(.integer(nextID), at: 1)
                try insert.bind(.integer(id), at: 2)
                try insert.bind(.integer(Int64(bitPattern: entry.after?.revision ?? writeSet.revision)), at: 3)
                try insert.bind(.integer(time), at: 4)
                try insert.bind(.text(entry.key.text), at: 5)
                try insert.bind(.text(Self.kind(of: entry)), at: 6)
                try insert.bind(entry.before.map { .blob(ValueCodec.encode($0.value)) } ?? .null, at: 7)
                try insert.bind(entry.after.map { .blob(ValueCodec.encode($0.value)) } ?? .null, at: 8)
                try insert.bind(.text(entry.via ?? via), at: 9)
                if !callerIsBound || boundCaller != caller {
                    try insert.bind(caller?.userID.map { .integer(Int64($0)) } ?? .null, at: 10)
                    try insert.bind(caller?.userName.map { .text($0) } ?? .null, at: 11)
                    try insert.bind(caller?.processID.map { .integer(Int64($0)) } ?? .null, at: 12)
                    try insert.bind(caller?.command.map { .text($0) } ?? .null, at: 13)
                    try insert.bind(caller?.executable.map { .text($0) } ?? .null, at: 14)
                    try insert.bind(caller?.unit.map { .text($0) } ?? .null, at: 15)
                    try insert.bind(caller.map { .text($0.busName) } ?? .null, at: 16)
                    try insert.bind(caller?.host.map { .text($0) } ?? .null, at: 17)
                    boundCaller = caller
                    callerIsBound = true
                }
                try insert.run()
                // A rolled-back commit leaves a gap in the ids, which only need to grow.
                nextID += 1
                rowCount += 1
                recentCount += 1
                if let limit = options.maximumPerKey, try count(of: entry.key, adding: 1) > limit { keysOverLimit.insert(entry.key) }
                if oldestTimeIsKnown, oldestTime == nil { oldestTime = time }
            }
        }
    }

    /// `key`'s rows plus `added`: counted (an index range) the first time, then kept.
    private func count(of key: Key, adding added: Int) throws(SQLiteError) -> Int {
        var count: Int
        if let known = rowsOfKey[key] {
            count = known
        } else if let countOfKey {
            // The row just inserted is counted already.
            try countOfKey.bind([.text(key.text)])
            count = try countOfKey.step() ? Int(countOfKey.integer(0)) - added : 0
            while try countOfKey.step() {}
        } else {
            count = 0
        }
        count += added
        rowsOfKey[key] = count
        return count
    }

    /// Whether rows pass a bound (count, age, per key) and a pruning step has work.
    func needsPruning(_ options: HistoryOptions, now: Int64) throws(SQLiteError) -> Bool {
        if rowCount > options.maximumRows || !keysOverLimit.isEmpty || recentCount >= options.indexBatch { return true }
        guard let age = options.maximumAge, let database else { return false }
        if !oldestTimeIsKnown {
            // The oldest row is in `history`, unless it is empty.
            oldestTime = try database.textRows("SELECT time FROM history ORDER BY id LIMIT 1").first.flatMap { Int64($0) }
            if oldestTime == nil {
                oldestTime = try database.textRows("SELECT time FROM history_recent ORDER BY id LIMIT 1").first.flatMap { Int64($0) }
            }
            oldestTimeIsKnown = true
        }
        return oldestTime.map { $0 < now - Int64(age) * 1_000_000_000 } ?? false
    }

    /// One step between rounds, in a transaction of its own: moves the recent rows into
    /// `history` when ``HistoryOptions/indexBatch`` of them wait (or when pruning needs them),
    /// then deletes at most ``HistoryOptions/pruneBatch`` of the
    /// oldest rows past the row bound, as many past the age, and the oldest rows of up to that
    /// many keys past their bound. Returns whether work is left for another step.
    func prune(options: HistoryOptions) throws(SQLiteError) -> Bool {
        guard let database, let pruneOldest, let pruneOlderThan, let pruneOldestOfKey, let moveRecent, let removeMoved,
              !database.inTransaction else { return false }
        let now = Self.now()
        guard try needsPruning(options, now: now) else { return false }
        let rowsBefore = rowCount, recentBefore = recentCount
        try database.execute("BEGIN IMMEDIATE")
        do {
            if recentCount > 0, recentCount >= options.indexBatch || recentCount == rowCount || moveBeforePruning {
                try moveRecent.run([])
                try removeMoved.run([])
                recentCount = 0
            }
            var deletedSome = false
            if rowCount > options.maximumRows {
                try pruneOldest.run([.integer(Int64(min(rowCount - options.maximumRows, options.pruneBatch)))])
                rowCount -= Int(database.changes)
                deletedSome = deletedSome || database.changes > 0
            }
            if let age = options.maximumAge {
                try pruneOlderThan.run([.integer(now - Int64(age) * 1_000_000_000), .integer(Int64(options.pruneBatch))])
                rowCount -= Int(database.changes)
                deletedSome = deletedSome || database.changes > 0
            }
            // Rows the bounds above deleted are no longer in the counts per key.
            if deletedSome {
                rowsOfKey.removeAll()
                oldestTimeIsKnown = false
            }
            if let limit = options.maximumPerKey {
                for key in keysOverLimit.prefix(options.pruneBatch) {
                    let count = try self.count(of: key, adding: 0)
                    if count > limit {
                        try pruneOldestOfKey.run([.text(key.text), .integer(Int64(min(count - limit, options.pruneBatch)))])
                        let deleted = Int(database.changes)
                        rowCount -= deleted
                        rowsOfKey[key] = count - deleted
                        oldestTimeIsKnown = false
                    }
                    if (rowsOfKey[key] ?? 0) <= limit { keysOverLimit.remove(key) }
                }
            }
            try database.execute("COMMIT")
        } catch {
            try? database.execute("ROLLBACK")
            rowsOfKey.removeAll()
            rowCount = rowsBefore
            recentCount = recentBefore
            throw error
        }
        // Work left that this step could not do in `history`: its rows are still recent.
        moveBeforePruning = rowCount == rowsBefore && recentCount == recentBefore
        return try needsPruning(options, now: now)
    }

    /// Keeps the transient keys' changes in memory (after the commit: nothing to undo).
    func recordTransient(_ writeSet: WriteSet, options: HistoryOptions) {
        let records = Self.records(of: writeSet, transient: true, time: Self.now())
        guard !records.isEmpty else { return }
        transientRecords.append(contentsOf: records)
        let excess = transientRecords.count - options.maximumTransientRows
        if excess > 0 { transientRecords.removeFirst(excess) }
        if let limit = options.maximumPerKey {
            for key in Set(records.map(\.key)) {
                var surplus = transientRecords.reduce(0) { $0 + ($1.key == key ? 1 : 0) } - limit
                guard surplus > 0 else { continue }
                transientRecords.removeAll { record in
                    guard surplus > 0, record.key == key else { return false }
                    surplus -= 1
                    return true
                }
            }
        }
    }

    static let columns = "change, revision, time, key, kind, old_value, new_value, via, uid, user, pid, comm, exe, unit, bus_name, host"

    private static func record(from query: SQLiteStatement) -> HistoryRecord? {
        guard let key = try? Key(query.text(3) ?? "") else { return nil }
        var caller: WriteSet.Caller?
        if !query.isNull(14) {
            caller = WriteSet.Caller(
                via: query.text(7) ?? "", busName: query.text(14) ?? "",
                userID: query.isNull(8) ? nil : UInt32(truncatingIfNeeded: query.integer(8)), userName: query.text(9),
                processID: query.isNull(10) ? nil : UInt32(truncatingIfNeeded: query.integer(10)),
                command: query.text(11), executable: query.text(12), unit: query.text(13), host: query.text(15))
        }
        return HistoryRecord(
            change: UInt64(bitPattern: query.integer(0)), revision: UInt64(bitPattern: query.integer(1)), time: query.integer(2),
            key: key, kind: query.text(4) ?? "",
            oldValue: query.isNull(5) ? nil : try? ValueCodec.decode(query.blob(5)),
            newValue: query.isNull(6) ? nil : try? ValueCodec.decode(query.blob(6)),
            via: query.text(7) ?? "", caller: caller, transient: false)
    }

    /// The records of one change (``HistoryRecord/change``), persistent and transient.
    func records(ofChange change: UInt64) throws(SQLiteError) -> [HistoryRecord] {
        var found = transientRecords.filter { $0.change == change }
        if let database {
            for table in Self.tables {
                let query = try database.prepare("SELECT \(Self.columns) FROM \(table) WHERE change = ?1 ORDER BY id")
                try query.bind([.integer(Int64(bitPattern: change))])
                while try query.step() { if let record = Self.record(from: query) { found.append(record) } }
            }
        }
        return found
    }

    /// `key`'s last record at or before `revision` (what it held then), and its latest record.
    func records(of key: Key, atOrBefore revision: UInt64) throws(SQLiteError) -> (then: HistoryRecord?, latest: HistoryRecord?) {
        var then = transientRecords.last { $0.key == key && $0.revision <= revision }
        var latest = transientRecords.last { $0.key == key }
        if let database {
            for table in Self.tables {
                let query = try database.prepare("SELECT \(Self.columns) FROM \(table) WHERE key = ?1 AND revision <= ?2 ORDER BY revision DESC LIMIT 1")
                try query.bind([.text(key.text), .integer(Int64(bitPattern: min(revision, UInt64(Int64.max))))])
                while try query.step() { if let record = Self.record(from: query), record.revision >= (then?.revision ?? 0) { then = record } }
                try query.bind([.text(key.text), .integer(Int64.max)])
                while try query.step() { if let record = Self.record(from: query), record.revision >= (latest?.revision ?? 0) { latest = record } }
            }
        }
        return (then, latest)
    }

    /// Up to `limit` records of keys starting with `prefix` (a key, or a group with its dot)
    /// whose revision is above `after`, oldest first; persistent and transient ones together.
    func records(prefix: String, after: UInt64, limit: Int) throws(SQLiteError) -> [HistoryRecord] {
        var found: [HistoryRecord] = []
        if let database {
            // In `history` the key index answers a key or a prefix: a range of keys, not a scan.
            // The recent rows (older ones first) come after, as their ids do.
            for table in Self.tables {
                let query = try database.prepare("""
                    SELECT \(Self.columns)
                    FROM \(table) WHERE key >= ?1 AND key < ?2 AND revision > ?3 ORDER BY revision, id LIMIT ?4
                    """)
                try query.bind([.text(prefix), .text(prefix + "\u{10FFFF}"), .integer(Int64(bitPattern: after)), .integer(Int64(limit))])
                while try query.step() { if let record = Self.record(from: query) { found.append(record) } }
            }
        }
        for record in transientRecords where record.revision > after && record.key.text.hasPrefix(prefix) {
            found.append(record)
        }
        found.sort { $0.revision < $1.revision }
        return Array(found.prefix(limit))
    }
}

extension SQLiteStore {
    /// The `history` table (schema version 5): one row per key per change.
    static let historySchema = """
        CREATE TABLE history (
            id INTEGER PRIMARY KEY,
            change INTEGER NOT NULL,
            revision INTEGER NOT NULL,
            time INTEGER NOT NULL,
            key TEXT NOT NULL,
            kind TEXT NOT NULL,
            old_value BLOB,
            new_value BLOB,
            via TEXT NOT NULL,
            uid INTEGER,
            user TEXT,
            pid INTEGER,
            comm TEXT,
            exe TEXT,
            unit TEXT,
            bus_name TEXT
        );
        CREATE INDEX history_key ON history (key, revision);
        CREATE INDEX history_change ON history (change);
        """

    /// Schema step 7 → 8: `history_recent`, `history`'s columns without its indexes. Commits
    /// append their rows to it; steps between rounds move them into `history` in batches
    /// (``HistoryOptions/indexBatch``), so a commit writes no index page for history.
    static let historyRecentSchema = """
        CREATE TABLE history_recent (
            id INTEGER PRIMARY KEY,
            change INTEGER NOT NULL,
            revision INTEGER NOT NULL,
            time INTEGER NOT NULL,
            key TEXT NOT NULL,
            kind TEXT NOT NULL,
            old_value BLOB,
            new_value BLOB,
            via TEXT NOT NULL,
            uid INTEGER,
            user TEXT,
            pid INTEGER,
            comm TEXT,
            exe TEXT,
            unit TEXT,
            bus_name TEXT,
            host TEXT
        );
        """

    /// Whether history passes one of its bounds, or a batch of recent rows waits to be moved
    /// into the indexed table: the daemon then runs ``pruneHistory()`` between rounds.
    public var historyNeedsPruning: Bool {
        guard historyOptions.isEnabled else { return false }
        return (try? historyTable.needsPruning(historyOptions, now: HistoryTable.now())) ?? false
    }

    /// One step of its own (a small transaction between rounds, never in a call's commit):
    /// moves a batch of recent rows into the indexed table and prunes; returns whether another
    /// step has work.
    public func pruneHistory() throws(PropBusError) -> Bool {
        guard historyOptions.isEnabled else { return false }
        do { return try historyTable.prune(options: historyOptions) } catch {
            throw PropBusError(.storeFailed, "cannot prune the history in the store \(path): \(error)")
        }
    }

    /// The records of one change, for `Revert`.
    public func history(ofChange change: UInt64) throws(PropBusError) -> [HistoryRecord] {
        do { return try historyTable.records(ofChange: change) } catch {
            throw PropBusError(.storeFailed, "cannot read the history in the store \(path): \(error)")
        }
    }

    /// `key`'s record at or before `revision` and its latest one, for `Revert`.
    public func history(of key: Key, atOrBefore revision: UInt64) throws(PropBusError) -> (then: HistoryRecord?, latest: HistoryRecord?) {
        do { return try historyTable.records(of: key, atOrBefore: revision) } catch {
            throw PropBusError(.storeFailed, "cannot read the history in the store \(path): \(error)")
        }
    }

    /// Up to `limit` changes of keys starting with `prefix` after revision `after`, oldest first
    /// (``HistoryRecord``); transient keys' from memory.
    public func history(prefix: String, after: UInt64, limit: Int) throws(PropBusError) -> [HistoryRecord] {
        do {
            return try historyTable.records(prefix: prefix, after: after, limit: limit)
        } catch {
            throw PropBusError(.storeFailed, "cannot read the history in the store \(path): \(error)")
        }
    }
}
