import CSQLite
import PropBus

/// A commit's rows inserted several to a statement: with 16 writers a commit carries a few
/// writers' rows, and each execution of a one-row INSERT paid its own start (the statement's
/// transaction check, its cursor opened and a seek from the root to the table's end) and end,
/// about half of the row's cost in SQLite; in one execution the rows after the first are
/// appended where the cursor already is.
extension HistoryTable {
    /// A prepared INSERT of ``rows`` rows into `history` (10 parameters a row: the id, then
    /// ``storedColumns``), and what each row's kind and via parameters hold bound (`nil`: not
    /// bound since it was prepared): bound again only when they change, as binding text copies it.
    final class RowInsert {
        let statement: SQLiteStatement
        let rows: Int
        var kinds: [String?]
        var vias: [String?]

        init(_ database: SQLiteDatabase, rows: Int) throws(SQLiteError) {
            let values = (0..<rows).map { row in "(" + (1...10).map { "?\(row * 10 + $0)" }.joined(separator: ", ") + ")" }
            statement = try database.prepare("INSERT INTO history (id, \(HistoryTable.storedColumns)) VALUES \(values.joined(separator: ", "))")
            self.rows = rows
            kinds = Array(repeating: nil, count: rows)
            vias = Array(repeating: nil, count: rows)
        }

        /// A bind that failed may have left its parameter as it was.
        func forgetBound() {
            for row in 0..<rows {
                kinds[row] = nil
                vias[row] = nil
            }
        }
    }

    /// The rows per statement, largest first; a commit's rows go in as few statements as
    /// these sizes allow (11 rows: 8, 2 and 1).
    static let rowsPerInsert = [8, 4, 2, 1]

    /// The rows of one commit being bound: the statement taking the next ones, the row of it
    /// bound next, and the spans of ``rowBytes`` holding each bound row's old and new value.
    struct RowBatch {
        /// Rows of the commit not bound yet.
        var remaining: Int
        var insert: RowInsert?
        var row = 0
        var values: [Range<Int>?] = []
        /// The keys of the commit's rows and how many each, for ``HistoryOptions/maximumPerKey``.
        var keys: [(key: Key, id: Int64, rows: Int)] = []
    }

    /// Appends `value` to `bytes` and its span there to `spans` (`nil`: NULL).
    private static func stage(_ value: [UInt8]?, into spans: inout [Range<Int>?], _ bytes: inout [UInt8]) {
        guard let value else { return spans.append(nil) }
        spans.append(bytes.count..<bytes.count + value.count)
        bytes.append(contentsOf: value)
    }

    /// The statement for the next rows of a commit with `remaining` rows to go.
    func rowInsert(for remaining: Int) -> RowInsert {
        rowInserts.first { $0.rows <= remaining } ?? rowInserts[rowInserts.count - 1]
    }

    /// Binds one row into the batch's statement, starting one when none is under way, and
    /// runs it once its last row is bound. `old` and `new` are copied into ``rowBytes`` (bound
    /// in place when the statement runs).
    func bindRow(_ batch: inout RowBatch, id: Int64, change: Int64, revision: Int64, time: Int64, keyID: Int64, kind: String,
                 old: [UInt8]?, new: [UInt8]?, via: String, caller: Int64?) throws(SQLiteError) {
        if batch.insert == nil {
            batch.insert = rowInsert(for: batch.remaining)
            batch.row = 0
            batch.values.removeAll(keepingCapacity: true)
            rowBytes.removeAll(keepingCapacity: true)
        }
        guard let insert = batch.insert else { return }
        let statement = insert.statement, row = batch.row, base = Int32(row * 10)
        try statement.bind(.integer(id), at: base + 1)
        try statement.bind(.integer(change), at: base + 2)
        try statement.bind(.integer(revision), at: base + 3)
        try statement.bind(.integer(time), at: base + 4)
        try statement.bind(.integer(keyID), at: base + 5)
        if insert.kinds[row] != kind {
            try statement.bind(.text(kind), at: base + 6)
            insert.kinds[row] = kind
        }
        Self.stage(old, into: &batch.values, &rowBytes)
        Self.stage(new, into: &batch.values, &rowBytes)
        if insert.vias[row] != via {
            try statement.bind(.text(via), at: base + 9)
            insert.vias[row] = via
        }
        try statement.bind(caller.map { .integer($0) } ?? .null, at: base + 10)
        batch.row += 1
        batch.remaining -= 1
        if batch.row == insert.rows {
            batch.insert = nil
            // The buffer's pointer (not `withUnsafeBytes`, whose error is untyped).
            try rowBytes.withUnsafeBufferPointer { (bytes) throws(SQLiteError) in
                // Values 7 and 8 of each row.
                try statement.run(borrowing: UnsafeRawBufferPointer(bytes), blobs: batch.values) { Int32($0 / 2 * 10 + 7 + $0 % 2) }
            }
        }
    }
}
