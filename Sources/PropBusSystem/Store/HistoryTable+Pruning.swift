import CSQLite
import DBusValues
import Glibc
import PropBus

/// Between rounds: indexing the tail, pruning past the bounds and sweeping the callers and keys
/// no row names; and finding a time (rows' times never decrease, so a binary search).
extension HistoryTable {
    /// Whether rows pass a bound (count, age, per key), a batch waits to be indexed or a sweep
    /// has work: a pruning step then has work.
    func needsPruning(_ options: HistoryOptions, now: Int64) throws(SQLiteError) -> Bool {
        if rowCount > options.maximumRows || !keysOverLimit.isEmpty || tailCount >= options.indexBatch || callerSweepPending { return true }
        if keySweepPending, tailCount == 0 { return true }
        guard let age = options.maximumAge, let database else { return false }
        if !oldestTimeIsKnown {
            oldestTime = try database.textRows("SELECT time FROM history ORDER BY id LIMIT 1").first.flatMap { Int64($0) }
            oldestTimeIsKnown = true
        }
        return oldestTime.map { $0 < now - Int64(age) * 1_000_000_000 } ?? false
    }

    /// One step between rounds, in a transaction of its own: indexes the tail when
    /// ``HistoryOptions/indexBatch`` rows wait, then deletes at most
    /// ``HistoryOptions/pruneBatch`` of the oldest rows past the row bound, as many past the
    /// age, and the oldest rows of up to that many keys past their bound, and sweeps a batch of
    /// callers and keys no row names. Returns whether work is left for another step.
    func prune(options: HistoryOptions) throws(SQLiteError) -> Bool {
        guard let database, let pruneOldest, let pruneBefore, let indexTailByChange, let saveIndexed,
              !database.inTransaction else { return false }
        let now = Self.now()
        guard try needsPruning(options, now: now) else { return false }
        let rowsBefore = rowCount, tailBefore = tailCount, indexedBefore = indexedThrough, deletionsBefore = tailMayHoldDeletions
        let tailRowsBefore = tailRows
        try database.execute("BEGIN IMMEDIATE")
        do {
            if tailCount > 0, tailCount >= options.indexBatch {
                // Not `??`: its autoclosure would throw an untyped error.
                if let tailRows { try addEntries(of: tailRows) } else { try addEntries(of: readTail()) }
                tailRows = []
                if tailMayHoldDeletions { try indexTailByChange.run([.integer(indexedThrough)]) }
                tailMayHoldDeletions = false
                indexedThrough = nextID - 1
                try saveIndexed.run([.integer(indexedThrough)])
                tailCount = 0
            }
            var deletedSome = false
            if rowCount > options.maximumRows {
                try pruneOldest.run([.integer(Int64(min(rowCount - options.maximumRows, options.pruneBatch)))])
                rowCount -= Int(database.changes)
                deletedSome = deletedSome || database.changes > 0
            }
            if let age = options.maximumAge {
                let first = try firstRow(atOrAfter: now - Int64(age) * 1_000_000_000)
                try pruneBefore.run([.integer(first), .integer(Int64(options.pruneBatch))])
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
                    let id = try entry(of: key).id
                    let count = try self.count(of: key, id: id, adding: 0)
                    if count > limit {
                        let deleted = try pruneOldestRows(ofKeyID: id, count: min(count - limit, options.pruneBatch))
                        rowCount -= deleted
                        rowsOfKey[key] = count - deleted
                        oldestTimeIsKnown = false
                        // None found to delete: the count was wrong. Counted again at the key's
                        // next write, rather than a step after step finding nothing.
                        if deleted == 0 { rowsOfKey[key] = nil }
                    }
                    if (rowsOfKey[key] ?? 0) <= limit { keysOverLimit.remove(key) }
                }
            }
            if rowCount < rowsBefore {
                callerSweepPending = true
                keySweepPending = true
                // Some may have been the tail's.
                if tailCount > 0 { tailRows = nil }
            }
            if callerSweepPending { try sweepCallers(batch: options.pruneBatch) }
            if keySweepPending, tailCount == 0 { try sweepKeys(batch: options.pruneBatch) }
            try database.execute("COMMIT")
        } catch {
            try? database.execute("ROLLBACK")
            forgetIdentities()
            callerSweepPending = true
            rowsOfKey.removeAll()
            rowCount = rowsBefore
            tailCount = tailBefore
            indexedThrough = indexedBefore
            tailMayHoldDeletions = deletionsBefore
            tailRows = tailRowsBefore
            throw error
        }
        return try needsPruning(options, now: now)
    }

    /// Deletes up to `batch` callers whose `last_row` is below the oldest row's id (one range
    /// of an index): what keeps `history_caller` bounded by the rows.
    private func sweepCallers(batch: Int) throws(SQLiteError) {
        guard let database, let removeUnreferencedCallers else { return }
        let oldest = Int64(try database.textRows("SELECT min(id) FROM history").first ?? "") ?? nextID
        try removeUnreferencedCallers.run([.integer(oldest), .integer(Int64(batch))])
        let removed = Int(database.changes)
        if removed > 0 {
            // A cached caller may be one of them.
            forgetCallers()
        }
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
        if removedSome { forgetKeys() }
        if candidates.count < batch {
            keySweepPending = false
            keySweepCursor = 0
        } else {
            keySweepCursor = candidates.last ?? 0
        }
    }

    /// The id of the first row whose time is at least `time` (``nextID``: none), by a binary
    /// search over the rowids: times never decrease from one row to the next.
    func firstRow(atOrAfter time: Int64) throws(SQLiteError) -> Int64 {
        try firstRow(probing: firstRowFrom, atLeast: time)
    }

    /// A binary search over the rowids for the first row whose value in `probe` (its second
    /// column, for the first row at or above an id: ids have gaps) is at least `value`; each
    /// probe is one rowid lookup. Exact where the values never decrease with ids; where they
    /// do only within runs of rows (a commit's), it lands in the run holding `value`.
    func firstRow(probing probe: SQLiteStatement?, atLeast value: Int64) throws(SQLiteError) -> Int64 {
        guard let database, let probe else { return nextID }
        var low = Int64(try database.textRows("SELECT min(id) FROM history").first ?? "") ?? nextID, high = nextID
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
        guard let rowBefore else { return 0 }
        try rowBefore.bind([.integer(try firstRow(atOrAfter: time))])
        guard try rowBefore.step() else { return 0 }
        let revision = UInt64(bitPattern: rowBefore.integer(0))
        while try rowBefore.step() {}
        return revision
    }
}
