import PropBus

/// The `history_denied` table: refused attempts, bounded by
/// ``HistoryOptions/maximumDeniedRows``.
///
/// Owned by ``SQLiteHistory``, confined like it to the service's queue. Attempts are held
/// in memory (at most ``maximumPending``) and written together in one small transaction after
/// the round, so a refused call never waits for the disk, and a flood of them costs one write
/// per round, not one per call.
final class DeniedTable {
    /// Attempts held before a flush writes them; more are counted and dropped.
    static let maximumPending = 1024
    private var database: SQLiteDatabase?
    private var insert: SQLiteStatement?
    private var pruneOldest: SQLiteStatement?
    private var rowCount = 0
    private(set) var pending: [DeniedAttempt] = []
    /// Attempts dropped since the last flush because ``pending`` was full.
    private(set) var dropped = 0

    func attach(_ database: SQLiteDatabase) throws(SQLiteError) {
        self.database = database
        insert = try database.prepare("""
            INSERT INTO history_denied (time, key, via, error, uid, user, pid, comm, exe, unit, bus_name)
            VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
            """)
        pruneOldest = try database.prepare("DELETE FROM history_denied WHERE id IN (SELECT id FROM history_denied ORDER BY id LIMIT ?1)")
        rowCount = Int(try database.textRows("SELECT count(*) FROM history_denied").first ?? "0") ?? 0
    }

    func hold(_ attempt: DeniedAttempt) {
        guard pending.count < Self.maximumPending else {
            dropped += 1
            return
        }
        pending.append(attempt)
    }

    /// Writes the held attempts in one transaction and prunes past `maximumRows`. Call
    /// outside any other transaction (after the round's commit).
    func flush(maximumRows: Int) throws(SQLiteError) {
        guard !pending.isEmpty, let database, let insert, !database.inTransaction else { return }
        let attempts = pending
        pending.removeAll()
        dropped = 0
        try database.execute("BEGIN IMMEDIATE")
        do {
            for attempt in attempts {
                let caller = attempt.caller
                try insert.run([
                    .integer(attempt.time), .text(attempt.key), .text(caller.via), .text(attempt.error),
                    caller.userID.map { .integer(Int64($0)) } ?? .null, caller.userName.map { .text($0) } ?? .null,
                    caller.processID.map { .integer(Int64($0)) } ?? .null, caller.command.map { .text($0) } ?? .null,
                    caller.executable.map { .text($0) } ?? .null, caller.unit.map { .text($0) } ?? .null, .text(caller.busName),
                ])
            }
            rowCount += attempts.count
            if rowCount > maximumRows, let pruneOldest {
                try pruneOldest.run([.integer(Int64(rowCount - maximumRows))])
                rowCount -= Int(database.changes)
            }
            try database.execute("COMMIT")
        } catch {
            try? database.execute("ROLLBACK")
            throw error
        }
    }

    /// Up to `limit` attempts on keys starting with `prefix` with an id above `after`, oldest first.
    func attempts(prefix: String, after: Int64, limit: Int) throws(SQLiteError) -> [(id: Int64, attempt: DeniedAttempt)] {
        guard let database else { return [] }
        let query = try database.prepare("""
            SELECT id, time, key, via, error, uid, user, pid, comm, exe, unit, bus_name FROM history_denied
            WHERE id > ?1 AND key >= ?2 AND key < ?3 ORDER BY id LIMIT ?4
            """)
        try query.bind([.integer(after), .text(prefix), .text(prefix + "\u{10FFFF}"), .integer(Int64(limit))])
        var found: [(Int64, DeniedAttempt)] = []
        while try query.step() {
            let caller = WriteSet.Caller(
                via: query.text(3) ?? "", busName: query.text(11) ?? "",
                userID: query.isNull(5) ? nil : UInt32(truncatingIfNeeded: query.integer(5)), userName: query.text(6),
                processID: query.isNull(7) ? nil : UInt32(truncatingIfNeeded: query.integer(7)),
                command: query.text(8), executable: query.text(9), unit: query.text(10))
            found.append((query.integer(0), DeniedAttempt(time: query.integer(1), key: query.text(2) ?? "", caller: caller, error: query.text(4) ?? "")))
        }
        return found
    }
}
