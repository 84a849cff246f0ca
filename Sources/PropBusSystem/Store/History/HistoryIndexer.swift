import CSQLite
import DBusValues
import PropBus

/// History's index tables and the rows not in them yet (the "tail").
///
/// A commit writes each row once, into `history` (its rowid the row's id, growing), and no
/// index entry. A step between rounds (``index(into:)``) adds the tail's entries for a batch of
/// rows at once: per key (`history_index`) and per caller uid (`history_by_uid`), one entry per
/// key or uid per batch, named by its last row (`…, revision, id`), counting its rows kept
/// (`count`) and packing the others (``PackedRows``); and the deletions, whose change is below
/// their revision, by change (`history_by_change`). Queries read the index tables and scan the
/// tail, a range of rowids above ``indexedThrough``.
///
/// Owned by ``SQLiteHistory``, confined like it to the service's queue.
final class HistoryIndexer {
    /// A row of the tail, as its entries need it.
    struct TailRow: Equatable {
        var keyID: Int64
        var uid: Int64?
        var revision: Int64
        var id: Int64
    }

    /// The highest id whose row has its index entries (`meta`'s `history_indexed`); the rows
    /// above it are the tail, which queries scan.
    private(set) var indexedThrough: Int64 = 0
    /// Rows in the tail, counted at open and kept up to date (an upper bound: pruning may
    /// delete some).
    private(set) var tailCount = 0
    /// The tail's rows as the commits wrote them, for the next step's entries without reading
    /// them back (`nil`: not known, read back then: at open, after a commit that failed, after
    /// pruning deleted rows of the tail, or past ``maximumTailRows``).
    private var tailRows: [TailRow]? = []
    /// Whether the tail may hold a row whose change is below its revision (a deletion's), the
    /// only rows `history_by_change` indexes: unknown (true) at open, then known from the rows
    /// written, so a step does not read the whole tail again to find none.
    private var tailMayHoldDeletions = true
    /// What a step that was rolled back restores.
    private var saved: (indexedThrough: Int64, tailCount: Int, tailRows: [TailRow]?, deletions: Bool)?
    private var readTailRows: SQLiteStatement?
    private var insertKeyEntry: SQLiteStatement?
    private var insertUIDEntry: SQLiteStatement?
    private var indexTailByChange: SQLiteStatement?
    private var saveIndexed: SQLiteStatement?

    /// The most tail rows kept in ``tailRows`` (a bound on memory, should steps fail for long):
    /// past it they are forgotten, and the next step reads the tail back from the table.
    static let maximumTailRows = 65_536

    func attach(_ database: SQLiteDatabase) throws(SQLiteError) {
        readTailRows = try database.prepare("""
            SELECT h.key_id, c.uid, h.revision, h.id FROM history h LEFT JOIN history_caller c ON c.id = h.caller WHERE h.id > ?1 ORDER BY h.id
            """)
        insertKeyEntry = try database.prepare("INSERT INTO history_index (key_id, revision, id, count, rows) VALUES (?1, ?2, ?3, ?4, ?5)")
        insertUIDEntry = try database.prepare("INSERT INTO history_by_uid (uid, revision, id, count, rows) VALUES (?1, ?2, ?3, ?4, ?5)")
        // Only the rows of deletions, whose change is below their revision: the others are
        // found by a binary search (``HistoryLookups/records(ofChange:)``).
        indexTailByChange = try database.prepare("INSERT INTO history_by_change (change, id) SELECT change, id FROM history WHERE id > ?1 AND change < revision")
        saveIndexed = try database.prepare("INSERT OR REPLACE INTO meta (name, value) VALUES ('history_indexed', ?1)")
        tailMayHoldDeletions = true
        indexedThrough = Int64(try database.textRows("SELECT value FROM meta WHERE name = 'history_indexed'").first ?? "0") ?? 0
        tailCount = Int(try database.textRows("SELECT count(*) FROM history WHERE id > \(indexedThrough)").first ?? "0") ?? 0
        tailRows = tailCount == 0 ? [] : nil
    }

    /// A row a commit wrote (its id above every indexed one).
    func added(_ row: TailRow, isDeletion: Bool) {
        if isDeletion { tailMayHoldDeletions = true }
        if tailRows != nil {
            if tailCount < Self.maximumTailRows { tailRows!.append(row) } else { tailRows = nil }
        }
        tailCount += 1
    }

    /// The commit that wrote the rows ``added(_:isDeletion:)`` was told of was rolled back: they
    /// are not in the table, but they are in ``tailRows`` (the count stays an upper bound).
    func commitFailed() {
        tailRows = nil
    }

    /// Pruning deleted rows: some may have been the tail's.
    func rowsDeleted() {
        if tailCount > 0 { tailRows = nil }
    }

    /// Whether a batch waits to be indexed.
    func needsStep(batch: Int) -> Bool { tailCount > 0 && tailCount >= batch }

    /// Indexes the tail, in the transaction of the step under way (a batch of whole commits:
    /// steps run between rounds); ``restore()`` undoes what it did here if the step is rolled back.
    func index(through lastID: Int64) throws(SQLiteError) {
        guard let indexTailByChange, let saveIndexed else { return }
        saved = (indexedThrough, tailCount, tailRows, tailMayHoldDeletions)
        let rows: [TailRow]
        // Not `??`: its autoclosure would throw an untyped error.
        if let tailRows { rows = tailRows } else { rows = try readTail() }
        try addEntries(of: rows)
        tailRows = []
        if tailMayHoldDeletions { try indexTailByChange.run([.integer(indexedThrough)]) }
        tailMayHoldDeletions = false
        indexedThrough = lastID
        try saveIndexed.run([.integer(indexedThrough)])
        tailCount = 0
    }

    /// The step that ran ``index(through:)`` was rolled back.
    func restore() {
        guard let saved else { return }
        (indexedThrough, tailCount, tailRows, tailMayHoldDeletions) = saved
        self.saved = nil
    }

    /// The step that ran ``index(through:)`` was committed.
    func keep() { saved = nil }

    /// The tail's rows, read back from `history`.
    private func readTail() throws(SQLiteError) -> [TailRow] {
        guard let readTailRows else { return [] }
        try readTailRows.bind([.integer(indexedThrough)])
        var rows: [TailRow] = []
        while try readTailRows.step() {
            rows.append(TailRow(keyID: readTailRows.integer(0), uid: readTailRows.isNull(1) ? nil : readTailRows.integer(1),
                                revision: readTailRows.integer(2), id: readTailRows.integer(3)))
        }
        return rows
    }

    /// Adds the entries of `rows` to `history_index` (one per key) and `history_by_uid` (one per
    /// caller uid), each named by its last row in (revision, id) order, the others packed; in
    /// key (uid) order, so the insertions walk each index once.
    private func addEntries(of rows: [TailRow]) throws(SQLiteError) {
        guard let insertKeyEntry, let insertUIDEntry else { return }
        try Self.insertEntries(of: rows.map { (group: $0.keyID, revision: $0.revision, id: $0.id) }, with: insertKeyEntry)
        try Self.insertEntries(of: rows.compactMap { row in row.uid.map { (group: $0, revision: row.revision, id: row.id) } }, with: insertUIDEntry)
    }

    private static func insertEntries(of rows: [(group: Int64, revision: Int64, id: Int64)], with insert: SQLiteStatement) throws(SQLiteError) {
        let sorted = rows.sorted { ($0.group, $0.revision, $0.id) < ($1.group, $1.revision, $1.id) }
        var start = sorted.startIndex
        while start < sorted.endIndex {
            var end = start + 1
            while end < sorted.endIndex, sorted[end].group == sorted[start].group { end += 1 }
            let last = sorted[end - 1]
            let packed = PackedRows.pack(sorted[start..<end].map { (revision: $0.revision, id: $0.id) })
            try insert.run([.integer(last.group), .integer(last.revision), .integer(last.id), .integer(Int64(end - start)),
                            packed.isEmpty ? .null : .blob(packed)])
            start = end
        }
    }
}

/// The rows of one index entry but its last (which names it), newest first, each as the
/// differences of its revision and id from the row after it (zigzag LEB128 varints): a key's
/// (a uid's) rows of one batch are close together, so about two bytes a row.
enum PackedRows {
    static func pack(_ rows: [(revision: Int64, id: Int64)]) -> [UInt8] {
        var bytes: [UInt8] = []
        guard rows.count > 1 else { return bytes }
        bytes.reserveCapacity((rows.count - 1) * 3)
        var next = rows[rows.endIndex - 1]
        for row in rows.dropLast().reversed() {
            Varint.append(zigzag(next.revision &- row.revision), to: &bytes)
            Varint.append(zigzag(next.id &- row.id), to: &bytes)
            next = row
        }
        return bytes
    }

    /// An entry's rows, oldest first: the packed ones (``pack(_:)``) and the one naming it. A
    /// malformed blob yields the rows read before the damage.
    static func unpack(revision: Int64, id: Int64, rows bytes: [UInt8]) -> [(revision: Int64, id: Int64)] {
        var rows: [(revision: Int64, id: Int64)] = [(revision, id)]
        var position = 0, next = (revision: revision, id: id)
        while position < bytes.count {
            guard let revisionStep = Varint.read(bytes, at: &position), let idStep = Varint.read(bytes, at: &position) else { break }
            next = (next.revision &- unzigzag(revisionStep), next.id &- unzigzag(idStep))
            rows.append(next)
        }
        return rows.reversed()
    }

    private static func zigzag(_ value: Int64) -> UInt64 { UInt64(bitPattern: (value << 1) ^ (value >> 63)) }

    private static func unzigzag(_ value: UInt64) -> Int64 { Int64(bitPattern: value >> 1) ^ -Int64(bitPattern: value & 1) }

    /// The entries `query` returns (columns: revision, id, count, rows), each as every row it
    /// names, oldest first, until `body` returns `false`. Some may be gone: `count` says how
    /// many are kept, not which (a key's oldest rows go first with its own bound, but a uid's
    /// bound takes its rows from the middle of a key's), so a reader looks each one up.
    static func entries(of query: SQLiteStatement, _ values: [SQLiteValue], each body: ([(revision: Int64, id: Int64)]) throws(SQLiteError) -> Bool) throws(SQLiteError) {
        try query.bind(values)
        while try query.step() {
            let rows = unpack(revision: query.integer(0), id: query.integer(1), rows: query.blob(3))
            guard try body(rows) else {
                query.reset()
                return
            }
        }
    }
}
