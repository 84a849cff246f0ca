import CSQLite
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

/// The SQL side of history (the `history` table) and its in-memory part for transient keys.
///
/// Owned by its ``SQLiteStore``, confined like it to the service's queue.
final class HistoryTable {
    /// The two tables rows live in: `history_recent` (what commits appended since the last
    /// move, no index) and `history` (indexed). Every query reads both.
    static let tables = ["history", "history_recent"]
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
    /// Callers' ids in `history_caller` by identity (a ``WriteSet/Caller`` with an empty `via`:
    /// the method is the row's); looked up in the table on a miss, inserted the first time.
    /// Bounded: emptied past ``maximumCachedCallers`` (a miss costs one index probe).
    private var callerIDs: [WriteSet.Caller: Int64] = [:]
    private static let maximumCachedCallers = 4096
    /// The last change's caller and its id: a connection's writes come one after the other.
    private var lastCaller: WriteSet.Caller?
    private var lastCallerID: Int64?
    /// What ``insert`` holds bound as the key, kind and via (parameters 5, 6, 9; `nil`: not
    /// bound since it was prepared): bound again only when they change, as a writer's rows
    /// repeat them and binding text copies it.
    private var boundKey: Key?
    private var boundKind: String?
    private var boundVia: String?
    /// Callers inserted by the commit under way: a rollback takes them back from the cache.
    private var callersOfThisCommit: [WriteSet.Caller] = []
    /// The callers rows of `history_recent` reference (that table has no index to ask).
    private var recentCallers: Set<Int64> = []
    /// The sweep deleting callers no row references, a batch per pruning step, in id order
    /// from `callerSweepCursor`; `callerSweepAgain` when rows went while it was under way.
    private var callerSweepPending = false
    private var callerSweepAgain = false
    private var callerSweepCursor: Int64 = 0
    private var findCaller: SQLiteStatement?
    private var insertCaller: SQLiteStatement?
    private var callerCandidates: SQLiteStatement?
    private var callerIsReferenced: SQLiteStatement?
    private var removeCaller: SQLiteStatement?
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
    /// Internal, with ``tables``: the queries are an extension in HistoryTable+Queries.swift.
    var database: SQLiteDatabase?
    /// Rows in the table, counted once at open and kept up to date.
    private var rowCount = 0
    /// Transient keys' changes, oldest first, bounded by ``HistoryOptions/maximumTransientRows``.
    private(set) var transientRecords: [HistoryRecord] = []

    func attach(_ database: SQLiteDatabase) throws(SQLiteError) {
        self.database = database
        callerIDs.removeAll()
        lastCaller = nil
        lastCallerID = nil
        boundKey = nil
        boundKind = nil
        boundVia = nil
        insert = try database.prepare("""
            INSERT INTO history_recent (id, \(Self.storedColumns)) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
            """)
        // The identity index answers it (`IS`: a field may be NULL).
        findCaller = try database.prepare("""
            SELECT id FROM history_caller
            WHERE bus_name = ?1 AND uid IS ?2 AND user IS ?3 AND pid IS ?4 AND comm IS ?5 AND exe IS ?6 AND unit IS ?7 AND host IS ?8
            """)
        insertCaller = try database.prepare("""
            INSERT INTO history_caller (bus_name, uid, user, pid, comm, exe, unit, host) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) RETURNING id
            """)
        callerCandidates = try database.prepare("SELECT id FROM history_caller WHERE id > ?1 ORDER BY id LIMIT ?2")
        callerIsReferenced = try database.prepare("SELECT 1 FROM history WHERE caller = ?1 LIMIT 1")
        removeCaller = try database.prepare("DELETE FROM history_caller WHERE id = ?1")
        recentCallers = Set(try database.textRows("SELECT DISTINCT caller FROM history_recent WHERE caller IS NOT NULL").compactMap { Int64($0) })
        // All of them, oldest first; then the table is emptied as a whole (a DELETE without
        // WHERE frees its pages without visiting its rows).
        moveRecent = try database.prepare("""
            INSERT INTO history (id, \(Self.storedColumns)) SELECT id, \(Self.storedColumns) FROM history_recent ORDER BY id
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
    /// Binds straight from the write set, one parameter at a time, the caller as its id in
    /// `history_caller` (``callerID(of:)``): this runs for every key of every durable write,
    /// and a row repeating the caller's exe, unit and names was most of its bytes.
    func record(_ writeSet: WriteSet, options: HistoryOptions) throws(SQLiteError) {
        guard let insert else { return }
        let time = Self.now()
        callersOfThisCommit.removeAll(keepingCapacity: true)
        for change in writeSet.changes where change.entries.contains(where: { !Self.isTransient($0) }) {
            let id = Int64(bitPattern: change.id), via = change.origin.via
            var callerID: Int64?
            if let caller = change.origin.caller {
                let id = try self.callerID(of: caller)
                recentCallers.insert(id)
                callerID = id
            }
            for entry in change.entries where !Self.isTransient(entry) {
                insert.reset()
                try insert.bind(.integer(nextID), at: 1)
                try insert.bind(.integer(id), at: 2)
                try insert.bind(.integer(Int64(bitPattern: entry.after?.revision ?? writeSet.revision)), at: 3)
                try insert.bind(.integer(time), at: 4)
                if boundKey != entry.key {
                    try insert.bind(.text(entry.key.text), at: 5)
                    boundKey = entry.key
                }
                let kind = Self.kind(of: entry)
                if boundKind != kind {
                    try insert.bind(.text(kind), at: 6)
                    boundKind = kind
                }
                try insert.bind(entry.before.map { .blob(ValueCodec.encode($0.value)) } ?? .null, at: 7)
                try insert.bind(entry.after.map { .blob(ValueCodec.encode($0.value)) } ?? .null, at: 8)
                let rowVia = entry.via ?? via
                if boundVia != rowVia {
                    try insert.bind(.text(rowVia), at: 9)
                    boundVia = rowVia
                }
                try insert.bind(callerID.map { .integer($0) } ?? .null, at: 10)
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

    /// `caller`'s id in `history_caller`: the last change's, the cache's, the table's, or a
    /// new row's (in the commit's transaction: a rollback takes it back, ``commitFailed()``).
    private func callerID(of caller: WriteSet.Caller) throws(SQLiteError) -> Int64 {
        if let lastCallerID, caller == lastCaller { return lastCallerID }
        var identity = caller
        identity.via = ""
        let id: Int64
        if let cached = callerIDs[identity] {
            id = cached
        } else if let findCaller, let insertCaller {
            let fields: [SQLiteValue] = [
                .text(caller.busName), caller.userID.map { .integer(Int64($0)) } ?? .null, caller.userName.map { .text($0) } ?? .null,
                caller.processID.map { .integer(Int64($0)) } ?? .null, caller.command.map { .text($0) } ?? .null,
                caller.executable.map { .text($0) } ?? .null, caller.unit.map { .text($0) } ?? .null, caller.host.map { .text($0) } ?? .null,
            ]
            try findCaller.bind(fields)
            if try findCaller.step() {
                id = findCaller.integer(0)
                while try findCaller.step() {}
            } else {
                try insertCaller.bind(fields)
                guard try insertCaller.step() else { throw SQLiteError(code: SQLITE_ERROR, message: "no id for a new caller row") }
                id = insertCaller.integer(0)
                while try insertCaller.step() {}
                callersOfThisCommit.append(identity)
            }
            if callerIDs.count >= Self.maximumCachedCallers { callerIDs.removeAll(keepingCapacity: true) }
            callerIDs[identity] = id
        } else {
            throw SQLiteError(code: SQLITE_MISUSE, message: "history is not attached")
        }
        lastCaller = caller
        lastCallerID = id
        return id
    }

    /// The commit that ``record(_:options:)`` wrote into was rolled back: the callers it
    /// inserted are not in the table.
    func commitFailed() {
        for identity in callersOfThisCommit { callerIDs[identity] = nil }
        callersOfThisCommit.removeAll()
        lastCaller = nil
        lastCallerID = nil
        // A bind that failed may have left its parameter as it was.
        boundKey = nil
        boundKind = nil
        boundVia = nil
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
        if rowCount > options.maximumRows || !keysOverLimit.isEmpty || recentCount >= options.indexBatch || callerSweepPending { return true }
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
                recentCallers.removeAll()
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
            if rowCount < rowsBefore { callerSweepAgain = true }
            if callerSweepPending || callerSweepAgain { try sweepCallers(batch: options.pruneBatch) }
            try database.execute("COMMIT")
        } catch {
            try? database.execute("ROLLBACK")
            callerIDs.removeAll()
            lastCaller = nil
            lastCallerID = nil
            callerSweepPending = true
            rowsOfKey.removeAll()
            rowCount = rowsBefore
            recentCount = recentBefore
            throw error
        }
        // Work left that this step could not do in `history`: its rows are still recent.
        moveBeforePruning = rowCount == rowsBefore && recentCount == recentBefore
        return try needsPruning(options, now: now)
    }

    /// Deletes, of the next `batch` callers in id order, those no row references (a probe of
    /// `history`'s caller index each, and ``recentCallers``): what keeps `history_caller`
    /// bounded by the rows. A sweep that reaches the last caller starts again only if rows
    /// were deleted meanwhile.
    private func sweepCallers(batch: Int) throws(SQLiteError) {
        guard let callerCandidates, let callerIsReferenced, let removeCaller else { return }
        if !callerSweepPending {
            callerSweepPending = true
            callerSweepAgain = false
            callerSweepCursor = 0
        }
        try callerCandidates.bind([.integer(callerSweepCursor), .integer(Int64(batch))])
        var candidates: [Int64] = []
        while try callerCandidates.step() { candidates.append(callerCandidates.integer(0)) }
        var removedSome = false
        for id in candidates where !recentCallers.contains(id) {
            try callerIsReferenced.bind([.integer(id)])
            let referenced = try callerIsReferenced.step()
            while try callerIsReferenced.step() {}
            if !referenced {
                try removeCaller.run([.integer(id)])
                removedSome = true
            }
        }
        if removedSome {
            // Cheaper than finding the identities of the ids.
            callerIDs.removeAll()
            lastCaller = nil
            lastCallerID = nil
        }
        if candidates.count < batch {
            callerSweepPending = callerSweepAgain
            callerSweepAgain = false
            callerSweepCursor = 0
        } else {
            callerSweepCursor = candidates.last ?? 0
        }
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

    /// A row's columns in `history` and `history_recent`: its caller is an id in `history_caller`.
    static let storedColumns = "change, revision, time, key, kind, old_value, new_value, via, caller"

    /// What queries read: a row (`h`) with its caller's fields (`c`, joined).
    static let columns = """
        h.change, h.revision, h.time, h.key, h.kind, h.old_value, h.new_value, h.via,
        c.uid, c.user, c.pid, c.comm, c.exe, c.unit, c.bus_name, c.host
        """

}
