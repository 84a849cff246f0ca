/// Where change history and refused attempts are kept, as the service reads and feeds them:
/// the port of `ListHistory`, `Revert`, `RevertRange` and `--history-denied`.
///
/// History is written by the store's ``PropertyStore/commit(_:durability:)`` from the round's
/// ``WriteSet``, in the same transaction as the values (it is a consumer of that value, not a
/// journal of its own): this port only reads it back, prunes it between rounds and takes the
/// refused attempts, which no round commits. A daemon without one (`--in-memory`) answers the
/// history methods with `Unavailable`.
///
/// Confined, like the store, to the service's queue.
public protocol HistoryStore: AnyObject {
    /// Whether changes are recorded (`false` with `--no-history`: nothing to list or revert to).
    var historyIsEnabled: Bool { get }
    /// Whether refused attempts are recorded (`--history-denied`).
    var recordsDenied: Bool { get }

    /// Up to `limit` changes of keys starting with `prefix` (a key, or a group with its dot)
    /// whose revision is above `after`, oldest first; transient keys' too.
    func history(prefix: String, after: UInt64, limit: Int) throws(PropBusError) -> [HistoryRecord]
    /// `key`'s last record at or before `revision` (what it held then) and its latest record.
    func history(of key: Key, atOrBefore revision: UInt64) throws(PropBusError) -> (then: HistoryRecord?, latest: HistoryRecord?)
    /// The records of one change (``HistoryRecord/change``), for `Revert`.
    func history(ofChange change: UInt64) throws(PropBusError) -> [HistoryRecord]
    /// The revision of the last change committed before `time` (nanoseconds since the epoch),
    /// 0 if none: where a span given as a time starts, found without reading history from its start.
    func historyRevision(before time: Int64) throws(PropBusError) -> UInt64

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
}
