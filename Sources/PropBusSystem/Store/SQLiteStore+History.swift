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
        INSERT INTO \(table)_9 (id, change, revision, time, key, kind, old_value, new_value, via, caller)
            SELECT h.id, h.change, h.revision, h.time, h.key, h.kind, h.old_value, h.new_value, h.via,
                   (SELECT c.id FROM history_caller c
                    WHERE c.bus_name = h.bus_name AND c.uid IS h.uid AND c.user IS h.user AND c.pid IS h.pid AND c.comm IS h.comm
                          AND c.exe IS h.exe AND c.unit IS h.unit AND c.host IS h.host)
            FROM \(table) h ORDER BY h.id;
        DROP TABLE \(table);
        ALTER TABLE \(table)_9 RENAME TO \(table);
        """
    }

    /// Schema step 9 → 10: rows written once, into `history`, naming their key by an id in
    /// `history_key`; the indexes by key and of deletions by change are tables of their own
    /// (`history_index`, `history_by_change`: other rows are found by change with a binary
    /// search) that the steps between rounds fill in batches for the rows above `meta`'s
    /// `history_indexed`, and a trigger empties with the rows.
    /// Callers carry `last_row`, a bound on the last row naming them, so the pruning steps find
    /// the unreferenced ones without an index on `history (caller)`. The rows of both tables
    /// are kept, with their ids, and indexed at once.
    static let historyIndexSchema = """
        DROP INDEX history_key;
        CREATE TABLE history_key (
            id INTEGER PRIMARY KEY,
            key TEXT NOT NULL UNIQUE
        );
        INSERT INTO history_key (key) SELECT key FROM history UNION SELECT key FROM history_recent ORDER BY 1;
        CREATE TABLE history_10 (
            id INTEGER PRIMARY KEY,
            change INTEGER NOT NULL,
            revision INTEGER NOT NULL,
            time INTEGER NOT NULL,
            key_id INTEGER NOT NULL,
            kind TEXT NOT NULL,
            old_value BLOB,
            new_value BLOB,
            via TEXT NOT NULL,
            caller INTEGER
        );
        INSERT INTO history_10 (id, \(HistoryTable.storedColumns))
            SELECT h.id, h.change, h.revision, h.time, k.id, h.kind, h.old_value, h.new_value, h.via, h.caller
            FROM (SELECT * FROM history UNION ALL SELECT * FROM history_recent) h JOIN history_key k ON k.key = h.key ORDER BY h.id;
        DROP TABLE history;
        DROP TABLE history_recent;
        ALTER TABLE history_10 RENAME TO history;
        CREATE TABLE history_index (
            key_id INTEGER NOT NULL,
            revision INTEGER NOT NULL,
            id INTEGER NOT NULL,
            PRIMARY KEY (key_id, revision, id)
        ) WITHOUT ROWID;
        CREATE TABLE history_by_change (
            change INTEGER NOT NULL,
            id INTEGER NOT NULL,
            PRIMARY KEY (change, id)
        ) WITHOUT ROWID;
        INSERT INTO history_index (key_id, revision, id) SELECT key_id, revision, id FROM history ORDER BY key_id, revision, id;
        INSERT INTO history_by_change (change, id) SELECT change, id FROM history WHERE change < revision ORDER BY change, id;
        INSERT OR REPLACE INTO meta (name, value) VALUES ('history_indexed', coalesce((SELECT max(id) FROM history), 0));
        \(historyUnindexTrigger10)
        ALTER TABLE history_caller ADD COLUMN last_row INTEGER NOT NULL DEFAULT 0;
        UPDATE history_caller SET last_row = t.last
            FROM (SELECT caller, max(id) AS last FROM history WHERE caller IS NOT NULL GROUP BY caller) t WHERE t.caller = history_caller.id;
        CREATE INDEX history_caller_last_row ON history_caller (last_row);
        """

    /// Schema 10's trigger: a row deleted (pruning) took its entries in the index tables with it.
    static let historyUnindexTrigger10 = """
        CREATE TRIGGER history_unindex AFTER DELETE ON history BEGIN
            DELETE FROM history_index WHERE key_id = old.key_id AND revision = old.revision AND id = old.id;
            DELETE FROM history_by_change WHERE change = old.change AND id = old.id;
        END;
        """

    /// Schema step 10 → 11: one `history_index` entry per key per batch instead of one per row.
    /// An entry is named by its key and the last of its rows (`revision`, `id`: a key's rows are
    /// ordered by revision, then id, and its revisions never decrease with its ids, the store's
    /// revision growing from one commit to the next), counts its rows kept (`count`) and packs
    /// the others (`rows`, see ``HistoryTable/pack(_:)``; NULL when it has no other). A batch of
    /// 512 rows of 16 keys then inserts 16 entries into the index instead of 512, each B-tree
    /// insertion costing several thousand instructions. The entries packing rows are indexed
    /// on their own (`history_index_packed`), so the rows are counted at start-up from the
    /// index's count of entries and those few, not by reading every entry's `count`. The
    /// migrated entries are schema 10's, one row each.
    static let historyPackedIndexSchema = """
        DROP TRIGGER history_unindex;
        CREATE TABLE history_index_11 (
            key_id INTEGER NOT NULL,
            revision INTEGER NOT NULL,
            id INTEGER NOT NULL,
            count INTEGER NOT NULL,
            rows BLOB,
            PRIMARY KEY (key_id, revision, id)
        ) WITHOUT ROWID;
        INSERT INTO history_index_11 (key_id, revision, id, count)
            SELECT key_id, revision, id, 1 FROM history_index ORDER BY key_id, revision, id;
        DROP TABLE history_index;
        ALTER TABLE history_index_11 RENAME TO history_index;
        CREATE INDEX history_index_packed ON history_index (key_id, revision, id) WHERE rows IS NOT NULL;
        \(historyUnindexTrigger)
        """

    /// A row deleted (pruning) is no longer counted by the entry holding it (the key's first
    /// entry named at or after the row: entries of one key hold disjoint runs of its rows), and
    /// an entry counting no row goes; its entry by change goes with it. A partly pruned entry
    /// keeps the ids of its deleted rows packed: queries look each row up and skip those gone,
    /// and the live ones are its last `count` (a key's rows are always deleted oldest first).
    static let historyUnindexTrigger = """
        CREATE TRIGGER history_unindex AFTER DELETE ON history BEGIN
            UPDATE history_index SET count = count - 1 WHERE key_id = old.key_id AND (revision, id) = (
                SELECT revision, id FROM history_index WHERE key_id = old.key_id AND (revision, id) >= (old.revision, old.id)
                ORDER BY revision, id LIMIT 1);
            DELETE FROM history_index WHERE key_id = old.key_id AND count <= 0 AND (revision, id) = (
                SELECT revision, id FROM history_index WHERE key_id = old.key_id AND (revision, id) >= (old.revision, old.id)
                ORDER BY revision, id LIMIT 1);
            DELETE FROM history_by_change WHERE change = old.change AND id = old.id;
        END;
        """

    /// Whether history passes one of its bounds, or a batch of rows waits to be indexed: the
    /// daemon then runs ``pruneHistory()`` between rounds.
    public var historyNeedsPruning: Bool {
        guard historyOptions.isEnabled else { return false }
        return (try? historyTable.needsPruning(historyOptions, now: HistoryTable.now())) ?? false
    }

    /// One step of its own (a small transaction between rounds, never in a call's commit):
    /// indexes a batch of rows and prunes; returns whether another step has work.
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

    /// The revision of the last change committed before `time` (nanoseconds since the epoch;
    /// 0: none): a span of history starting at `time` lies above it. A binary search over the
    /// rows (their times never decrease), not a scan: O(log² n) page reads.
    public func historyRevision(before time: Int64) throws(PropBusError) -> UInt64 {
        do { return try historyTable.revision(before: time) } catch {
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
