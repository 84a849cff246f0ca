import CSQLite
import DBusValues
import Glibc
import PropBus

/// Reading history back: a key at a revision, one change, a prefix after a revision. Each
/// reads the index tables for the indexed rows and scans the tail (the rows above
/// ``HistoryTable/indexedThrough``, a range of rowids of at most about a batch).
extension HistoryTable {
    /// A row `h`'s key as `k` and its caller as `c`.
    private static let joins = "JOIN history_key k ON k.id = h.key_id LEFT JOIN history_caller c ON c.id = h.caller"

    /// `sql`, prepared once per attached database: a query for one key is a few page reads,
    /// and compiling it cost about as much.
    private func statement(_ sql: String) throws(SQLiteError) -> SQLiteStatement? {
        if let prepared = queries[sql] { return prepared }
        guard let database else { return nil }
        let prepared = try database.prepare(sql)
        queries[sql] = prepared
        return prepared
    }

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

    /// Runs `query` bound to `values`, appending its records to `found`.
    private func collect(_ query: SQLiteStatement?, _ values: [SQLiteValue], into found: inout [HistoryRecord]) throws(SQLiteError) {
        guard let query else { return }
        try query.bind(values)
        while try query.step() { if let record = Self.record(from: query) { found.append(record) } }
    }

    /// `key`'s id in `history_key` (`nil`: no row of it is kept).
    private func storedID(of key: Key) throws(SQLiteError) -> Int64? {
        guard let query = try statement("SELECT id FROM history_key WHERE key = ?1") else { return nil }
        try query.bind([.text(key.text)])
        guard try query.step() else { return nil }
        let id = query.integer(0)
        while try query.step() {}
        return id
    }

    /// The records of one change (``HistoryRecord/change``), persistent and transient.
    ///
    /// A change's rows are one commit's, and a commit's rows share its time. A change is its
    /// highest revision, and within a commit each change's id is above the last one's, so
    /// `max(change, revision)` never decreases from one commit to the next: a binary search
    /// over the rowids lands in the commit holding the change, whose rows (the run of its
    /// time) are then read. A deletion's row is the exception (its change is the key's old
    /// revision, below the row's): those are in `history_by_change`. The tail is scanned.
    func records(ofChange change: UInt64) throws(SQLiteError) -> [HistoryRecord] {
        var found = transientRecords.filter { $0.change == change }
        let id = Int64(bitPattern: change)
        // Three disjoint parts, oldest first: the indexed rows of other changes than
        // deletions (the commit's run), the indexed deletions' and the tail's.
        if let run = try commit(holdingChange: id) {
            try collect(statement("""
                SELECT \(Self.columns) FROM history h \(Self.joins)
                WHERE h.id >= ?2 AND h.id < ?3 AND h.id <= ?4 AND h.change = ?1 AND h.change >= h.revision ORDER BY h.id
                """), [.integer(id), .integer(run.lowerBound), .integer(run.upperBound), .integer(indexedThrough)], into: &found)
        }
        try collect(statement("SELECT \(Self.columns) FROM history_by_change i JOIN history h ON h.id = i.id \(Self.joins) WHERE i.change = ?1 ORDER BY i.id"),
                    [.integer(id)], into: &found)
        try collect(statement("SELECT \(Self.columns) FROM history h \(Self.joins) WHERE h.id > ?2 AND h.change = ?1 ORDER BY h.id"),
                    [.integer(id), .integer(indexedThrough)], into: &found)
        return found
    }

    /// The ids of the rows of the commit where `change`'s rows are, if it has any (see
    /// ``records(ofChange:)``): the run of rows around the binary search's landing that share
    /// its time.
    private func commit(holdingChange change: Int64) throws(SQLiteError) -> Range<Int64>? {
        let landing = try firstRow(probing: firstChangeFrom, atLeast: change)
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
        let after = try edge("SELECT id FROM history WHERE id > ?1 AND time <> ?2 ORDER BY id LIMIT 1") ?? nextID
        return (before + 1)..<after
    }

    /// The row `id`, with its key and caller (`nil`: not kept).
    private func record(id: Int64) throws(SQLiteError) -> HistoryRecord? {
        guard let query = try statement("SELECT \(Self.columns) FROM history h \(Self.joins) WHERE h.id = ?1") else { return nil }
        try query.bind([.integer(id)])
        guard try query.step() else { return nil }
        let found = Self.record(from: query)
        query.reset()
        return found
    }

    /// The indexed row of key `id` with the highest revision at or below `revision` (then the
    /// highest id): in the first entry named above `revision`, whose first rows may be at or
    /// below it, else in the last entry named at or below it (entries hold disjoint runs of the
    /// key's rows, in order).
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
            try keptRows(of: above, [.integer(id), .integer(revision)]) { (rows) throws(SQLiteError) in try search(rows) }
        }
        if found == nil, let below = try statement("SELECT \(columns) AND revision <= ?2 ORDER BY revision DESC, id DESC") {
            try keptRows(of: below, [.integer(id), .integer(revision)]) { (rows) throws(SQLiteError) in try search(rows) }
        }
        return found
    }

    /// The stored row of key `id` with the highest revision at or below `revision`.
    private func lastRecord(ofKeyID id: Int64, atOrBefore revision: Int64) throws(SQLiteError) -> HistoryRecord? {
        var found: [HistoryRecord] = []
        if let record = try lastIndexedRecord(ofKeyID: id, atOrBefore: revision) { found.append(record) }
        try collect(statement("""
            SELECT \(Self.columns) FROM history h \(Self.joins) WHERE h.id > ?3 AND h.key_id = ?1 AND h.revision <= ?2 ORDER BY h.revision DESC LIMIT 1
            """), [.integer(id), .integer(revision), .integer(indexedThrough)], into: &found)
        return found.max { $0.revision < $1.revision }
    }

    /// `key`'s last record at or before `revision` (what it held then), and its latest record.
    func records(of key: Key, atOrBefore revision: UInt64) throws(SQLiteError) -> (then: HistoryRecord?, latest: HistoryRecord?) {
        var then = transientRecords.last { $0.key == key && $0.revision <= revision }
        var latest = transientRecords.last { $0.key == key }
        guard let id = try storedID(of: key) else { return (then, latest) }
        if let record = try lastRecord(ofKeyID: id, atOrBefore: Int64(bitPattern: min(revision, UInt64(Int64.max)))),
           record.revision >= (then?.revision ?? 0) { then = record }
        if let record = try lastRecord(ofKeyID: id, atOrBefore: Int64.max), record.revision >= (latest?.revision ?? 0) { latest = record }
        return (then, latest)
    }

    /// Up to `limit` records of keys starting with `prefix` (a key, or a group with its dot)
    /// whose revision is above `after`, oldest first; persistent and transient ones together.
    func records(prefix: String, after: UInt64, limit: Int) throws(SQLiteError) -> [HistoryRecord] {
        var found: [HistoryRecord] = []
        let bound: [SQLiteValue] = [.text(prefix), .text(prefix + "\u{10FFFF}"), .integer(Int64(bitPattern: after)), .integer(Int64(limit))]
        // The keys in the prefix are a range of `history_key`'s unique index; each one's
        // entries holding rows after `after` a range of the key index (those named after it).
        // Their rows are sorted, and only the first `limit` read. The tail's rows (newer) come
        // after.
        if let entries = try statement("""
            SELECT revision, id, count, rows FROM history_index
            WHERE key_id IN (SELECT id FROM history_key WHERE key >= ?1 AND key < ?2) AND revision > ?3
            """) {
            var rows: [(revision: Int64, id: Int64)] = []
            let after = Int64(bitPattern: after)
            try keptRows(of: entries, Array(bound.prefix(3))) { kept in
                rows += kept.lazy.filter { $0.revision > after }
                return true
            }
            rows.sort { ($0.revision, $0.id) < ($1.revision, $1.id) }
            for row in rows {
                guard found.count < limit else { break }
                if let record = try record(id: row.id) { found.append(record) }
            }
        }
        try collect(statement("""
            SELECT \(Self.columns) FROM history h \(Self.joins)
            WHERE h.id > ?5 AND k.key >= ?1 AND k.key < ?2 AND h.revision > ?3 ORDER BY h.revision, h.id LIMIT ?4
            """), bound + [.integer(indexedThrough)], into: &found)
        for record in transientRecords where record.revision > after && record.key.text.hasPrefix(prefix) {
            found.append(record)
        }
        found.sort { $0.revision < $1.revision }
        return Array(found.prefix(limit))
    }
}
