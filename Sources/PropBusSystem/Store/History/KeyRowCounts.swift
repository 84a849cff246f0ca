import CSQLite
import PropBus

/// The rows each key has in history, for ``HistoryOptions/maximumPerKey``: counted (its index
/// entries' counts and the tail) when a key is first written, then kept up to date; forgotten
/// when other pruning deleted rows. The keys past the bound wait for the next pruning step.
///
/// Owned by ``SQLiteHistory``, confined like it to the service's queue.
final class KeyRowCounts {
    private let indexer: HistoryIndexer
    private var rowsOfKey: [Key: Int] = [:]
    /// Keys with more rows than the bound, for the next pruning step.
    private(set) var keysOverLimit: Set<Key> = []
    private var countOfKey: SQLiteStatement?

    init(indexer: HistoryIndexer) {
        self.indexer = indexer
    }

    func attach(_ database: SQLiteDatabase) throws(SQLiteError) {
        forget()
        keysOverLimit.removeAll()
        countOfKey = try database.prepare("""
            SELECT (SELECT coalesce(sum(count), 0) FROM history_index WHERE key_id = ?1) + (SELECT count(*) FROM history WHERE id > ?2 AND key_id = ?1)
            """)
    }

    /// A row of `key` (id `id`) was just inserted.
    func added(to key: Key, id: Int64, limit: Int) throws(SQLiteError) {
        if try count(of: key, id: id, adding: 1) > limit { keysOverLimit.insert(key) }
    }

    /// `key`'s rows plus `added`: counted the first time (the row just inserted is counted
    /// already, hence `added` taken off the table's count), then kept.
    func count(of key: Key, id: Int64, adding added: Int) throws(SQLiteError) -> Int {
        var count: Int
        if let known = rowsOfKey[key] {
            count = known
        } else if let countOfKey {
            try countOfKey.bind([.integer(id), .integer(indexer.indexedThrough)])
            count = try countOfKey.step() ? Int(countOfKey.integer(0)) - added : 0
            while try countOfKey.step() {}
        } else {
            count = 0
        }
        count += added
        rowsOfKey[key] = count
        return count
    }

    /// `key` holds `count` rows after a step deleted some (`nil`: not known, counted again).
    func set(_ key: Key, to count: Int?, limit: Int) {
        rowsOfKey[key] = count
        if (count ?? 0) <= limit { keysOverLimit.remove(key) }
    }

    /// Forgets every count (rows went that no count followed).
    func forget() {
        rowsOfKey.removeAll()
    }
}
