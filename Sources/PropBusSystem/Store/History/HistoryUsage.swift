import CSQLite
import PropBus

/// How much the store's history holds: its rows, its bytes (``HistoryRows/bytes(old:new:)``
/// per row), and the bytes of each uid's changes (the `history-bytes` quota).
///
/// The bytes of the indexed rows live in `meta` (`history_bytes`, and `history_bytes_uid_N` per
/// uid): the step that indexes a batch adds the batch's, in its transaction, and the trigger
/// that forgets a deleted indexed row takes its bytes off. The tail's (the rows above the last
/// indexed one) are summed when the store opens, a range of rowids of about a batch, and kept
/// in memory from then on. So no commit writes a page for them, and none needs a scan of history.
///
/// Owned by ``SQLiteHistory``, confined like it to the service's queue.
final class HistoryUsage {
    /// Rows in the table, counted once at open and kept up to date.
    private(set) var rows = 0
    /// The indexed rows' bytes, as `meta` holds them, together and by uid.
    private var indexed = 0
    private var indexedByUID: [UInt32: Int] = [:]
    /// The tail's bytes, together and by uid.
    private var tail = 0
    private var tailByUID: [UInt32: Int] = [:]
    /// What the commit under way adds: rows, bytes, bytes by uid.
    private var pendingRows = 0
    private var pendingBytes = 0
    private var pendingByUID: [UInt32: Int] = [:]
    private var readIndexed: SQLiteStatement?
    private var sumRows: SQLiteStatement?
    private var add: SQLiteStatement?
    private var database: SQLiteDatabase?
    /// The oldest row's time (`nil`: not read yet, or no rows), for ``HistoryOptions/maximumAge``.
    private var oldestTime: Int64?
    private var oldestTimeIsKnown = false

    static let totalName = "history_bytes"
    static let uidPrefix = "history_bytes_uid_"

    /// What a row's value columns hold, and the allowance for the rest (the trigger's sum too).
    static let rowBytes = "coalesce(length(h.old_value), 0) + coalesce(length(h.new_value), 0) + \(HistoryRecord.fieldAllowance)"

    /// Reads the counts at open: the tail (rows above `indexedThrough`, `tailRows` of them) is
    /// summed, the rest read from `meta` and the key index.
    func attach(_ database: SQLiteDatabase, indexedThrough: Int64, tailRows: Int) throws(SQLiteError) {
        self.database = database
        readIndexed = try database.prepare("SELECT name, value FROM meta WHERE name >= '\(Self.totalName)' AND name < '\(Self.totalName)~'")
        sumRows = try database.prepare("""
            SELECT c.uid, sum(\(Self.rowBytes)) FROM history h LEFT JOIN history_caller c ON c.id = h.caller WHERE h.id > ?1 AND h.id <= ?2 GROUP BY c.uid
            """)
        add = try database.prepare("INSERT INTO meta (name, value) VALUES (?1, ?2) ON CONFLICT (name) DO UPDATE SET value = value + excluded.value")
        // Counted in the narrow index, not `history` itself, which has no index and whose count
        // would read every row's page at each start: an entry holds one row unless it packs
        // others, and those are indexed on their own (`history_index_packed`). `count(*)`
        // counts an index's cells without reading them; `sum(count)` read each one.
        let entries = Int(try database.textRows("SELECT count(*) FROM history_index").first ?? "0") ?? 0
        let packed = Int(try database.textRows("SELECT coalesce(sum(count - 1), 0) FROM history_index INDEXED BY history_index_packed WHERE rows IS NOT NULL").first ?? "0") ?? 0
        rows = entries + packed + tailRows
        try reload(indexedThrough: indexedThrough)
        forgetOldestTime()
    }

    /// Reads the indexed rows' bytes from `meta` and sums the tail's again (at open, after a
    /// step: its trigger took some off, or it deleted rows of the tail, or indexed them).
    func reload(indexedThrough: Int64) throws(SQLiteError) {
        guard let readIndexed, let sumRows else { return }
        try readIndexed.bind([])
        indexed = 0
        indexedByUID.removeAll(keepingCapacity: true)
        while try readIndexed.step() {
            let name = readIndexed.text(0) ?? "", value = Int(readIndexed.integer(1))
            if name == Self.totalName {
                indexed = value
            } else if name.hasPrefix(Self.uidPrefix), let uid = UInt32(name.dropFirst(Self.uidPrefix.count)), value > 0 {
                indexedByUID[uid] = value
            }
        }
        try sumRows.bind([.integer(indexedThrough), .integer(.max)])
        tail = 0
        tailByUID.removeAll(keepingCapacity: true)
        while try sumRows.step() {
            let bytes = Int(sumRows.integer(1))
            tail += bytes
            if !sumRows.isNull(0) { tailByUID[UInt32(truncatingIfNeeded: sumRows.integer(0))] = bytes }
        }
    }

    /// Adds the tail's bytes (the batch being indexed: every row above the last indexed one,
    /// known exactly in memory) to `meta`, in the step's transaction; ``tailIndexed()`` counts them
    /// as indexed once the step is committed.
    func indexing() throws(SQLiteError) {
        guard let add else { return }
        try add.run([.text(Self.totalName), .integer(Int64(tail))])
        for (uid, bytes) in tailByUID { try add.run([.text(Self.uidPrefix + String(uid)), .integer(Int64(bytes))]) }
    }

    /// The step that ran ``indexing()`` was committed and deleted no row: the tail's bytes are
    /// the indexed rows' now (a step that deleted rows reads them back instead).
    func tailIndexed() {
        indexed += tail
        for (uid, bytes) in tailByUID { indexedByUID[uid, default: 0] += bytes }
        tail = 0
        tailByUID.removeAll(keepingCapacity: true)
    }

    /// The bytes of every row.
    var bytes: Int { indexed + tail }

    /// The bytes of the rows of each uid's changes (rows without a caller uid count in ``bytes`` only).
    var bytesByUID: [UInt32: Int] { indexedByUID.merging(tailByUID, uniquingKeysWith: +) }

    /// What `uid`'s changes hold, with the commit under way's.
    func bytes(of uid: UInt32) -> Int { (indexedByUID[uid] ?? 0) + (tailByUID[uid] ?? 0) + (pendingByUID[uid] ?? 0) }

    /// A row written by the commit under way: `bytes` (``HistoryRows/bytes(old:new:)``) for `uid`.
    func added(bytes: Int, uid: UInt32?) {
        pendingRows += 1
        pendingBytes += bytes
        if let uid { pendingByUID[uid, default: 0] += bytes }
    }

    /// The commit under way was committed: its rows count now, in the tail.
    func committed(time: Int64) {
        rows += pendingRows
        tail += pendingBytes
        for (uid, added) in pendingByUID { tailByUID[uid, default: 0] += added }
        if pendingRows > 0, oldestTimeIsKnown, oldestTime == nil { oldestTime = time }
        discardPending()
    }

    /// The commit under way was rolled back: nothing it added counts.
    func discardPending() {
        pendingRows = 0
        pendingBytes = 0
        pendingByUID.removeAll(keepingCapacity: true)
    }

    /// A pruning step deleted `count` rows (their bytes are read back with ``reload(indexedThrough:)``).
    func deleted(_ count: Int) {
        rows -= count
        if count > 0 { forgetOldestTime() }
    }

    /// A pruning step was rolled back: `rows` is what it was before.
    func restore(rows: Int) { self.rows = rows }

    func forgetOldestTime() {
        oldestTimeIsKnown = false
        oldestTime = nil
    }

    /// The oldest row's time, read once after each change of the oldest row.
    func oldestRowTime() throws(SQLiteError) -> Int64? {
        if !oldestTimeIsKnown, let database {
            oldestTime = try database.textRows("SELECT time FROM history ORDER BY id LIMIT 1").first.flatMap { Int64($0) }
            oldestTimeIsKnown = true
        }
        return oldestTime
    }
}
