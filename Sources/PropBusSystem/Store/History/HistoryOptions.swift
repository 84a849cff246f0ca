import Glibc
import PropBus

/// What change history keeps, for how long, and how much of it each uid may hold
/// (`propbusd --no-history`, `--history-max-rows`, `--history-max-bytes`,
/// `--history-max-value-size`, `--history-max-age`, `--quota history-bytes=N`).
public struct HistoryOptions: Sendable {
    /// Whether changes are recorded at all.
    public var isEnabled = true
    /// The most rows the store keeps; the oldest go first.
    public var maximumRows = 1_000_000
    /// The most bytes the store's history holds: each row counts its stored values (a value
    /// kept as its digest counts the digest) and ``HistoryRecord/fieldAllowance``. The oldest
    /// rows go first. `nil`: ``defaultMaximumBytes(forStoreAt:)`` when the store opens.
    public var maximumBytes: Int?
    /// A value whose stored encoding is larger than this is kept as its digest
    /// (``ValueDigest``: its size and SHA-256), not whole: history still tells whether a key
    /// holds it, but cannot put it back.
    public var maximumValueSize = 64 << 10
    /// The most bytes the history of one uid's changes may hold, on disk and in memory (the
    /// `history-bytes` quota); past it that uid's own oldest changes go first, never another's.
    /// `nil`: no quota (without access control there are no uids to hold to one).
    public var maximumBytesPerUID: Int?
    /// The uids held to no `history-bytes` quota: root and the daemon's own user.
    public var exemptUIDs: Set<UInt32> = [0]
    /// Rows older than this many seconds go (`nil`: kept until another bound).
    public var maximumAge: Int?
    /// The most changes of transient keys kept in memory (they are never written to disk).
    public var maximumTransientRows = 10_000
    /// The most bytes (``HistoryRecord/chargedBytes``) the transient keys' changes hold in memory.
    public var maximumTransientBytes = 16 << 20
    /// The most old rows one pruning step deletes (of each bound): pruning runs between
    /// rounds in small steps of its own (``SQLiteHistory/pruneHistory()``), so no call waits for it.
    public var pruneBatch = 256
    /// The most rows commits leave unindexed before a step between rounds adds their entries
    /// to the index tables (a step comes a few milliseconds after the commit that reached it,
    /// so they are not many more). A commit only appends its rows to `history`: indexing them
    /// there would dirty a page of the `(key, revision)` index per key the commit wrote, each
    /// costing the WAL write, its checksum and a checkpoint's copy; a batch of rows shares
    /// those pages. Queries scan the unindexed rows, a range of rowids.
    public var indexBatch = 512
    /// The most changes kept per key, the latest (`nil`: no limit per key).
    public var maximumPerKey: Int?
    /// Whether refused attempts (AccessDenied) are recorded (`--history-denied`).
    public var recordsDenied = false
    /// The most refused attempts kept; the oldest go first.
    public var maximumDeniedRows = 10_000

    public init() {}

    /// `uid`'s `history-bytes` quota; `nil`: none (exempt, or no quotas).
    func quota(of uid: UInt32?) -> Int? {
        guard let limit = maximumBytesPerUID, let uid, !exemptUIDs.contains(uid) else { return nil }
        return limit
    }

    /// The byte bound of a store at `path` when none is given: a twentieth of its file
    /// system, at least 16 MiB and at most 1 GiB (history must never be what fills the disk).
    public static func defaultMaximumBytes(forStoreAt path: String) -> Int {
        var directory = path
        if let slash = directory.lastIndex(of: "/") { directory = String(directory[..<slash]) }
        var info = statvfs()
        guard statvfs(directory.isEmpty ? "/" : directory, &info) == 0 else { return 256 << 20 }
        let size = Int(info.f_blocks) &* Int(info.f_frsize)
        return min(max(size / 20, 16 << 20), 1 << 30)
    }
}
