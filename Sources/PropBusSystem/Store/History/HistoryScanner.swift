import CSQLite
import DBusValues
import PropBus

/// A scan of history in revision order (`ListHistory`, `RevertRange`) whose work is bounded by
/// what it hands out and the rows it skips, not by the size of history.
///
/// Three ways to the stored rows, by the query's filters:
/// - a uid or a user: that uid's entries in `history_by_uid` (a user is the uids history
///   recorded under that name) and the tail's rows of it;
/// - a prefix holding at most ``maximumIndexedKeys`` keys: those keys' entries in
///   `history_index` and the tail's rows of them;
/// - anything else: the rows in id order from the commit holding the cursor's next revision,
///   a commit at a time (its rows' revisions may be out of id order, never across commits),
///   the filter read from the key and caller before a row is read whole.
/// In each, at most ``maximumCandidatesPerBatch`` rows are taken from each index group at once;
/// only those up to the lowest revision a group was cut at are handed out, then the next
/// batch follows from there. Transient keys' records (in memory) are merged in by revision.
///
/// Owned by ``SQLiteHistory``, confined like it to the service's queue.
final class HistoryScanner {
    private let lookups: HistoryLookups
    private let indexer: HistoryIndexer

    /// The most keys a prefix may hold for the key index to be read (one seek each); past it
    /// the rows are read in order.
    static let maximumIndexedKeys = 64
    /// The most rows of one index group (a key, a uid) taken into one batch.
    static let maximumCandidatesPerBatch = 4096
    /// The rows read at once in id order (then to the end of the commit).
    static let chunkRows = 512

    init(lookups: HistoryLookups, indexer: HistoryIndexer) {
        self.lookups = lookups
        self.indexer = indexer
    }

    /// A stored row to look at.
    private struct Candidate {
        var revision: Int64
        var id: Int64
    }

    /// One batch of candidates in (revision, id) order; the highest revision it covers (every
    /// stored row up to it that the source selects is among them or an earlier batch's); and
    /// where the next starts, `nil` when no stored row is left.
    private struct Batch {
        var candidates: [Candidate]
        var reached: Int64
        var resume: Resume?
        /// Rows read and skipped by the source itself (the prefix, in id order).
        var examined = 0
    }

    /// Where a next batch starts.
    private enum Resume {
        /// Candidates above this revision (an index read).
        case after(Int64)
        /// Rows from this id on (a read in id order).
        case id(Int64)
    }

    /// Where the stored rows come from for a query.
    private enum Source {
        case groups(table: String, column: String, ids: [Int64], tailCondition: String)
        case ids(prefix: String)
        case nothing
    }

    /// Scans `query` from `start` (its ``HistoryQuery/after``, moved past `sinceTime`'s start
    /// by the caller), merging `transient` (records in revision order), handing each selected
    /// record to `body` until it declines one or `budget` rows were examined.
    func scan(_ query: HistoryQuery, after start: UInt64, budget: Int, transient: [HistoryRecord],
              _ body: (HistoryRecord) -> Bool) throws(SQLiteError) -> HistoryScanEnd {
        guard start < UInt64(Int64.max) else { return HistoryScanEnd(next: nil, examined: 0) }
        let source = try self.source(for: query)
        var examined = 0
        var lastHanded: UInt64?
        // Every row up to this revision was offered: where a scan cut by the budget goes on.
        var covered = start
        var transientIndex = transient.partitioningIndex { $0.revision > start }

        /// Offers `record`; the scan's end when it ends here.
        func offer(_ record: HistoryRecord) -> HistoryScanEnd? {
            if query.isPast(record) { return HistoryScanEnd(next: nil, examined: examined) }
            examined += 1
            if query.selects(record) {
                guard body(record) else { return HistoryScanEnd(next: lastHanded ?? start, examined: examined) }
                lastHanded = record.revision
            }
            covered = max(covered, record.revision)
            return nil
        }
        /// Offers the transient records below `revision` (all when `nil`).
        func offerTransient(below revision: UInt64?) -> HistoryScanEnd? {
            while transientIndex < transient.count, revision.map({ transient[transientIndex].revision < $0 }) ?? true {
                transientIndex += 1
                if let end = offer(transient[transientIndex - 1]) { return end }
            }
            return nil
        }

        var resume: Resume? = .after(Int64(bitPattern: start))
        var cursor = Int64(bitPattern: start)
        while let next = resume {
            let batch = try load(source, from: next, above: cursor)
            resume = batch.resume
            examined += batch.examined
            for candidate in batch.candidates {
                let revision = UInt64(bitPattern: candidate.revision)
                // The budget ends a scan only between revisions (rows of one revision go together),
                // and once it went past its start: every call makes progress.
                if examined >= budget, revision != covered, covered > start { return HistoryScanEnd(next: covered, examined: examined) }
                if let end = offerTransient(below: revision) { return end }
                guard let record = try lookups.record(id: candidate.id) else {
                    examined += 1
                    continue
                }
                if let end = offer(record) { return end }
            }
            cursor = max(cursor, batch.reached)
            if let end = offerTransient(below: UInt64(bitPattern: batch.reached) + 1) { return end }
            covered = max(covered, UInt64(bitPattern: batch.reached))
            if examined >= budget, resume != nil, covered > start { return HistoryScanEnd(next: covered, examined: examined) }
        }
        if let end = offerTransient(below: nil) { return end }
        return HistoryScanEnd(next: nil, examined: examined)
    }

    /// Which rows to read for `query`.
    private func source(for query: HistoryQuery) throws(SQLiteError) -> Source {
        if query.userID != nil || query.userName != nil {
            var uids: [Int64] = []
            if let uid = query.userID {
                uids = [Int64(uid)]
            } else if let name = query.userName, let byName = try lookups.statement("SELECT DISTINCT uid FROM history_caller WHERE user = ?1 AND uid IS NOT NULL") {
                try byName.bind([.text(name)])
                while try byName.step() { uids.append(byName.integer(0)) }
            }
            guard !uids.isEmpty else { return .nothing }
            return .groups(table: "history_by_uid", column: "uid", ids: uids,
                           tailCondition: "h.caller IN (SELECT id FROM history_caller WHERE uid IN (\(uids.map(String.init).joined(separator: ","))))")
        }
        if !query.prefix.isEmpty, let keys = try lookups.statement("SELECT id FROM history_key WHERE key >= ?1 AND key < ?2 LIMIT ?3") {
            try keys.bind([.text(query.prefix), .text(query.prefix + "\u{10FFFF}"), .integer(Int64(Self.maximumIndexedKeys + 1))])
            var ids: [Int64] = []
            while try keys.step() { ids.append(keys.integer(0)) }
            guard !ids.isEmpty else { return .nothing }
            if ids.count <= Self.maximumIndexedKeys {
                return .groups(table: "history_index", column: "key_id", ids: ids,
                               tailCondition: "h.key_id IN (\(ids.map(String.init).joined(separator: ",")))")
            }
        }
        return .ids(prefix: query.prefix)
    }

    /// The next batch of `source` from `resume` (candidates above `cursor` only).
    private func load(_ source: Source, from resume: Resume, above cursor: Int64) throws(SQLiteError) -> Batch {
        switch (source, resume) {
        case (.nothing, _):
            return Batch(candidates: [], reached: cursor, resume: nil)
        case (.groups(let table, let column, let ids, let tail), .after(let after)):
            return try loadGroups(table: table, column: column, ids: ids, tailCondition: tail, after: after)
        case (.ids(let prefix), .after(let after)):
            // The first batch: from the commit holding the first revision above the cursor.
            guard let run = try lookups.commit(holdingChange: after + 1, byChange: false) else { return Batch(candidates: [], reached: cursor, resume: nil) }
            return try loadIDs(prefix: prefix, from: run.lowerBound, above: cursor)
        case (.ids(let prefix), .id(let id)):
            return try loadIDs(prefix: prefix, from: id, above: cursor)
        case (.groups, .id):
            return Batch(candidates: [], reached: cursor, resume: nil)
        }
    }

    /// The candidates of index groups `ids` of `table` (named by `column`) above `after`: at
    /// most ``maximumCandidatesPerBatch`` of each, handed out up to the lowest revision a group
    /// was cut at; and the tail's rows of them (newer than every indexed row).
    private func loadGroups(table: String, column: String, ids: [Int64], tailCondition: String, after: Int64) throws(SQLiteError) -> Batch {
        guard let entries = try lookups.statement("SELECT revision, id, count, rows FROM \(table) WHERE \(column) = ?1 AND revision > ?2 ORDER BY revision, id")
        else { return Batch(candidates: [], reached: after, resume: nil) }
        let cap = max(Self.maximumCandidatesPerBatch / ids.count, 256)
        var candidates: [Candidate] = []
        var frontier: Int64?
        for id in ids {
            var taken = 0
            try PackedRows.entries(of: entries, [.integer(id), .integer(after)]) { rows in
                for row in rows where row.revision > after {
                    candidates.append(Candidate(revision: row.revision, id: row.id))
                    taken += 1
                }
                guard taken < cap else {
                    frontier = min(frontier ?? .max, rows.last?.revision ?? after)
                    return false
                }
                return true
            }
        }
        if frontier == nil, let tail = try lookups.statement("SELECT h.revision, h.id FROM history h WHERE h.id > ?1 AND h.revision > ?2 AND \(tailCondition)") {
            try tail.bind([.integer(indexer.indexedThrough), .integer(after)])
            while try tail.step() { candidates.append(Candidate(revision: tail.integer(0), id: tail.integer(1))) }
        }
        candidates.sort { ($0.revision, $0.id) < ($1.revision, $1.id) }
        if let frontier {
            candidates.removeAll { $0.revision > frontier }
            return Batch(candidates: candidates, reached: frontier, resume: .after(frontier))
        }
        return Batch(candidates: candidates, reached: candidates.last?.revision ?? after, resume: nil)
    }

    /// A chunk of rows in id order from `id`, to the end of its last commit, sorted by
    /// revision: those above `cursor` whose key starts with `prefix` are the candidates, every
    /// row read is examined.
    private func loadIDs(prefix: String, from id: Int64, above cursor: Int64) throws(SQLiteError) -> Batch {
        guard let rows = try lookups.statement("""
            SELECT h.id, h.revision, h.time, k.key FROM history h JOIN history_key k ON k.id = h.key_id WHERE h.id >= ?1 ORDER BY h.id
            """) else { return Batch(candidates: [], reached: cursor, resume: nil) }
        try rows.bind([.integer(id)])
        var candidates: [Candidate] = []
        var read = 0, skipped = 0, lastTime: Int64?, nextID: Int64?, reached = cursor
        while try rows.step() {
            let rowID = rows.integer(0), time = rows.integer(2)
            // A commit's rows share its time: the chunk ends only where the time changes.
            if read >= Self.chunkRows, time != lastTime {
                nextID = rowID
                rows.reset()
                break
            }
            read += 1
            lastTime = time
            let revision = rows.integer(1)
            reached = max(reached, revision)
            // Rows at or below the cursor were seen by an earlier batch or call (the commit the
            // cursor is in is read again whole): not counted again.
            guard revision > cursor else { continue }
            guard (rows.text(3) ?? "").hasPrefix(prefix) else {
                skipped += 1
                continue
            }
            candidates.append(Candidate(revision: revision, id: rowID))
        }
        candidates.sort { ($0.revision, $0.id) < ($1.revision, $1.id) }
        // The candidates are examined when handed out; the rows the prefix skipped count here.
        return Batch(candidates: candidates, reached: reached, resume: nextID.map { .id($0) }, examined: skipped)
    }
}

extension Array {
    /// The index of the first element for which `belongs` is true, the array being partitioned
    /// (false first, then true): a binary search.
    func partitioningIndex(where belongs: (Element) -> Bool) -> Int {
        var low = 0, high = count
        while low < high {
            let middle = (low + high) / 2
            if belongs(self[middle]) { high = middle } else { low = middle + 1 }
        }
        return low
    }
}
