import CSQLite
import DBusValues
import Glibc
import PropBus

/// The store's schema, one step per version, and how an older store is brought up to
/// ``SQLiteStore/schemaVersion``: each step in one transaction, the rows kept.
enum StoreSchema {
    static func migrate(_ database: SQLiteDatabase, path: String) throws -> Void {
        let version = Int64(try database.textRows("PRAGMA user_version").first ?? "0") ?? 0
        if version == SQLiteStore.schemaVersion { return }
        guard version < SQLiteStore.schemaVersion else {
            throw PropBusError(.storeFailed, "the store \(path) has schema version \(version); this propbusd reads versions up to \(SQLiteStore.schemaVersion)")
        }
        // Each step brings the schema from one version to the next, in one transaction.
        let steps: [Int64: String] = [
            0: """
                CREATE TABLE definitions (
                    key TEXT PRIMARY KEY NOT NULL,
                    type TEXT NOT NULL,
                    default_value BLOB NOT NULL,
                    options BLOB NOT NULL
                ) WITHOUT ROWID;
                CREATE TABLE stored_values (
                    key TEXT PRIMARY KEY NOT NULL,
                    value BLOB NOT NULL,
                    revision INTEGER NOT NULL
                ) WITHOUT ROWID;
                CREATE TABLE meta (
                    name TEXT PRIMARY KEY NOT NULL,
                    value INTEGER NOT NULL
                ) WITHOUT ROWID;
                """,
            1: """
                CREATE TABLE bindings (
                    id INTEGER PRIMARY KEY NOT NULL,
                    key TEXT NOT NULL,
                    target TEXT NOT NULL,
                    options BLOB NOT NULL
                );
                """,
            2: """
                CREATE TABLE commands (
                    key TEXT PRIMARY KEY NOT NULL,
                    options BLOB NOT NULL
                ) WITHOUT ROWID;
                """,
            3: """
                CREATE TABLE fleet_keys (
                    key TEXT PRIMARY KEY NOT NULL,
                    value_revision INTEGER NOT NULL,
                    definition_revision INTEGER NOT NULL
                ) WITHOUT ROWID;
                """,
            4: historySchema,
            5: leasesSchema,
            6: deniedSchema,
            7: historyRecentSchema,
            8: historyCallerSchema,
            9: historyIndexSchema,
            10: historyPackedIndexSchema,
            11: historyChargeSchema,
        ]
        try database.execute("BEGIN IMMEDIATE")
        do {
            for from in version..<SQLiteStore.schemaVersion {
                try database.execute(steps[from]!)
            }
            try database.execute("PRAGMA user_version = \(SQLiteStore.schemaVersion)")
            try database.execute("PRAGMA application_id = \(SQLiteStore.applicationID)")
            try database.execute("COMMIT")
        } catch {
            try? database.execute("ROLLBACK")
            throw error
        }
    }

    /// Schema step 5 → 6: TTL overrides and ephemeral keys (``Lease``); `value` is the override's
    /// (NULL: an ephemeral key), `expires` NULL a connection's lifetime.
    static let leasesSchema = """
        CREATE TABLE leases (
            handle INTEGER PRIMARY KEY NOT NULL,
            key TEXT NOT NULL,
            value BLOB,
            holder TEXT NOT NULL,
            uid INTEGER,
            pid INTEGER,
            comm TEXT,
            since INTEGER NOT NULL,
            expires INTEGER
        );
        """

    /// Schema step 6 → 7: the `history_denied` table: one row per refused attempt; and the
    /// host a fleet key's change was made on, in `history`.
    static let deniedSchema = """
        ALTER TABLE history ADD COLUMN host TEXT;
        CREATE TABLE history_denied (
            id INTEGER PRIMARY KEY,
            time INTEGER NOT NULL,
            key TEXT NOT NULL,
            via TEXT NOT NULL,
            error TEXT NOT NULL,
            uid INTEGER,
            user TEXT,
            pid INTEGER,
            comm TEXT,
            exe TEXT,
            unit TEXT,
            bus_name TEXT
        );
        """

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
        INSERT INTO history_10 (id, change, revision, time, key_id, kind, old_value, new_value, via, caller)
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
    /// the others (`rows`, see ``PackedRows/pack(_:)``; NULL when it has no other). A batch of
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
        \(historyUnindexTrigger11)
        """

    /// Schema 11's trigger: a row deleted (pruning) is no longer counted by the entry holding
    /// it (the key's first entry named at or after the row: entries of one key hold disjoint
    /// runs of its rows), and an entry counting no row goes; its entry by change goes with it.
    static let historyUnindexTrigger11 = """
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

    /// Schema step 11 → 12: what history holds is charged, and its rows belong to a definition.
    /// - `history.flags`: the key was secret (its values its writers' only, whatever the key
    ///   is now), had no value of its own before or after (a revert resets it instead of
    ///   pinning what it read), and which value columns hold a digest (``ValueDigest``) rather
    ///   than the value.
    /// - `history_key.born`, `alive`: the revision the key's present definition began at (its
    ///   last creation) and whether it was deleted since; the rows before `born`, or of a key no
    ///   longer alive, belong to a deleted definition. Read from the rows at migration.
    /// - `history_by_uid`: the rows by their caller's uid, packed per batch like
    ///   `history_index` (the `uid` and `user` filters, and each uid's bound, read it); and
    ///   `history_caller (user)`, to find a user's uids.
    /// - `meta`'s `history_bytes` and `history_bytes_uid_N`: the bytes the indexed rows hold,
    ///   together and by the uid whose call made them, summed once here, then kept by the
    ///   indexing steps and the trigger (the tail's are summed at open).
    static let historyChargeSchema = """
        ALTER TABLE history ADD COLUMN flags INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE history_key ADD COLUMN born INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE history_key ADD COLUMN alive INTEGER NOT NULL DEFAULT 1;
        UPDATE history_key SET born = t.born
            FROM (SELECT key_id, max(revision) AS born FROM history WHERE kind = 'created' GROUP BY key_id) t WHERE t.key_id = history_key.id;
        UPDATE history_key SET alive = 0 WHERE id IN (
            SELECT h.key_id FROM history h JOIN (SELECT max(id) AS last FROM history GROUP BY key_id) l ON h.id = l.last WHERE h.kind = 'deleted');
        CREATE TABLE history_by_uid (
            uid INTEGER NOT NULL,
            revision INTEGER NOT NULL,
            id INTEGER NOT NULL,
            count INTEGER NOT NULL,
            rows BLOB,
            PRIMARY KEY (uid, revision, id)
        ) WITHOUT ROWID;
        INSERT INTO history_by_uid (uid, revision, id, count)
            SELECT c.uid, h.revision, h.id, 1 FROM history h JOIN history_caller c ON c.id = h.caller
            WHERE c.uid IS NOT NULL AND h.id <= coalesce((SELECT value FROM meta WHERE name = 'history_indexed'), 0)
            ORDER BY 1, 2, 3;
        CREATE INDEX history_caller_user ON history_caller (user) WHERE user IS NOT NULL;
        CREATE INDEX history_caller_uid ON history_caller (uid) WHERE uid IS NOT NULL;
        INSERT OR REPLACE INTO meta (name, value)
            SELECT 'history_bytes', coalesce(sum(\(HistoryUsage.rowBytes)), 0) FROM history h
            WHERE h.id <= coalesce((SELECT value FROM meta WHERE name = 'history_indexed'), 0);
        INSERT OR REPLACE INTO meta (name, value)
            SELECT 'history_bytes_uid_' || c.uid, sum(\(HistoryUsage.rowBytes)) FROM history h JOIN history_caller c ON c.id = h.caller
            WHERE c.uid IS NOT NULL AND h.id <= coalesce((SELECT value FROM meta WHERE name = 'history_indexed'), 0) GROUP BY c.uid;
        DROP TRIGGER history_unindex;
        \(historyUnindexTrigger)
        """

    /// A row deleted (pruning) is no longer counted by the entries holding it (of its key and
    /// of its caller's uid: the group's first entry named at or after the row, entries of one
    /// group holding disjoint runs of its rows), and an entry counting no row goes; its entry by
    /// change goes with it, and an indexed row's bytes are taken off what the indexed rows hold,
    /// and what its uid's changes hold (a row of the tail was never added). A partly pruned
    /// entry keeps the ids of its deleted rows packed: queries look each row up and skip those gone.
    static let historyUnindexTrigger = """
        CREATE TRIGGER history_unindex AFTER DELETE ON history BEGIN
            UPDATE history_index SET count = count - 1 WHERE key_id = old.key_id AND (revision, id) = (
                SELECT revision, id FROM history_index WHERE key_id = old.key_id AND (revision, id) >= (old.revision, old.id)
                ORDER BY revision, id LIMIT 1);
            DELETE FROM history_index WHERE key_id = old.key_id AND count <= 0 AND (revision, id) = (
                SELECT revision, id FROM history_index WHERE key_id = old.key_id AND (revision, id) >= (old.revision, old.id)
                ORDER BY revision, id LIMIT 1);
            DELETE FROM history_by_change WHERE change = old.change AND id = old.id;
            UPDATE history_by_uid SET count = count - 1 WHERE uid = (SELECT uid FROM history_caller WHERE id = old.caller) AND (revision, id) = (
                SELECT revision, id FROM history_by_uid WHERE uid = (SELECT uid FROM history_caller WHERE id = old.caller)
                AND (revision, id) >= (old.revision, old.id) ORDER BY revision, id LIMIT 1);
            DELETE FROM history_by_uid WHERE uid = (SELECT uid FROM history_caller WHERE id = old.caller) AND count <= 0 AND (revision, id) = (
                SELECT revision, id FROM history_by_uid WHERE uid = (SELECT uid FROM history_caller WHERE id = old.caller)
                AND (revision, id) >= (old.revision, old.id) ORDER BY revision, id LIMIT 1);
            UPDATE meta SET value = value - (coalesce(length(old.old_value), 0) + coalesce(length(old.new_value), 0) + \(HistoryRecord.fieldAllowance))
                WHERE (name = 'history_bytes' OR name = 'history_bytes_uid_' || (SELECT uid FROM history_caller WHERE id = old.caller))
                AND old.id <= (SELECT value FROM meta WHERE name = 'history_indexed');
        END;
        """
}
