import CSQLite
import DBusValues
import Glibc
import PropBus

/// Reading history back: a key at a revision, one change, a prefix after a revision.
extension HistoryTable {
    /// `table` as `h` with its callers as `c`.
    private static func joined(_ table: String) -> String {
        "\(table) h LEFT JOIN history_caller c ON c.id = h.caller"
    }

    private static func record(from query: SQLiteStatement) -> HistoryRecord? {
        guard let key = try? Key(query.text(3) ?? "") else { return nil }
        var caller: WriteSet.Caller?
        if !query.isNull(14) {
            caller = WriteSet.Caller(
                via: query.text(7) ?? "", busName: query.text(14) ?? "",
                userID: query.isNull(8) ? nil : UInt32(truncatingIfNeeded: query.integer(8)), userName: query.text(9),
                processID: query.isNull(10) ? nil : UInt32(truncatingIfNeeded: query.integer(10)),
                command: query.text(11), executable: query.text(12), unit: query.text(13), host: query.text(15))
        }
        return HistoryRecord(
            change: UInt64(bitPattern: query.integer(0)), revision: UInt64(bitPattern: query.integer(1)), time: query.integer(2),
            key: key, kind: query.text(4) ?? "",
            oldValue: query.isNull(5) ? nil : try? ValueCodec.decode(query.blob(5)),
            newValue: query.isNull(6) ? nil : try? ValueCodec.decode(query.blob(6)),
            via: query.text(7) ?? "", caller: caller, transient: false)
    }

    /// The records of one change (``HistoryRecord/change``), persistent and transient.
    func records(ofChange change: UInt64) throws(SQLiteError) -> [HistoryRecord] {
        var found = transientRecords.filter { $0.change == change }
        if let database {
            for table in Self.tables {
                let query = try database.prepare("SELECT \(Self.columns) FROM \(Self.joined(table)) WHERE h.change = ?1 ORDER BY h.id")
                try query.bind([.integer(Int64(bitPattern: change))])
                while try query.step() { if let record = Self.record(from: query) { found.append(record) } }
            }
        }
        return found
    }

    /// `key`'s last record at or before `revision` (what it held then), and its latest record.
    func records(of key: Key, atOrBefore revision: UInt64) throws(SQLiteError) -> (then: HistoryRecord?, latest: HistoryRecord?) {
        var then = transientRecords.last { $0.key == key && $0.revision <= revision }
        var latest = transientRecords.last { $0.key == key }
        if let database {
            for table in Self.tables {
                let query = try database.prepare("SELECT \(Self.columns) FROM \(Self.joined(table)) WHERE h.key = ?1 AND h.revision <= ?2 ORDER BY h.revision DESC LIMIT 1")
                try query.bind([.text(key.text), .integer(Int64(bitPattern: min(revision, UInt64(Int64.max))))])
                while try query.step() { if let record = Self.record(from: query), record.revision >= (then?.revision ?? 0) { then = record } }
                try query.bind([.text(key.text), .integer(Int64.max)])
                while try query.step() { if let record = Self.record(from: query), record.revision >= (latest?.revision ?? 0) { latest = record } }
            }
        }
        return (then, latest)
    }

    /// Up to `limit` records of keys starting with `prefix` (a key, or a group with its dot)
    /// whose revision is above `after`, oldest first; persistent and transient ones together.
    func records(prefix: String, after: UInt64, limit: Int) throws(SQLiteError) -> [HistoryRecord] {
        var found: [HistoryRecord] = []
        if let database {
            // In `history` the key index answers a key or a prefix: a range of keys, not a scan.
            // The recent rows (older ones first) come after, as their ids do.
            for table in Self.tables {
                let query = try database.prepare("""
                    SELECT \(Self.columns)
                    FROM \(Self.joined(table)) WHERE h.key >= ?1 AND h.key < ?2 AND h.revision > ?3 ORDER BY h.revision, h.id LIMIT ?4
                    """)
                try query.bind([.text(prefix), .text(prefix + "\u{10FFFF}"), .integer(Int64(bitPattern: after)), .integer(Int64(limit))])
                while try query.step() { if let record = Self.record(from: query) { found.append(record) } }
            }
        }
        for record in transientRecords where record.revision > after && record.key.text.hasPrefix(prefix) {
            found.append(record)
        }
        found.sort { $0.revision < $1.revision }
        return Array(found.prefix(limit))
    }
}
