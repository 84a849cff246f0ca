import CSQLite
import DBusValues
import PropBus

/// The key index (schema 11): one `history_index` entry per key per batch of rows, named by the
/// last of them (`key_id, revision, id`), counting the rows it holds that are kept (`count`) and
/// packing the others (`rows`). A batch's step inserts an entry per key it holds rather than per
/// row: with 16 writers' keys a batch of 512 rows is 16 B-tree insertions instead of 512, each
/// several thousand instructions into a large index (a batch of 512 distinct keys costs what it
/// did, an entry per row).
extension HistoryTable {
    /// A row of the tail, as its entry in the index needs it.
    struct IndexedRow: Equatable {
        var keyID: Int64
        var revision: Int64
        var id: Int64
    }

    /// The most tail rows kept in ``tailRows`` (a bound on memory, should steps fail for long):
    /// past it they are forgotten, and the next step reads the tail back from the table.
    static let maximumTailRows = 65_536

    /// The tail's rows, read back from `history` (when ``tailRows`` is not known: at open, or
    /// after a commit that failed or pruning that deleted rows of the tail).
    func readTail() throws(SQLiteError) -> [IndexedRow] {
        guard let readTailRows else { return [] }
        try readTailRows.bind([.integer(indexedThrough)])
        var rows: [IndexedRow] = []
        while try readTailRows.step() {
            rows.append(IndexedRow(keyID: readTailRows.integer(0), revision: readTailRows.integer(1), id: readTailRows.integer(2)))
        }
        return rows
    }

    /// Adds the entries of `rows` (the tail) to `history_index`: one per key, named by its last
    /// row in (revision, id) order, the others packed; in key order, so the insertions walk the
    /// index once.
    func addEntries(of rows: [IndexedRow]) throws(SQLiteError) {
        guard let insertEntry else { return }
        let sorted = rows.sorted { ($0.keyID, $0.revision, $0.id) < ($1.keyID, $1.revision, $1.id) }
        var start = sorted.startIndex
        while start < sorted.endIndex {
            var end = start + 1
            while end < sorted.endIndex, sorted[end].keyID == sorted[start].keyID { end += 1 }
            let last = sorted[end - 1]
            let packed = Self.pack(sorted[start..<end])
            try insertEntry.run([.integer(last.keyID), .integer(last.revision), .integer(last.id), .integer(Int64(end - start)),
                                 packed.isEmpty ? .null : .blob(packed)])
            start = end
        }
    }

    /// The rows of one key's entry but its last (which names it), newest first, each as the
    /// differences of its revision and id from the row after it (zigzag LEB128 varints): a
    /// key's rows of one batch are close together, so about two bytes a row.
    static func pack(_ rows: ArraySlice<IndexedRow>) -> [UInt8] {
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

    /// The entries `query` returns (columns: revision, id, count, rows), each as its rows kept,
    /// oldest first: its last `count` (a key's rows are deleted oldest first, so a partly pruned
    /// entry's deleted rows are its first ones).
    func keptRows(of query: SQLiteStatement, _ values: [SQLiteValue], each body: ([(revision: Int64, id: Int64)]) throws(SQLiteError) -> Bool) throws(SQLiteError) {
        try query.bind(values)
        while try query.step() {
            let rows = Self.unpack(revision: query.integer(0), id: query.integer(1), rows: query.blob(3))
            let kept = Array(rows.suffix(max(0, Int(query.integer(2)))))
            guard try body(kept) else {
                query.reset()
                return
            }
        }
    }

    /// Deletes up to `count` of the oldest rows of key `id`, indexed ones first (older than the
    /// tail's); returns how many went.
    func pruneOldestRows(ofKeyID id: Int64, count: Int) throws(SQLiteError) -> Int {
        guard let database, let entriesOfKey, let tailIDsOfKey, let deleteRow else { return 0 }
        var oldest: [Int64] = []
        // Read to the end before deleting: the trigger rewrites the entries being read.
        try keptRows(of: entriesOfKey, [.integer(id)]) { rows in
            oldest += rows.prefix(count - oldest.count).map(\.id)
            return oldest.count < count
        }
        if oldest.count < count {
            try tailIDsOfKey.bind([.integer(id), .integer(indexedThrough), .integer(Int64(count - oldest.count))])
            while try tailIDsOfKey.step() { oldest.append(tailIDsOfKey.integer(0)) }
        }
        var deleted = 0
        for row in oldest {
            try deleteRow.run([.integer(row)])
            deleted += Int(database.changes)
        }
        return deleted
    }
}
