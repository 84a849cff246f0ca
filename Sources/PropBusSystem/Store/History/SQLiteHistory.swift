import CSQLite
import DBusValues
import PropBus

/// The store's change history, as the service reads and feeds it (``HistoryStore``) and as
/// the store writes it at each commit: the `history` table and its index tables, the
/// transient keys' records in memory, and the refused attempts.
///
/// Made of parts that each own their state: the callers' and keys' ids
/// (``HistoryIdentities``), the rows a commit writes (``HistoryRecorder``), the index tables
/// and the tail (``HistoryIndexer``), what history holds (``HistoryUsage``, ``KeyRowCounts``),
/// the steps between rounds (``HistoryPruner``), single lookups (``HistoryLookups``), scans
/// (``HistoryScanner``), the transient keys' records (``TransientHistory``) and the refused
/// attempts (``DeniedTable``).
///
/// Owned by its ``SQLiteStore``, confined like it to the service's queue.
public final class SQLiteHistory: HistoryStore {
    /// What is kept and for how long (`--no-history`, `--history-max-rows`, …).
    public var options = HistoryOptions()
    let identities = HistoryIdentities()
    private let indexer = HistoryIndexer()
    private let usage = HistoryUsage()
    private let keyRows: KeyRowCounts
    private let recorder: HistoryRecorder
    private let lookups: HistoryLookups
    private let pruner: HistoryPruner
    private let scanner: HistoryScanner
    private let transient = TransientHistory()
    private let denied = DeniedTable()
    /// The store file, for messages.
    private let path: String
    /// ``HistoryOptions/defaultMaximumBytes(forStoreAt:)``, read when the store opens.
    private var derivedMaximumBytes = 256 << 20

    init(path: String) {
        self.path = path
        keyRows = KeyRowCounts(indexer: indexer)
        recorder = HistoryRecorder(identities: identities, indexer: indexer, usage: usage, keyRows: keyRows)
        lookups = HistoryLookups(indexer: indexer, recorder: recorder)
        pruner = HistoryPruner(identities: identities, indexer: indexer, usage: usage, recorder: recorder, lookups: lookups, keyRows: keyRows)
        scanner = HistoryScanner(lookups: lookups, indexer: indexer)
    }

    /// Prepares everything against the store's open database.
    func attach(_ database: SQLiteDatabase) throws(SQLiteError) {
        derivedMaximumBytes = HistoryOptions.defaultMaximumBytes(forStoreAt: path)
        try identities.attach(database)
        try indexer.attach(database)
        try usage.attach(database, indexedThrough: indexer.indexedThrough, tailRows: indexer.tailCount)
        try keyRows.attach(database)
        try recorder.attach(database)
        lookups.attach(database)
        try pruner.attach(database)
        try denied.attach(database)
    }

    /// ``options`` with the byte bound derived from the disk when none was given.
    private var bounds: HistoryOptions {
        var bounds = options
        if bounds.maximumBytes == nil { bounds.maximumBytes = derivedMaximumBytes }
        return bounds
    }

    private func failure(_ what: String, _ error: SQLiteError) -> PropBusError {
        PropBusError(.storeFailed, "cannot \(what) the history in the store \(path): \(error)")
    }

    // MARK: The store's commit

    /// `value` encoded for the values table, kept for `key`'s history row of the same commit
    /// when it is small; call inside the commit's transaction.
    func encodeStored(_ value: DBusValue, of key: Key) throws(SQLiteError) -> [UInt8] {
        let bytes = ValueCodec.encode(value)
        if bytes.count <= HistoryIdentities.maximumCachedValueBytes { try identities.entry(of: key).stored = (value, bytes) }
        return bytes
    }

    /// Writes the persistent keys' changes of `writeSet`; call inside the commit's transaction.
    func record(_ writeSet: WriteSet) throws(SQLiteError) {
        try recorder.record(writeSet, options: options)
    }

    /// The commit ``record(_:)`` wrote into was rolled back: the callers and keys it inserted
    /// are not in the table, nor its rows, nor their bytes.
    func commitFailed() {
        identities.forget()
        indexer.commitFailed()
        usage.discardPending()
        recorder.commitFailed()
    }

    /// `writeSet` was committed (or touched no disk): its rows count, and its transient keys'
    /// changes are kept in memory.
    func committed(_ writeSet: WriteSet) {
        usage.committed(time: recorder.lastTime)
        transient.record(writeSet, time: HistoryRows.now(), options: options)
    }

    // MARK: HistoryStore

    /// ``HistoryOptions/isEnabled``.
    public var historyIsEnabled: Bool { options.isEnabled }
    /// ``HistoryOptions/recordsDenied``, with history on.
    public var recordsDenied: Bool { options.isEnabled && options.recordsDenied }

    public func scanHistory(_ query: HistoryQuery, examining budget: Int, _ body: (HistoryRecord) -> Bool) throws(PropBusError) -> HistoryScanEnd {
        do {
            var start = query.after
            if let since = query.sinceTime, query.after < UInt64(Int64.max) {
                // A start given as a time: found by a binary search, not by reading history from its start.
                start = max(start, try lookups.revision(before: since))
            }
            return try scanner.scan(query, after: start, budget: budget, transient: transient.records(after: start), body)
        } catch {
            throw failure("read", error)
        }
    }

    public func history(of key: Key, atOrBefore revision: UInt64) throws(PropBusError) -> (then: HistoryRecord?, latest: HistoryRecord?) {
        var (then, latest) = transient.records(of: key, atOrBefore: revision)
        do {
            let stored = try lookups.records(of: key, atOrBefore: revision)
            if let record = stored.then, record.revision >= (then?.revision ?? 0) { then = record }
            if let record = stored.latest, record.revision >= (latest?.revision ?? 0) { latest = record }
        } catch {
            throw failure("read", error)
        }
        return (then, latest)
    }

    public func history(ofChange change: UInt64) throws(PropBusError) -> [HistoryRecord] {
        do { return transient.records(ofChange: change) + (try lookups.records(ofChange: change)) } catch { throw failure("read", error) }
    }

    /// The revision of the last change committed before `time` (nanoseconds since the epoch;
    /// 0: none): a span of history starting at `time` lies above it. A binary search over the
    /// rows (their times never decrease), not a scan: O(log² n) page reads.
    public func historyRevision(before time: Int64) throws(PropBusError) -> UInt64 {
        do { return try lookups.revision(before: time) } catch { throw failure("read", error) }
    }

    public func historyUsage() -> [UInt32: UInt64] {
        var used: [UInt32: UInt64] = [:]
        for (uid, bytes) in usage.bytesByUID where bytes > 0 { used[uid, default: 0] += UInt64(bytes) }
        for (uid, bytes) in transient.bytesByUID where bytes > 0 { used[uid, default: 0] += UInt64(bytes) }
        return used
    }

    public var historyNeedsPruning: Bool {
        guard options.isEnabled else { return false }
        return (try? pruner.needsPruning(bounds, now: HistoryRows.now())) ?? false
    }

    /// One step of its own (a small transaction between rounds, never in a call's commit):
    /// indexes a batch of rows and prunes; returns whether another step has work.
    public func pruneHistory() throws(PropBusError) -> Bool {
        guard options.isEnabled else { return false }
        do { return try pruner.prune(options: bounds) } catch { throw failure("prune", error) }
    }

    /// Holds a refused attempt until ``flushDenied()`` writes it (``HistoryOptions/recordsDenied``).
    public func recordDenied(_ attempt: DeniedAttempt) {
        guard recordsDenied else { return }
        denied.hold(attempt)
    }

    /// Writes the refused attempts held since the last call, in their own small transaction.
    public func flushDenied() throws(PropBusError) {
        do { try denied.flush(maximumRows: options.maximumDeniedRows) } catch {
            throw PropBusError(.storeFailed, "cannot record refused attempts in the store \(path): \(error)")
        }
    }

    /// Up to `limit` refused attempts on keys starting with `prefix` after attempt `after`, oldest first.
    public func deniedAttempts(prefix: String, after: Int64, limit: Int) throws(PropBusError) -> [(id: Int64, attempt: DeniedAttempt)] {
        do { return try denied.attempts(prefix: prefix, after: after, limit: limit) } catch {
            throw PropBusError(.storeFailed, "cannot read the refused attempts in the store \(path): \(error)")
        }
    }

    // MARK: For tests and benches

    /// Rows in the table.
    var rowCount: Int { usage.rows }
    /// The bytes history holds on disk.
    var storedBytes: Int { usage.bytes }
    /// The rows above the last one indexed.
    var tailCount: Int { indexer.tailCount }
    /// `key`'s rows, as the per-key bound counts them.
    func rows(of key: Key) throws(SQLiteError) -> Int { try keyRows.count(of: key, id: identities.entry(of: key).id, adding: 0) }
    /// Up to `limit` records of keys starting with `prefix` above `after`, oldest first.
    func records(prefix: String, after: UInt64 = 0, limit: Int = .max) throws(PropBusError) -> [HistoryRecord] {
        try history(HistoryQuery(prefix: prefix, after: after), limit: limit, examining: .max).records
    }
}
