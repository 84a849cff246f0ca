import CSQLite
import DBusValues
import Glibc
import PropBus

extension SQLiteStore {
    /// The `history` table (schema version 5): one row per key per change.
    static let historySchema = """
        CREATE TABLE history (
            id INTEGER PRIMARY KEY,
            change INTEGER NOT NULL,
            revision INTEGER NOT NULL,
            time INTEGER NOT NULL,
            key TEXT NOT NULL,
            kind TEXT NOT NULL,
            old_value BLOB,
            new_value BLOB,
            via TEXT NOT NULL,
            uid INTEGER,
            user TEXT,
            pid INTEGER,
            comm TEXT,
            exe TEXT,
            unit TEXT,
            bus_name TEXT
        );
        CREATE INDEX history_key ON history (key, revision);
        CREATE INDEX history_change ON history (change);
        """

    /// Schema step 7 → 8: `history_recent`, `history`'s columns without its indexes. Commits
    /// append their rows to it; steps between rounds move them into `history` in batches
    /// (``HistoryOptions/indexBatch``), so a commit writes no index page for history.
    static let historyRecentSchema = """
        CREATE TABLE history_recent (
            id INTEGER PRIMARY KEY,
            change INTEGER NOT NULL,
            revision INTEGER NOT NULL,
            time INTEGER NOT NULL,
            key TEXT NOT NULL,
            kind TEXT NOT NULL,
            old_value BLOB,
            new_value BLOB,
            via TEXT NOT NULL,
            uid INTEGER,
            user TEXT,
            pid INTEGER,
            comm TEXT,
            exe TEXT,
            unit TEXT,
            bus_name TEXT,
            host TEXT
        );
        """

    /// Schema step 8 → 9: callers in `history_caller`, one row per identity, which rows of
    /// `history` and `history_recent` name by id (`caller`) instead of repeating its fields;
    /// the rows are kept, with their ids.
    static let historyCallerSchema = """
        CREATE TABLE history_caller (
            id INTEGER PRIMARY KEY,
            bus_name TEXT NOT NULL,
            uid INTEGER,
            user TEXT,
            pid INTEGER,
            comm TEXT,
            exe TEXT,
            unit TEXT,
            host TEXT
        );
        CREATE UNIQUE INDEX history_caller_identity ON history_caller (bus_name, uid, user, pid, comm, exe, unit, host);
        INSERT INTO history_caller (bus_name, uid, user, pid, comm, exe, unit, host)
            SELECT bus_name, uid, user, pid, comm, exe, unit, host FROM history WHERE bus_name IS NOT NULL
            UNION SELECT bus_name, uid, user, pid, comm, exe, unit, host FROM history_recent WHERE bus_name IS NOT NULL;
        \(historyRowsWithCallerIDs("history"))
        \(historyRowsWithCallerIDs("history_recent"))
        CREATE INDEX history_key ON history (key, revision);
        CREATE INDEX history_change ON history (change);
        CREATE INDEX history_by_caller ON history (caller);
        """

    /// `table` rebuilt with a caller id in place of the caller's fields (schema step 8 → 9).
    private static func historyRowsWithCallerIDs(_ table: String) -> String {
        """
        CREATE TABLE \(table)_9 (
            id INTEGER PRIMARY KEY,
            change INTEGER NOT NULL,
            revision INTEGER NOT NULL,
            time INTEGER NOT NULL,
            key TEXT NOT NULL,
            kind TEXT NOT NULL,
            old_value BLOB,
            new_value BLOB,
            via TEXT NOT NULL,
            caller INTEGER
        );
        INSERT INTO \(table)_9 (id, \(HistoryTable.storedColumns))
            SELECT h.id, h.change, h.revision, h.time, h.key, h.kind, h.old_value, h.new_value, h.via,
                   (SELECT c.id FROM history_caller c
                    WHERE c.bus_name = h.bus_name AND c.uid IS h.uid AND c.user IS h.user AND c.pid IS h.pid AND c.comm IS h.comm
                          AND c.exe IS h.exe AND c.unit IS h.unit AND c.host IS h.host)
            FROM \(table) h ORDER BY h.id;
        DROP TABLE \(table);
        ALTER TABLE \(table)_9 RENAME TO \(table);
        """
    }

    /// Whether history passes one of its bounds, or a batch of recent rows waits to be moved
    /// into the indexed table: the daemon then runs ``pruneHistory()`` between rounds.
    public var historyNeedsPruning: Bool {
        guard historyOptions.isEnabled else { return false }
        return (try? historyTable.needsPruning(historyOptions, now: HistoryTable.now())) ?? false
    }

    /// One step of its own (a small transaction between rounds, never in a call's commit):
    /// moves a batch of recent rows into the indexed table and prunes; returns whether another
    /// step has work.
    public func pruneHistory() throws(PropBusError) -> Bool {
        guard historyOptions.isEnabled else { return false }
        do { return try historyTable.prune(options: historyOptions) } catch {
            throw PropBusError(.storeFailed, "cannot prune the history in the store \(path): \(error)")
        }
    }

    /// The records of one change, for `Revert`.
    public func history(ofChange change: UInt64) throws(PropBusError) -> [HistoryRecord] {
        do { return try historyTable.records(ofChange: change) } catch {
            throw PropBusError(.storeFailed, "cannot read the history in the store \(path): \(error)")
        }
    }

    /// `key`'s record at or before `revision` and its latest one, for `Revert`.
    public func history(of key: Key, atOrBefore revision: UInt64) throws(PropBusError) -> (then: HistoryRecord?, latest: HistoryRecord?) {
        do { return try historyTable.records(of: key, atOrBefore: revision) } catch {
            throw PropBusError(.storeFailed, "cannot read the history in the store \(path): \(error)")
        }
    }

    /// Up to `limit` changes of keys starting with `prefix` after revision `after`, oldest first
    /// (``HistoryRecord``); transient keys' from memory.
    public func history(prefix: String, after: UInt64, limit: Int) throws(PropBusError) -> [HistoryRecord] {
        do {
            return try historyTable.records(prefix: prefix, after: after, limit: limit)
        } catch {
            throw PropBusError(.storeFailed, "cannot read the history in the store \(path): \(error)")
        }
    }
}
