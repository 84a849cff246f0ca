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
    /// The most rows commits leave unindexed before a step between rounds adds their entries
    /// to the index tables (a step comes a few milliseconds after the commit that reached it,
    /// so they are not many more). A commit only appends its rows to `history`: indexing them
    /// there would dirty a page of the `(key, revision)` index per key the commit wrote, each
    /// costing the WAL write, its checksum and a checkpoint's copy; a batch of rows shares
    /// those pages. Queries scan the unindexed rows, a range of rowids.
    public var indexBatch = 512
    /// The most changes kept per key, the latest (`nil`: no limit per key).
    public var maximumPerKey: Int?
    /// Whether refused attempts (AccessDenied) are recorded (`--history-denied`).
    public var recordsDenied = false
    /// The most refused attempts kept; the oldest go first.
    public var maximumDeniedRows = 10_000

    public init() {}
}

/// The SQL side of history (the `history` table and its index tables) and its in-memory part
/// for transient keys.
///
/// A commit writes each row once, into `history` (its rowid the row's id, growing), and no
/// index entry: the indexes by key and by change are tables of their own (`history_index`,
/// `history_by_change`) that a step between rounds fills for a batch of rows at once (the rows
/// above ``indexedThrough``, the "tail"); queries read the index tables and scan the tail, a
/// range of rowids. Times never decrease from one row to the next (a commit's time is at least
/// the last one's), so a time is found by a binary search over the rowids.
///
/// Owned by its ``SQLiteStore``, confined like it to the service's queue. Its state is internal,
/// not private: the queries and the steps between rounds are extensions in other files.
final class HistoryTable {
    var insert: SQLiteStatement?
    var readTailRows: SQLiteStatement?
    var insertEntry: SQLiteStatement?
    var indexTailByChange: SQLiteStatement?
    var saveIndexed: SQLiteStatement?
    /// The next row's id: one past the last row's, and past every id indexed already (ids are
    /// never given twice, even after every row was pruned: the index tables key rows by id).
    var nextID: Int64 = 1
    /// The highest id whose row has its index entries (`meta`'s `history_indexed`); the rows
    /// above it are the tail, which queries scan.
    var indexedThrough: Int64 = 0
    /// Rows in the tail, counted at open and kept up to date (an upper bound: pruning may
    /// delete some).
    var tailCount = 0
    /// The tail's rows as the commits wrote them, for the next step's entries without reading
    /// them back (`nil`: not known, read back then: at open, after a commit that failed, after
    /// pruning deleted rows of the tail, or past ``maximumTailRows``).
    var tailRows: [IndexedRow]?
    /// Whether the tail may hold a row whose change is below its revision (a deletion's), the
    /// only rows `history_by_change` indexes: unknown (true) at open, then known from the rows
    /// written, so a step does not read the whole tail again to find none.
    var tailMayHoldDeletions = true
    /// The last row's time: a commit's is at least this, so times never decrease with ids.
    var lastTime: Int64 = 0
    /// A caller's id in `history_caller` and `last_row` there: the id of a row up to which that
    /// caller row is kept whatever the rows naming it (the last of ``callerLease`` rows from the
    /// row that last raised it), so a caller's writes raise it once in ``callerLease`` rows.
    /// A class, confined to the queue like the table: with many writers the caller changes
    /// from one row to the next, and copying a struct holding the caller's strings in and out
    /// of the cache cost more per row than finding it.
    final class CachedCaller {
        let caller: WriteSet.Caller
        let id: Int64
        var lastRow: Int64
        init(caller: WriteSet.Caller, id: Int64, lastRow: Int64) {
            self.caller = caller
            self.id = id
            self.lastRow = lastRow
        }
    }
    /// Callers by bus name (a connection's identity does not change), bounded: emptied past
    /// ``maximumCachedCallers`` (a miss costs one probe of the identity index).
    var callers: [String: CachedCaller] = [:]
    static let maximumCachedCallers = 4096
    /// The last change's caller: a connection's writes come one after the other.
    var lastCaller: CachedCaller?
    /// Recent callers, one per slot of their bus name's ``slot(of:among:)``, in front of
    /// ``callers``: with many writers the caller changes from one row to the next, and a
    /// dictionary lookup hashes the name with SipHash and probes, where this hashes a few bytes
    /// and compares the caller found in full (a collision is a miss, never another's id).
    /// Fixed storage, a `let`: an array in a `var` paid an exclusivity check at every access.
    let callerSlots = UnsafeMutableBufferPointer<CachedCaller?>.allocate(capacity: 64)
    /// How many rows, from the one that raises it, a caller's `last_row` covers: a sweep keeps
    /// a caller up to that many rows longer than its last row (internal: tests make it 1).
    var callerLease: Int64 = 4096
    /// A key's id in `history_key`, and the bytes of the last value history wrote for it and
    /// of the value the commit under way stored (``encodeStored(_:of:)``): a row's old value
    /// is the key's last row's new one, and its new value is the one the values table just
    /// got, so neither is encoded again. A class: confined to the queue like the table, and
    /// changed in place wherever it is found (the last row's, or the cache's).
    final class KeyEntry {
        let id: Int64
        /// The key's text, which ``keySlots`` compares before using the entry.
        let text: String
        var written: (value: DBusValue, bytes: [UInt8])?
        var stored: (value: DBusValue, bytes: [UInt8])?
        init(id: Int64, text: String) {
            self.id = id
            self.text = text
        }
    }
    /// Values of more bytes are not kept in a ``KeyEntry``: the cache stays small.
    static let maximumCachedValueBytes = 256
    /// Keys by key, bounded like ``callers``; the last row's first.
    var keys: [Key: KeyEntry] = [:]
    static let maximumCachedKeys = 16_384
    /// The last key's entry, compared by its text: keeping the last `Key` as well retained and
    /// released its three strings at every lookup.
    var lastKeyEntry: KeyEntry?
    /// Recent keys, one per slot of their text's ``slot(of:among:)``, in front of ``keys``
    /// (whose `Key` hashes its text, group and name), as ``callerSlots``: a commit looks each
    /// key up twice (its value's bytes, its row), and with many writers the key changes from
    /// one lookup to the next.
    let keySlots = UnsafeMutableBufferPointer<KeyEntry?>.allocate(capacity: 1024)
    /// What ``insert`` holds bound as the kind and via (parameters 6, 9; `nil`: not bound
    /// since it was prepared): bound again only when they change, as binding text copies it.
    var boundKind: String?
    var boundVia: String?
    /// The sweeps deleting callers and keys no row names, a batch per pruning step; keys in id
    /// order from `keySweepCursor`, run only when the tail is indexed (the key index then
    /// names every row's key).
    var callerSweepPending = false
    var keySweepPending = false
    var keySweepCursor: Int64 = 0
    var findCaller: SQLiteStatement?
    var insertCaller: SQLiteStatement?
    var raiseCallerLastRow: SQLiteStatement?
    var removeUnreferencedCallers: SQLiteStatement?
    var findKey: SQLiteStatement?
    var insertKey: SQLiteStatement?
    var keyCandidates: SQLiteStatement?
    var keyIsReferenced: SQLiteStatement?
    var removeKey: SQLiteStatement?
    var pruneOldest: SQLiteStatement?
    var pruneBefore: SQLiteStatement?
    var countOfKey: SQLiteStatement?
    var entriesOfKey: SQLiteStatement?
    var tailIDsOfKey: SQLiteStatement?
    var deleteRow: SQLiteStatement?
    var firstRowFrom: SQLiteStatement?
    var firstChangeFrom: SQLiteStatement?
    var rowBefore: SQLiteStatement?
    /// The prepared queries (HistoryTable+Queries.swift), by their text.
    var queries: [String: SQLiteStatement] = [:]
    /// Rows per key, for ``HistoryOptions/maximumPerKey``: counted (an index range and the
    /// tail) when a key is first written, then kept up to date; forgotten when other pruning
    /// deleted rows.
    var rowsOfKey: [Key: Int] = [:]
    /// Keys with more rows than ``HistoryOptions/maximumPerKey``, for the next pruning step.
    var keysOverLimit: Set<Key> = []
    /// The oldest row's time (`nil`: not read yet, or no rows), for ``HistoryOptions/maximumAge``.
    var oldestTime: Int64?
    var oldestTimeIsKnown = false
    var database: SQLiteDatabase?
    /// Rows in the table, counted once at open and kept up to date.
    var rowCount = 0
    /// Transient keys' changes, oldest first, bounded by ``HistoryOptions/maximumTransientRows``.
    var transientRecords: [HistoryRecord] = []

    init() {
        callerSlots.initialize(repeating: nil)
        keySlots.initialize(repeating: nil)
    }

    deinit {
        callerSlots.deinitialize().deallocate()
        keySlots.deinitialize().deallocate()
    }

    func attach(_ database: SQLiteDatabase) throws(SQLiteError) {
        self.database = database
        forgetIdentities()
        boundKind = nil
        boundVia = nil
        queries.removeAll()
        insert = try database.prepare("""
            INSERT INTO history (id, \(Self.storedColumns)) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
            """)
        // The identity index answers it (`IS`: a field may be NULL).
        findCaller = try database.prepare("""
            SELECT id, last_row FROM history_caller
            WHERE bus_name = ?1 AND uid IS ?2 AND user IS ?3 AND pid IS ?4 AND comm IS ?5 AND exe IS ?6 AND unit IS ?7 AND host IS ?8
            """)
        insertCaller = try database.prepare("""
            INSERT INTO history_caller (bus_name, uid, user, pid, comm, exe, unit, host, last_row) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) RETURNING id
            """)
        raiseCallerLastRow = try database.prepare("UPDATE history_caller SET last_row = ?2 WHERE id = ?1")
        // A caller whose `last_row` is below the oldest row's id is named by no row.
        removeUnreferencedCallers = try database.prepare("DELETE FROM history_caller WHERE id IN (SELECT id FROM history_caller WHERE last_row < ?1 LIMIT ?2)")
        findKey = try database.prepare("SELECT id FROM history_key WHERE key = ?1")
        insertKey = try database.prepare("INSERT INTO history_key (key) VALUES (?1) RETURNING id")
        keyCandidates = try database.prepare("SELECT id FROM history_key WHERE id > ?1 ORDER BY id LIMIT ?2")
        // An entry counts at least one row: one counting none is deleted (the trigger).
        keyIsReferenced = try database.prepare("SELECT 1 FROM history_index WHERE key_id = ?1 LIMIT 1")
        removeKey = try database.prepare("DELETE FROM history_key WHERE id = ?1")
        readTailRows = try database.prepare("SELECT key_id, revision, id FROM history WHERE id > ?1 ORDER BY id")
        insertEntry = try database.prepare("INSERT INTO history_index (key_id, revision, id, count, rows) VALUES (?1, ?2, ?3, ?4, ?5)")
        // Only the rows of deletions, whose change is below their revision: the others are
        // found by a binary search (``records(ofChange:)``).
        indexTailByChange = try database.prepare("INSERT INTO history_by_change (change, id) SELECT change, id FROM history WHERE id > ?1 AND change < revision")
        saveIndexed = try database.prepare("INSERT OR REPLACE INTO meta (name, value) VALUES ('history_indexed', ?1)")
        // The trigger deletes their index entries.
        pruneOldest = try database.prepare("DELETE FROM history WHERE id IN (SELECT id FROM history ORDER BY id LIMIT ?1)")
        pruneBefore = try database.prepare("DELETE FROM history WHERE id IN (SELECT id FROM history WHERE id < ?1 ORDER BY id LIMIT ?2)")
        countOfKey = try database.prepare("""
            SELECT (SELECT coalesce(sum(count), 0) FROM history_index WHERE key_id = ?1) + (SELECT count(*) FROM history WHERE id > ?2 AND key_id = ?1)
            """)
        entriesOfKey = try database.prepare("SELECT revision, id, count, rows FROM history_index WHERE key_id = ?1 ORDER BY revision, id")
        tailIDsOfKey = try database.prepare("SELECT id FROM history WHERE id > ?2 AND key_id = ?1 ORDER BY revision, id LIMIT ?3")
        deleteRow = try database.prepare("DELETE FROM history WHERE id = ?1")
        firstRowFrom = try database.prepare("SELECT id, time FROM history WHERE id >= ?1 ORDER BY id LIMIT 1")
        firstChangeFrom = try database.prepare("SELECT id, max(change, revision) FROM history WHERE id >= ?1 ORDER BY id LIMIT 1")
        rowBefore = try database.prepare("SELECT revision FROM history WHERE id < ?1 ORDER BY id DESC LIMIT 1")
        tailMayHoldDeletions = true
        indexedThrough = Int64(try database.textRows("SELECT value FROM meta WHERE name = 'history_indexed'").first ?? "0") ?? 0
        tailCount = Int(try database.textRows("SELECT count(*) FROM history WHERE id > \(indexedThrough)").first ?? "0") ?? 0
        tailRows = tailCount == 0 ? [] : nil
        // Counted in the narrow index, not `history` itself, which has no index and whose count
        // would read every row's page at each start: an entry holds one row unless it packs
        // others (``SQLiteStore/historyPackedIndexSchema``), and those are indexed on their own.
        // `count(*)` counts an index's cells without reading them; `sum(count)` read each one.
        let entries = Int(try database.textRows("SELECT count(*) FROM history_index").first ?? "0") ?? 0
        let packed = Int(try database.textRows("SELECT coalesce(sum(count - 1), 0) FROM history_index INDEXED BY history_index_packed WHERE rows IS NOT NULL").first ?? "0") ?? 0
        rowCount = entries + packed + tailCount
        let last = try database.textRows("SELECT id FROM history ORDER BY id DESC LIMIT 1")
        nextID = max(Int64(last.first ?? "0") ?? 0, indexedThrough) + 1
        lastTime = Int64(try database.textRows("SELECT time FROM history ORDER BY id DESC LIMIT 1").first ?? "0") ?? 0
    }

    static func now() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
    }

    /// `created`, `changed`, `redefined` or `deleted`, of a key whose values were `old` and
    /// `new`, and whose definitions differ when `redefined` says so (asked only of an unchanged
    /// value). Not a function of the entry: passing one copied it whole, for every key of every
    /// commit.
    private static func kind(old: DBusValue?, new: DBusValue?, redefined: () -> Bool) -> String {
        guard let old else { return "created" }
        guard let new else { return "deleted" }
        guard old == new else { return "changed" }
        return redefined() ? "redefined" : "changed"
    }

    private static func kind(of entry: WriteSet.Entry) -> String {
        kind(old: entry.before?.value, new: entry.after?.value) { entry.before?.definition != entry.after?.definition }
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
    /// nothing and indexes nothing: a step between rounds does (``prune(options:)``).
    ///
    /// Binds straight from the write set, one parameter at a time, the key and the caller as
    /// their ids (``entry(of:)``, ``callerID(of:row:)``): this runs for every key of every
    /// durable write. The write set is read in place, through its arrays' buffers: iterating
    /// them copied each change and each entry (retaining and releasing their definitions'
    /// and values' storage), several times per key.
    func record(_ writeSet: WriteSet, options: HistoryOptions) throws(SQLiteError) {
        guard let insert else { return }
        // Never before the last row: a time is then found by a binary search over the rows.
        let time = max(Self.now(), lastTime)
        lastTime = time
        let revision = writeSet.revision
        try writeSet.changes.withUnsafeBufferPointer { (changes) throws(SQLiteError) in
            for index in changes.indices {
                try changes[index].entries.withUnsafeBufferPointer { (entries) throws(SQLiteError) in
                    try record(entries, of: changes[index].origin, revision: revision, time: time, insert: insert, options: options)
                }
            }
        }
    }

    /// One change's rows: `entries` are its keys, `origin` where it came from.
    private func record(_ entries: UnsafeBufferPointer<WriteSet.Entry>, of origin: WriteSet.Origin, revision: UInt64, time: Int64,
                        insert: SQLiteStatement, options: HistoryOptions) throws(SQLiteError) {
        // The change's id (``WriteSet/Change/id``: its highest revision) and whether it has a
        // persistent key, in one pass.
        var changeID: UInt64 = 0, persistent = false
        for index in entries.indices {
            changeID = max(changeID, entries[index].after?.revision ?? entries[index].before?.revision ?? 0)
            if !Self.isTransient(entries[index]) { persistent = true }
        }
        guard persistent else { return }
        let id = Int64(bitPattern: changeID), via = origin.via
        let callerID = try self.callerID(of: origin, row: nextID)
        for index in entries.indices where !Self.isTransient(entries[index]) {
            let key = try self.entry(of: entries[index].key), keyID = key.id
            insert.reset()
            try insert.bind(.integer(nextID), at: 1)
            try insert.bind(.integer(id), at: 2)
            let rowRevision = Int64(bitPattern: entries[index].after?.revision ?? revision)
            if id < rowRevision { tailMayHoldDeletions = true }
            try insert.bind(.integer(rowRevision), at: 3)
            try insert.bind(.integer(time), at: 4)
            try insert.bind(.integer(keyID), at: 5)
            let oldValue = entries[index].before?.value, newValue = entries[index].after?.value
            let kind = Self.kind(old: oldValue, new: newValue) { entries[index].before?.definition != entries[index].after?.definition }
            if boundKind != kind {
                try insert.bind(.text(kind), at: 6)
                boundKind = kind
            }
            let oldBytes = oldValue.map { Self.bytes(of: $0, knowing: key.written) }
            var newBytes: [UInt8]?
            if let value = newValue {
                let bytes = Self.bytes(of: value, knowing: key.stored)
                newBytes = bytes
                key.written = bytes.count <= Self.maximumCachedValueBytes ? (value, bytes) : nil
            } else {
                key.written = nil
            }
            key.stored = nil
            let rowVia = entries[index].via ?? via
            if boundVia != rowVia {
                try insert.bind(.text(rowVia), at: 9)
                boundVia = rowVia
            }
            try insert.bind(callerID.map { .integer($0) } ?? .null, at: 10)
            try insert.run(blobs: oldBytes, newBytes, at: (7, 8))
            // A rolled-back commit leaves a gap in the ids, which only need to grow.
            if tailRows != nil {
                if tailCount < Self.maximumTailRows {
                    tailRows!.append(IndexedRow(keyID: keyID, revision: rowRevision, id: nextID))
                } else {
                    tailRows = nil
                }
            }
            nextID += 1
            rowCount += 1
            tailCount += 1
            if let limit = options.maximumPerKey, try count(of: entries[index].key, id: keyID, adding: 1) > limit {
                keysOverLimit.insert(entries[index].key)
            }
            if oldestTimeIsKnown, oldestTime == nil { oldestTime = time }
        }
    }

    /// `value`'s bytes: `known`'s if it holds the same value, else encoded.
    private static func bytes(of value: DBusValue, knowing known: (value: DBusValue, bytes: [UInt8])?) -> [UInt8] {
        if let known, known.value == value { return known.bytes }
        return ValueCodec.encode(value)
    }

    /// `value` encoded for the values table, kept for `key`'s history row of the same commit
    /// (``record(_:options:)``) when it is small; call inside the commit's transaction.
    func encodeStored(_ value: DBusValue, of key: Key) throws(SQLiteError) -> [UInt8] {
        let bytes = ValueCodec.encode(value)
        if bytes.count <= Self.maximumCachedValueBytes { try entry(of: key).stored = (value, bytes) }
        return bytes
    }

    /// The commit that ``record(_:options:)`` wrote into was rolled back: the callers and keys
    /// it inserted are not in the table, nor the callers' raised `last_row`.
    func commitFailed() {
        forgetIdentities()
        // Its rows are not in the table, but they are in ``tailRows``.
        tailRows = nil
        // A bind that failed may have left its parameter as it was.
        boundKind = nil
        boundVia = nil
    }

    /// `key`'s rows plus `added`: counted (an index range and the tail) the first time, then kept.
    func count(of key: Key, id: Int64, adding added: Int) throws(SQLiteError) -> Int {
        var count: Int
        if let known = rowsOfKey[key] {
            count = known
        } else if let countOfKey {
            // The row just inserted is counted already.
            try countOfKey.bind([.integer(id), .integer(indexedThrough)])
            count = try countOfKey.step() ? Int(countOfKey.integer(0)) - added : 0
            while try countOfKey.step() {}
        } else {
            count = 0
        }
        count += added
        rowsOfKey[key] = count
        return count
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

    /// A row's columns in `history`: its key is an id in `history_key`, its caller one in
    /// `history_caller`.
    static let storedColumns = "change, revision, time, key_id, kind, old_value, new_value, via, caller"

    /// What queries read: a row (`h`) with its key (`k`) and its caller's fields (`c`), joined.
    static let columns = """
        h.change, h.revision, h.time, k.key, h.kind, h.old_value, h.new_value, h.via,
        c.uid, c.user, c.pid, c.comm, c.exe, c.unit, c.bus_name, c.host
        """

}
