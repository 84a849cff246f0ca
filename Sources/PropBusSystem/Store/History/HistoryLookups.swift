import CSQLite
import DBusValues
import PropBus

/// Reading single rows of the store's history back: a row by id, a key at a revision, one
/// change, the revision at a time. Each reads the index tables for the indexed rows and scans
/// the tail (the rows above ``HistoryIndexer/indexedThrough``, a range of rowids of about a
/// batch). Times never decrease from one row to the next (a commit's time is at least the last
/// one's), so a time is found by a binary search over the rowids.
///
/// Owned by ``SQLiteHistory``, confined like it to the service's queue.
final class HistoryLookups {
    private let indexer: HistoryIndexer
    private let recorder: HistoryRecorder
    private var database: SQLiteDatabase?
    /// The prepared queries, by their text.
    private var queries: [String: SQLiteStatement] = [:]

    init(indexer: HistoryIndexer, recorder: HistoryRecorder) {
        self.indexer = indexer
        self.recorder = recorder
    }

    func attach(_ database: SQLiteDatabase) {
        self.database = database
        queries.removeAll()
    }

    /// `sql`, prepared once per attached database: a query for one key is a few page reads,
    /// and compiling it cost about as much.
    func statement(_ sql: String) throws(SQLiteError) -> SQLiteStatement? {
        if let prepared = queries[sql] { return prepared }
        guard let database else { return nil }
        let prepared = try database.prepare(sql)
        queries[sql] = prepared
        return prepared
    }

    /// Runs `query` bound to `values`, appending its records to `found`.
    private func collect(_ query: SQLiteStatement?, _ values: [SQLiteValue], into found: inout [HistoryRecord]) throws(SQLiteError) {
        guard let query else { return }
        try query.bind(values)
        while try query.step() { if let record = HistoryRows.record(from: query) { found.append(record) } }
    }

    /// The row `id`, with its key and caller (`nil`: not kept).
    func record(id: Int64) throws(SQLiteError) -> HistoryRecord? {
        guard let query = try statement("SELECT \(HistoryRows.columns) FROM history h \(HistoryRows.joins) WHERE h.id = ?1") else { return nil }
        try query.bind([.integer(id)])
        guard try query.step() else { return nil }
        let found = HistoryRows.record(from: query)
        query.reset()
        return found
    }

    /// `key`'s id in `history_key` (`nil`: no row of it is kept).
    func storedID(of key: Key) throws(SQLiteError) -> Int64? {
        guard let query = try statement("SELECT id FROM history_key WHERE key = ?1") else { return nil }
        try query.bind([.text(key.text)])
        guard try query.step() else { return nil }
        let id = query.integer(0)
        while try query.step() {}
        return id
    }

    /// The records of one change (``HistoryRecord/change``).
    ///
    /// A change's rows are one commit's, and a commit's rows share its time. A change is its
    /// highest revision, and within a commit each change's id is above the last one's, so
    /// `max(change, revision)` never decreases from one commit to the next: a binary search
    /// over the rowids lands in the commit holding the change, whose rows (the run of its
    /// time) are then read. A deletion's row is the exception (its change is the key's old
    /// revision, below the row's): those are in `history_by_change`. The tail is scanned.
    func records(ofChange change: UInt64) throws(SQLiteError) -> [HistoryRecord] {
        guard change <= UInt64(Int64.max) else { return [] }
        var found: [HistoryRecord] = []
        let id = Int64(bitPattern: change)
        let columns = HistoryRows.columns, joins = HistoryRows.joins
        // Three disjoint parts, oldest first: the indexed rows of other changes than
        // deletions (the commit's run), the indexed deletions' and the tail's.
        if let run = try commit(holdingChange: id) {
            try collect(statement("""
                SELECT \(columns) FROM history h \(joins)
                WHERE h.id >= ?2 AND h.id < ?3 AND h.id <= ?4 AND h.change = ?1 AND h.change >= h.revision ORDER BY h.id
                """), [.integer(id), .integer(run.lowerBound), .integer(run.upperBound), .integer(indexer.indexedThrough)], into: &found)
        }
        try collect(statement("SELECT \(columns) FROM history_by_change i JOIN history h ON h.id = i.id \(joins) WHERE i.change = ?1 ORDER BY i.id"),
                    [.integer(id)], into: &found)
        try collect(statement("SELECT \(columns) FROM history h \(joins) WHERE h.id > ?2 AND h.change = ?1 ORDER BY h.id"),
                    [.integer(id), .integer(indexer.indexedThrough)], into: &found)
        return found
    }

    /// The ids of the rows of the commit holding the row the binary search for `value` (of
    /// `max(change, revision)`, or of `revision` alone when `byChange` is false) lands on: the
    /// run of rows around it that share its time.
    func commit(holdingChange value: Int64, byChange: Bool = true) throws(SQLiteError) -> Range<Int64>? {
        let probe = byChange ? "SELECT id, max(change, revision) FROM history WHERE id >= ?1 ORDER BY id LIMIT 1"
                             : "SELECT id, revision FROM history WHERE id >= ?1 ORDER BY id LIMIT 1"
        let landing = try firstRow(probing: statement(probe), atLeast: value)
        guard let row = try statement("SELECT time FROM history WHERE id = ?1") else { return nil }
        try row.bind([.integer(landing)])
        guard try row.step() else { return nil }
        let time = row.integer(0)
        while try row.step() {}
        // Each a scan of the run only: the first row of another time ends it.
        func edge(_ sql: String) throws(SQLiteError) -> Int64? {
            guard let query = try statement(sql) else { return nil }
            try query.bind([.integer(landing), .integer(time)])
            guard try query.step() else { return nil }
            let id = query.integer(0)
            while try query.step() {}
            return id
        }
        let before = try edge("SELECT id FROM history WHERE id < ?1 AND time <> ?2 ORDER BY id DESC LIMIT 1") ?? 0
        let after = try edge("SELECT id FROM history WHERE id > ?1 AND time <> ?2 ORDER BY id LIMIT 1") ?? recorder.nextID
        return (before + 1)..<after
    }

    /// The indexed row of key `id` with the highest revision at or below `revision` (then the
    /// highest id): in the first entry named above `revision`, whose first rows may be at or
    /// below it, else in the entries named at or below it, newest first (entries hold disjoint
    /// runs of the key's rows, in order).
    private func lastIndexedRecord(ofKeyID id: Int64, atOrBefore revision: Int64) throws(SQLiteError) -> HistoryRecord? {
        var found: HistoryRecord?
        // Each entry's rows newest first, the first one kept ends the search.
        func search(_ rows: [(revision: Int64, id: Int64)]) throws(SQLiteError) -> Bool {
            for row in rows.reversed() where row.revision <= revision {
                if let record = try record(id: row.id) {
                    found = record
                    return false
                }
            }
            return true
        }
        let columns = "revision, id, count, rows FROM history_index WHERE key_id = ?1"
        if let above = try statement("SELECT \(columns) AND revision > ?2 ORDER BY revision, id LIMIT 1") {
            try PackedRows.entries(of: above, [.integer(id), .integer(revision)]) { (rows) throws(SQLiteError) in try search(rows) }
        }
        if found == nil, let below = try statement("SELECT \(columns) AND revision <= ?2 ORDER BY revision DESC, id DESC") {
            try PackedRows.entries(of: below, [.integer(id), .integer(revision)]) { (rows) throws(SQLiteError) in try search(rows) }
        }
        return found
    }

    /// The stored row of key `id` with the highest revision at or below `revision`.
    private func lastRecord(ofKeyID id: Int64, atOrBefore revision: Int64) throws(SQLiteError) -> HistoryRecord? {
        var found: [HistoryRecord] = []
        if let record = try lastIndexedRecord(ofKeyID: id, atOrBefore: revision) { found.append(record) }
        try collect(statement("""
            SELECT \(HistoryRows.columns) FROM history h \(HistoryRows.joins) WHERE h.id > ?3 AND h.key_id = ?1 AND h.revision <= ?2 ORDER BY h.revision DESC LIMIT 1
            """), [.integer(id), .integer(revision), .integer(indexer.indexedThrough)], into: &found)
        return found.max { $0.revision < $1.revision }
    }

    /// `key`'s last stored record at or before `revision` (what it held then), and its latest.
    func records(of key: Key, atOrBefore revision: UInt64) throws(SQLiteError) -> (then: HistoryRecord?, latest: HistoryRecord?) {
        guard let id = try storedID(of: key) else { return (nil, nil) }
        let then = try lastRecord(ofKeyID: id, atOrBefore: Int64(bitPattern: min(revision, UInt64(Int64.max))))
        let latest = try lastRecord(ofKeyID: id, atOrBefore: Int64.max)
        return (then, latest)
    }

    /// The id of the first row whose time is at least `time` (``HistoryRecorder/nextID``: none).
    func firstRow(atOrAfter time: Int64) throws(SQLiteError) -> Int64 {
        try firstRow(probing: statement("SELECT id, time FROM history WHERE id >= ?1 ORDER BY id LIMIT 1"), atLeast: time)
    }

    /// A binary search over the rowids for the first row whose value in `probe` (its second
    /// column, for the first row at or above an id: ids have gaps) is at least `value`; each
    /// probe is one rowid lookup. Exact where the values never decrease with ids; where they
    /// do only within runs of rows (a commit's), it lands in the run holding `value`.
    func firstRow(probing probe: SQLiteStatement?, atLeast value: Int64) throws(SQLiteError) -> Int64 {
        guard let database, let probe else { return recorder.nextID }
        var low = Int64(try database.textRows("SELECT min(id) FROM history").first ?? "") ?? recorder.nextID, high = recorder.nextID
        while low < high {
            let middle = low + (high - low) / 2
            try probe.bind([.integer(middle)])
            guard try probe.step() else {
                high = middle
                continue
            }
            let (id, found) = (probe.integer(0), probe.integer(1))
            while try probe.step() {}
            if found >= value { high = middle } else { low = id + 1 }
        }
        return low
    }

    /// The revision of the last row committed before `time` (0: none).
    func revision(before time: Int64) throws(SQLiteError) -> UInt64 {
        guard let rowBefore = try statement("SELECT revision FROM history WHERE id < ?1 ORDER BY id DESC LIMIT 1") else { return 0 }
        try rowBefore.bind([.integer(try firstRow(atOrAfter: time))])
        guard try rowBefore.step() else { return 0 }
        let revision = UInt64(bitPattern: rowBefore.integer(0))
        while try rowBefore.step() {}
        return revision
    }
}
