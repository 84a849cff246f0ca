import CSQLite
import DBusValues
import Glibc
import PropBus

/// A row of `history` as it is stored and read back: its columns, its flags, and how a value is
/// kept (whole, or as its digest).
enum HistoryRows {
    /// A row's columns in `history`: its key is an id in `history_key`, its caller one in
    /// `history_caller`.
    static let storedColumns = "change, revision, time, key_id, kind, old_value, new_value, via, caller, flags"

    /// A row `h`'s key as `k` and its caller as `c`.
    static let joins = "JOIN history_key k ON k.id = h.key_id LEFT JOIN history_caller c ON c.id = h.caller"

    /// What queries read: a row (`h`) with its key (`k`, and the definition it is on: `born`,
    /// `alive`) and its caller's fields (`c`), joined.
    static let columns = """
        h.change, h.revision, h.time, k.key, h.kind, h.old_value, h.new_value, h.via,
        c.uid, c.user, c.pid, c.comm, c.exe, c.unit, c.bus_name, c.host, h.flags, k.born, k.alive
        """

    /// The `flags` bits of a row: ``HistoryRecord/Flags`` and these two, which say that a
    /// column holds a ``ValueDigest`` (``ValueDigest/stored``) rather than the value.
    static let oldIsDigest: Int64 = 8
    static let newIsDigest: Int64 = 16

    /// The bytes a row is charged: its two value columns and the allowance for the rest. The
    /// trigger that forgets a deleted row's bytes computes the same (`StoreSchema`).
    static func bytes(old: Int, new: Int) -> Int { old + new + HistoryRecord.fieldAllowance }

    /// The record of the row `query` stands on (columns as ``columns``); `nil` for a row whose
    /// key is no longer a valid key.
    static func record(from query: SQLiteStatement) -> HistoryRecord? {
        guard let key = try? Key(query.text(3) ?? "") else { return nil }
        var caller: WriteSet.Caller?
        if !query.isNull(14) {
            caller = WriteSet.Caller(
                via: query.text(7) ?? "", busName: query.text(14) ?? "",
                userID: query.isNull(8) ? nil : UInt32(truncatingIfNeeded: query.integer(8)), userName: query.text(9),
                processID: query.isNull(10) ? nil : UInt32(truncatingIfNeeded: query.integer(10)),
                command: query.text(11), executable: query.text(12), unit: query.text(13), host: query.text(15))
        }
        let flags = query.integer(16)
        var record = HistoryRecord(
            change: UInt64(bitPattern: query.integer(0)), revision: UInt64(bitPattern: query.integer(1)), time: query.integer(2),
            key: key, kind: query.text(4) ?? "", oldValue: nil, newValue: nil,
            via: query.text(7) ?? "", caller: caller, transient: false)
        if !query.isNull(5) {
            if flags & oldIsDigest != 0 { record.oldDigest = ValueDigest(stored: query.blob(5)) } else { record.oldValue = try? ValueCodec.decode(query.blob(5)) }
        }
        if !query.isNull(6) {
            if flags & newIsDigest != 0 { record.newDigest = ValueDigest(stored: query.blob(6)) } else { record.newValue = try? ValueCodec.decode(query.blob(6)) }
        }
        record.flags = HistoryRecord.Flags(rawValue: flags & 7)
        // The key's present definition began at `born`; `alive` is 0 once it was deleted.
        let born = query.integer(17), alive = query.integer(18) != 0
        record.ofDeletedDefinition = !alive || Int64(bitPattern: record.revision) < born
        return record
    }

    /// The time now, in nanoseconds since the epoch.
    static func now() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
    }
}
