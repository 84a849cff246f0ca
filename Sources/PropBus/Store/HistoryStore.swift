/// Where change history and refused attempts are kept, as the service reads and feeds them:
/// the port of `ListHistory`, `Revert`, `RevertRange` and `--history-denied`.
///
/// History is written by the store's ``PropertyStore/commit(_:durability:)`` from the round's
/// ``WriteSet``, in the same transaction as the values (it is a consumer of that value, not a
/// journal of its own): this port only reads it back, prunes it between rounds and takes the
/// refused attempts, which no round commits. A daemon without one (`--in-memory`) answers the
/// history methods with `Unavailable`.
///
/// What history keeps is charged to the uid whose call made the change (``historyUsage()``,
/// the `history-bytes` quota) and bounded in bytes; what one read costs is bounded by the rows
/// it examines (``scanHistory(_:examining:_:)``), not by the size of history.
///
/// Confined, like the store, to the service's queue.
public protocol HistoryStore: AnyObject {
    /// Whether changes are recorded (`false` with `--no-history`: nothing to list or revert to).
    var historyIsEnabled: Bool { get }
    /// Whether refused attempts are recorded (`--history-denied`).
    var recordsDenied: Bool { get }

    /// The changes `query` selects, oldest first (by revision), transient keys' too, handed to
    /// `body` one by one until it returns `false` (the page is full: that record is not taken)
    /// or `budget` rows were examined (those read and skipped by a filter count too). Says
    /// where a next call goes on, if anywhere.
    func scanHistory(_ query: HistoryQuery, examining budget: Int, _ body: (HistoryRecord) -> Bool) throws(PropBusError) -> HistoryScanEnd
    /// `key`'s last record at or before `revision` (what it held then) and its latest record.
    func history(of key: Key, atOrBefore revision: UInt64) throws(PropBusError) -> (then: HistoryRecord?, latest: HistoryRecord?)
    /// The records of one change (``HistoryRecord/change``), for `Revert`.
    func history(ofChange change: UInt64) throws(PropBusError) -> [HistoryRecord]
    /// The bytes of history each uid's changes hold (rows on disk and transient keys' records),
    /// for `GetUsage`; uids holding none are left out.
    func historyUsage() -> [UInt32: UInt64]

    /// Holds a refused attempt until ``flushDenied()`` writes it; dropped when ``recordsDenied``
    /// is off.
    func recordDenied(_ attempt: DeniedAttempt)
    /// Writes the refused attempts held since the last flush, outside any round's commit.
    func flushDenied() throws(PropBusError)
    /// Up to `limit` refused attempts on keys starting with `prefix` after attempt `after`,
    /// oldest first, with their ids (the paging cursor).
    func deniedAttempts(prefix: String, after: Int64, limit: Int) throws(PropBusError) -> [(id: Int64, attempt: DeniedAttempt)]

    /// Whether history passes one of its bounds (or has other upkeep waiting): the service then
    /// runs ``pruneHistory()`` between rounds.
    var historyNeedsPruning: Bool { get }
    /// One small step of upkeep, never inside a round's commit; returns whether another step
    /// has work.
    func pruneHistory() throws(PropBusError) -> Bool
}

extension HistoryStore {
    /// `key`'s latest change: who changed it last, and how (a revert's conflict names them).
    public func latestChange(of key: Key) throws(PropBusError) -> HistoryRecord? {
        try history(of: key, atOrBefore: UInt64.max).latest
    }

    /// Every record `query` selects, up to `limit` and within `budget` rows examined, oldest
    /// first, and where a next call goes on.
    public func history(_ query: HistoryQuery, limit: Int, examining budget: Int) throws(PropBusError) -> (records: [HistoryRecord], end: HistoryScanEnd) {
        var records: [HistoryRecord] = []
        let end = try scanHistory(query, examining: budget) { record in
            guard records.count < limit else { return false }
            records.append(record)
            return true
        }
        return (records, end)
    }
}

/// Which changes a scan of history selects: `ListHistory`'s prefix, cursor and filters.
public struct HistoryQuery: Sendable, Equatable {
    /// Keys starting with this (a key, or a group with its dot); empty: every key.
    public var prefix: String
    /// Only changes above this revision (the cursor).
    public var after: UInt64
    /// Only changes at or below this revision.
    public var until: UInt64?
    /// Only changes made by calls of this uid.
    public var userID: UInt32?
    /// Only changes made by calls of this user (by name, as history recorded it).
    public var userName: String?
    /// Only changes committed at or after this time (nanoseconds since the epoch).
    public var sinceTime: Int64?
    /// Only changes committed at or before this time.
    public var untilTime: Int64?

    public init(prefix: String = "", after: UInt64 = 0, until: UInt64? = nil, userID: UInt32? = nil, userName: String? = nil,
                sinceTime: Int64? = nil, untilTime: Int64? = nil) {
        self.prefix = prefix
        self.after = after
        self.until = until
        self.userID = userID
        self.userName = userName
        self.sinceTime = sinceTime
        self.untilTime = untilTime
    }

    /// Whether `record` passes the filters (not the cursor or the bounds, which end the scan).
    public func selects(_ record: HistoryRecord) -> Bool {
        guard record.key.text.hasPrefix(prefix) else { return false }
        if let userID, record.caller?.userID != userID { return false }
        if let userName, record.caller?.userName != userName { return false }
        if let sinceTime, record.time < sinceTime { return false }
        return true
    }

    /// Whether `record`, and every record after it, lies past the query's end (commit times
    /// follow revisions).
    public func isPast(_ record: HistoryRecord) -> Bool {
        if let until, record.revision > until { return true }
        if let untilTime, record.time > untilTime { return true }
        return false
    }
}

/// Where a scan of history stopped.
public struct HistoryScanEnd: Sendable, Equatable {
    /// The revision a next scan goes on after; `nil`: nothing more to read.
    public var next: UInt64?
    /// The rows it examined (read, whether taken or skipped by a filter).
    public var examined: Int

    public init(next: UInt64?, examined: Int) {
        self.next = next
        self.examined = examined
    }
}
