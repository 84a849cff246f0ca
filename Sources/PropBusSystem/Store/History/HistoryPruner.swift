import CSQLite
import DBusValues
import PropBus

/// Between rounds, in small steps of their own: indexing the tail, deleting the oldest rows
/// past the bounds (rows, bytes, age, per key, each uid's `history-bytes`), and sweeping the
/// callers and keys no row names any more.
///
/// Owned by ``SQLiteHistory``, confined like it to the service's queue.
final class HistoryPruner {
    private let identities: HistoryIdentities
    private let indexer: HistoryIndexer
    private let usage: HistoryUsage
    private let recorder: HistoryRecorder
    private let lookups: HistoryLookups
    private let keyRows: KeyRowCounts
    private var database: SQLiteDatabase?
    /// The sweeps deleting callers and keys no row names, a batch per pruning step; keys in id
    /// order from `keySweepCursor`, run only when the tail is indexed (the key index then
    /// names every row's key).
    private var callerSweepPending = false
    private var keySweepPending = false
    private var keySweepCursor: Int64 = 0
    /// Uids past their quota a step found no row of to delete, with what they held then: not
    /// looked for again until that changes (else a step would run every few milliseconds).
    private var uidsWithoutRows: [UInt32: Int] = [:]
    private var pruneOldest: SQLiteStatement?
    private var pruneBefore: SQLiteStatement?
    private var deleteRow: SQLiteStatement?
    private var removeUnreferencedCallers: SQLiteStatement?
    private var keyCandidates: SQLiteStatement?
    private var keyIsReferenced: SQLiteStatement?
    private var removeKey: SQLiteStatement?

    init(identities: HistoryIdentities, indexer: HistoryIndexer, usage: HistoryUsage, recorder: HistoryRecorder,
         lookups: HistoryLookups, keyRows: KeyRowCounts) {
        self.identities = identities
        self.indexer = indexer
        self.usage = usage
        self.recorder = recorder
        self.lookups = lookups
        self.keyRows = keyRows
    }

    func attach(_ database: SQLiteDatabase) throws(SQLiteError) {
        self.database = database
        // The trigger deletes their index entries and takes their bytes off.
        pruneOldest = try database.prepare("DELETE FROM history WHERE id IN (SELECT id FROM history ORDER BY id LIMIT ?1)")
        pruneBefore = try database.prepare("DELETE FROM history WHERE id IN (SELECT id FROM history WHERE id < ?1 ORDER BY id LIMIT ?2)")
        deleteRow = try database.prepare("DELETE FROM history WHERE id = ?1")
        // A caller whose `last_row` is below the oldest row's id is named by no row.
        removeUnreferencedCallers = try database.prepare("DELETE FROM history_caller WHERE id IN (SELECT id FROM history_caller WHERE last_row < ?1 LIMIT ?2)")
        keyCandidates = try database.prepare("SELECT id FROM history_key WHERE id > ?1 ORDER BY id LIMIT ?2")
        // An entry counts at least one row: one counting none is deleted (the trigger).
        keyIsReferenced = try database.prepare("SELECT 1 FROM history_index WHERE key_id = ?1 LIMIT 1")
        removeKey = try database.prepare("DELETE FROM history_key WHERE id = ?1")
        callerSweepPending = false
        keySweepPending = false
        keySweepCursor = 0
        uidsWithoutRows = [:]
    }

    /// The uids whose changes hold more than their `history-bytes` quota.
    private func uidsOverQuota(_ options: HistoryOptions) -> [(uid: UInt32, excess: Int)] {
        guard options.maximumBytesPerUID != nil else { return [] }
        return usage.bytesByUID.compactMap { uid, held in
            guard uidsWithoutRows[uid] != held else { return nil }
            return options.quota(of: uid).flatMap { held > $0 ? (uid, held - $0) : nil }
        }.sorted { $0.uid < $1.uid }
    }

    /// Whether rows pass a bound, a batch waits to be indexed or a sweep has work: a pruning
    /// step then has work.
    func needsPruning(_ options: HistoryOptions, now: Int64) throws(SQLiteError) -> Bool {
        if usage.rows > options.maximumRows || (usage.rows > 0 && usage.bytes > (options.maximumBytes ?? .max)) || !keyRows.keysOverLimit.isEmpty
            || indexer.needsStep(batch: options.indexBatch) || callerSweepPending || !uidsOverQuota(options).isEmpty { return true }
        if keySweepPending, indexer.tailCount == 0 { return true }
        guard let age = options.maximumAge else { return false }
        return try usage.oldestRowTime().map { $0 < now - Int64(age) * 1_000_000_000 } ?? false
    }

    /// One step between rounds, in a transaction of its own: indexes the tail when
    /// ``HistoryOptions/indexBatch`` rows wait, then deletes at most
    /// ``HistoryOptions/pruneBatch`` rows for each bound (the oldest past the rows, the bytes
    /// and the age; a key's oldest past its bound; a uid's oldest past its quota), and sweeps a
    /// batch of callers and keys no row names. Returns whether work is left for another step.
    func prune(options: HistoryOptions) throws(SQLiteError) -> Bool {
        guard let database, let pruneOldest, let pruneBefore, !database.inTransaction else { return false }
        let now = HistoryRows.now()
        guard try needsPruning(options, now: now) else { return false }
        let rowsBefore = usage.rows
        var indexing = false
        try database.execute("BEGIN IMMEDIATE")
        do {
            indexing = indexer.needsStep(batch: options.indexBatch)
            if indexing {
                try usage.indexing()
                try indexer.index(through: recorder.nextID - 1)
            }
            var deleted = 0
            if usage.rows > options.maximumRows {
                try pruneOldest.run([.integer(Int64(min(usage.rows - options.maximumRows, options.pruneBatch)))])
                deleted += Int(database.changes)
            }
            if let maximum = options.maximumBytes, usage.rows > 0, usage.bytes > maximum {
                try pruneOldest.run([.integer(Int64(min(oldestRowsHolding(usage.bytes - maximum), options.pruneBatch)))])
                deleted += Int(database.changes)
            }
            if let age = options.maximumAge {
                let first = try lookups.firstRow(atOrAfter: now - Int64(age) * 1_000_000_000)
                try pruneBefore.run([.integer(first), .integer(Int64(options.pruneBatch))])
                deleted += Int(database.changes)
            }
            for (uid, excess) in uidsOverQuota(options).prefix(8) {
                let gone = try pruneOldestRows(ofUID: uid, holding: excess, at: options.pruneBatch)
                if gone == 0 { uidsWithoutRows[uid] = usage.bytesByUID[uid] }
                deleted += gone
            }
            // Rows the bounds above deleted are no longer in the counts per key.
            if deleted > 0 { keyRows.forget() }
            usage.deleted(deleted)
            if let limit = options.maximumPerKey {
                for key in keyRows.keysOverLimit.prefix(options.pruneBatch) {
                    let id = try identities.entry(of: key).id
                    let count = try keyRows.count(of: key, id: id, adding: 0)
                    guard count > limit else {
                        keyRows.set(key, to: count, limit: limit)
                        continue
                    }
                    let gone = try pruneOldestRows(ofKeyID: id, count: min(count - limit, options.pruneBatch))
                    usage.deleted(gone)
                    // None found to delete: the count was wrong. Counted again at the key's
                    // next write, rather than a step after step finding nothing.
                    keyRows.set(key, to: gone == 0 ? nil : count - gone, limit: limit)
                }
            }
            if usage.rows < rowsBefore {
                callerSweepPending = true
                keySweepPending = true
                indexer.rowsDeleted()
            }
            if callerSweepPending { try sweepCallers(batch: options.pruneBatch) }
            if keySweepPending, indexer.tailCount == 0 { try sweepKeys(batch: options.pruneBatch) }
            try database.execute("COMMIT")
            indexer.keep()
        } catch {
            try? database.execute("ROLLBACK")
            identities.forget()
            callerSweepPending = true
            keyRows.forget()
            usage.restore(rows: rowsBefore)
            indexer.restore()
            try? usage.reload(indexedThrough: indexer.indexedThrough)
            throw error
        }
        // Rows went: their bytes were taken off by the trigger, read back; else only the
        // tail's became the indexed rows'.
        if usage.rows < rowsBefore {
            try usage.reload(indexedThrough: indexer.indexedThrough)
        } else if indexing {
            usage.tailIndexed()
        }
        return try needsPruning(options, now: now)
    }

    /// How many of the oldest rows hold at least `bytes` (at most a batch's worth read).
    private func oldestRowsHolding(_ bytes: Int) throws(SQLiteError) -> Int {
        guard let query = try lookups.statement("""
            SELECT coalesce(length(old_value), 0) + coalesce(length(new_value), 0) FROM history ORDER BY id LIMIT 4096
            """) else { return 1 }
        try query.bind([])
        var rows = 0, held = 0
        while held < bytes, try query.step() {
            held += HistoryRows.bytes(old: Int(query.integer(0)), new: 0)
            rows += 1
        }
        query.reset()
        return max(rows, 1)
    }

    /// Deletes up to `count` of the oldest rows of key `id`, indexed ones first (older than the
    /// tail's); returns how many went. An entry may name rows gone already (a uid's bound took
    /// them): those are passed over.
    private func pruneOldestRows(ofKeyID id: Int64, count: Int) throws(SQLiteError) -> Int {
        guard let entries = try lookups.statement("SELECT revision, id, count, rows FROM history_index WHERE key_id = ?1 ORDER BY revision, id"),
              let tail = try lookups.statement("SELECT id FROM history WHERE id > ?2 AND key_id = ?1 ORDER BY revision, id LIMIT ?3")
        else { return 0 }
        return try deleteOldest(count: count, entries: entries, group: id, tail: tail)
    }

    /// Deletes the oldest rows of `uid`'s changes until they hold `excess` bytes fewer (or
    /// `batch` rows went); returns how many went.
    private func pruneOldestRows(ofUID uid: UInt32, holding excess: Int, at batch: Int) throws(SQLiteError) -> Int {
        guard let entries = try lookups.statement("SELECT revision, id, count, rows FROM history_by_uid WHERE uid = ?1 ORDER BY revision, id"),
              let tail = try lookups.statement("""
                SELECT h.id FROM history h WHERE h.id > ?2 AND h.caller IN (SELECT id FROM history_caller WHERE uid = ?1) ORDER BY h.revision, h.id LIMIT ?3
                """),
              let size = try lookups.statement("SELECT coalesce(length(old_value), 0) + coalesce(length(new_value), 0) FROM history WHERE id = ?1")
        else { return 0 }
        var freed = 0
        return try deleteOldest(count: batch, entries: entries, group: Int64(uid), tail: tail) { (row) throws(SQLiteError) in
            guard freed < excess else { return false }
            try size.bind([.integer(row)])
            if try size.step() { freed += HistoryRows.bytes(old: Int(size.integer(0)), new: 0) }
            size.reset()
            return true
        }
    }

    /// Deletes, oldest first, up to `count` rows of an index group (`entries`, by `group`) and
    /// then of its tail rows, while `shouldDelete` agrees; returns how many went.
    private func deleteOldest(count: Int, entries: SQLiteStatement, group: Int64, tail: SQLiteStatement,
                              shouldDelete: (Int64) throws(SQLiteError) -> Bool = { _ in true }) throws(SQLiteError) -> Int {
        guard let database, let deleteRow else { return 0 }
        var oldest: [Int64] = []
        // Read to the end before deleting: the trigger rewrites the entries being read. Rows
        // gone already are found so (no change) and passed over, so read more than `count`.
        try PackedRows.entries(of: entries, [.integer(group)]) { rows in
            oldest += rows.map(\.id)
            return oldest.count < count * 4
        }
        try tail.bind([.integer(group), .integer(indexer.indexedThrough), .integer(Int64(count))])
        while try tail.step() { oldest.append(tail.integer(0)) }
        var deleted = 0
        for row in oldest {
            guard deleted < count, try shouldDelete(row) else { break }
            try deleteRow.run([.integer(row)])
            deleted += Int(database.changes)
        }
        return deleted
    }

    /// Deletes up to `batch` callers whose `last_row` is below the oldest row's id (one range
    /// of an index): what keeps `history_caller` bounded by the rows.
    private func sweepCallers(batch: Int) throws(SQLiteError) {
        guard let database, let removeUnreferencedCallers else { return }
        let oldest = Int64(try database.textRows("SELECT min(id) FROM history").first ?? "") ?? recorder.nextID
        try removeUnreferencedCallers.run([.integer(oldest), .integer(Int64(batch))])
        let removed = Int(database.changes)
        // A cached caller may be one of them.
        if removed > 0 { identities.forgetCallers() }
        callerSweepPending = removed == batch
    }

    /// Deletes, of the next `batch` keys in id order, those no row names (a probe of the key
    /// index each; the tail is indexed, so it names every row's key). A sweep that reaches the
    /// last key is done.
    private func sweepKeys(batch: Int) throws(SQLiteError) {
        guard let keyCandidates, let keyIsReferenced, let removeKey else { return }
        try keyCandidates.bind([.integer(keySweepCursor), .integer(Int64(batch))])
        var candidates: [Int64] = []
        while try keyCandidates.step() { candidates.append(keyCandidates.integer(0)) }
        var removedSome = false
        for id in candidates {
            try keyIsReferenced.bind([.integer(id)])
            let referenced = try keyIsReferenced.step()
            while try keyIsReferenced.step() {}
            if !referenced {
                try removeKey.run([.integer(id)])
                removedSome = true
            }
        }
        if removedSome { identities.forgetKeys() }
        if candidates.count < batch {
            keySweepPending = false
            keySweepCursor = 0
        } else {
            keySweepCursor = candidates.last ?? 0
        }
    }
}
