import CSQLite
import DBusValues
import Glibc
import PropBus

/// Bringing an older store up to ``SQLiteStore/schemaVersion``, one step per version.
extension SQLiteStore {
    static func migrate(_ database: SQLiteDatabase, path: String) throws -> Void {
        let version = Int64(try database.textRows("PRAGMA user_version").first ?? "0") ?? 0
        if version == schemaVersion { return }
        guard version < schemaVersion else {
            throw PropBusError(.storeFailed, "the store \(path) has schema version \(version); this propbusd reads versions up to \(schemaVersion)")
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
        ]
        try database.execute("BEGIN IMMEDIATE")
        do {
            for from in version..<schemaVersion {
                try database.execute(steps[from]!)
            }
            try database.execute("PRAGMA user_version = \(schemaVersion)")
            try database.execute("PRAGMA application_id = \(applicationID)")
            try database.execute("COMMIT")
        } catch {
            try? database.execute("ROLLBACK")
            throw error
        }
    }
}
