import CSQLite
import DBusValues
import PropBus

/// Writes a commit's history rows, in the commit's transaction: one row per persistent key
/// per change, appended to `history` (no index entry: ``HistoryIndexer`` adds those between
/// rounds), each charged to the uid whose call made the change (``HistoryUsage``).
///
/// A value whose stored encoding passes ``HistoryOptions/maximumValueSize``, or a row that
/// would alone pass its writer's `history-bytes` quota, is kept as its digest (``ValueDigest``).
///
/// Owned by ``SQLiteHistory``, confined like it to the service's queue.
final class HistoryRecorder {
    private let identities: HistoryIdentities
    private let indexer: HistoryIndexer
    private let usage: HistoryUsage
    private let keyRows: KeyRowCounts
    private var insert: SQLiteStatement?
    /// The next row's id: one past the last row's, and past every id indexed already (ids are
    /// never given twice, even after every row was pruned: the index tables key rows by id).
    private(set) var nextID: Int64 = 1
    /// The last row's time: a commit's is at least this, so times never decrease with ids (a
    /// time is then found by a binary search over the rows).
    private(set) var lastTime: Int64 = 0
    /// What ``insert`` holds bound as the kind and via (parameters 6, 9; `nil`: not bound
    /// since it was prepared): bound again only when they change, as binding text copies it.
    private var boundKind: String?
    private var boundVia: String?

    init(identities: HistoryIdentities, indexer: HistoryIndexer, usage: HistoryUsage, keyRows: KeyRowCounts) {
        self.identities = identities
        self.indexer = indexer
        self.usage = usage
        self.keyRows = keyRows
    }

    func attach(_ database: SQLiteDatabase) throws(SQLiteError) {
        boundKind = nil
        boundVia = nil
        insert = try database.prepare("""
            INSERT INTO history (id, \(HistoryRows.storedColumns)) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
            """)
        let last = try database.textRows("SELECT id FROM history ORDER BY id DESC LIMIT 1")
        nextID = max(Int64(last.first ?? "0") ?? 0, indexer.indexedThrough) + 1
        lastTime = Int64(try database.textRows("SELECT time FROM history ORDER BY id DESC LIMIT 1").first ?? "0") ?? 0
    }

    /// `created`, `changed`, `redefined` or `deleted`, of a key whose values were `old` and
    /// `new`, and whose definitions differ when `redefined` says so (asked only of an unchanged
    /// value). Not a function of the entry: passing one copied it whole, for every key of every
    /// commit.
    static func kind(old: DBusValue?, new: DBusValue?, redefined: () -> Bool) -> String {
        guard let old else { return "created" }
        guard let new else { return "deleted" }
        guard old == new else { return "changed" }
        return redefined() ? "redefined" : "changed"
    }

    /// ``WriteSet/Entry/isTransient``, reading the one field through the optionals instead of
    /// copying the entry (`after ?? before`): asked of every key of every commit, twice.
    static func isTransient(_ entry: WriteSet.Entry) -> Bool {
        !(entry.after?.definition.persistent ?? entry.before?.definition.persistent ?? true)
    }

    /// The flags of `entry`'s row: secret on either side, and whether the key had a value of
    /// its own before and after.
    static func flags(of entry: WriteSet.Entry) -> HistoryRecord.Flags {
        var flags: HistoryRecord.Flags = []
        if entry.before?.definition.secret == true || entry.after?.definition.secret == true { flags.insert(.secret) }
        if let before = entry.before, before.storedValue == nil { flags.insert(.oldUnset) }
        if let after = entry.after, after.storedValue == nil { flags.insert(.newUnset) }
        return flags
    }

    /// Writes the persistent keys' changes; call inside the commit's transaction. Deletes
    /// nothing and indexes nothing: steps between rounds do.
    ///
    /// Binds straight from the write set, one parameter at a time, the key and the caller as
    /// their ids: this runs for every key of every durable write. The write set is read in
    /// place, through its arrays' buffers: iterating them copied each change and each entry
    /// (retaining and releasing their definitions' and values' storage), several times per key.
    /// Returns the commit's time.
    @discardableResult
    func record(_ writeSet: WriteSet, options: HistoryOptions) throws(SQLiteError) -> Int64 {
        guard let insert else { return lastTime }
        // Never before the last row: a time is then found by a binary search over the rows.
        let time = max(HistoryRows.now(), lastTime)
        lastTime = time
        let revision = writeSet.revision
        try writeSet.changes.withUnsafeBufferPointer { (changes) throws(SQLiteError) in
            for index in changes.indices {
                try changes[index].entries.withUnsafeBufferPointer { (entries) throws(SQLiteError) in
                    try record(entries, of: changes[index].origin, revision: revision, time: time, insert: insert, options: options)
                }
            }
        }
        return time
    }

    /// One change's rows: `entries` are its keys, `origin` where it came from.
    private func record(_ entries: UnsafeBufferPointer<WriteSet.Entry>, of origin: WriteSet.Origin, revision: UInt64, time: Int64,
                        insert: SQLiteStatement, options: HistoryOptions) throws(SQLiteError) {
        // The change's id (``WriteSet/Change/id``: its highest revision) and whether it has a
        // persistent key, in one pass.
        var changeID: UInt64 = 0, persistent = false
        for index in entries.indices {
            changeID = max(changeID, entries[index].after?.revision ?? entries[index].before?.revision ?? 0)
            if !Self.isTransient(entries[index]) { persistent = true }
        }
        guard persistent else { return }
        let id = Int64(bitPattern: changeID), via = origin.via
        let caller = try identities.caller(of: origin, row: nextID)
        let uid = caller?.caller.userID
        let quota = options.quota(of: uid)
        for index in entries.indices where !Self.isTransient(entries[index]) {
            let key = try identities.entry(of: entries[index].key), keyID = key.id
            insert.reset()
            try insert.bind(.integer(nextID), at: 1)
            try insert.bind(.integer(id), at: 2)
            let rowRevision = Int64(bitPattern: entries[index].after?.revision ?? revision)
            try insert.bind(.integer(rowRevision), at: 3)
            try insert.bind(.integer(time), at: 4)
            try insert.bind(.integer(keyID), at: 5)
            let oldValue = entries[index].before?.value, newValue = entries[index].after?.value
            let kind = Self.kind(old: oldValue, new: newValue) { entries[index].before?.definition != entries[index].after?.definition }
            if boundKind != kind {
                try insert.bind(.text(kind), at: 6)
                boundKind = kind
            }
            // The old value is the key's last row's new one: its bytes, or its digest, are known.
            let knownOldDigest = oldValue.flatMap { value in key.writtenDigest.flatMap { $0.value == value ? $0.digest : nil } }
            var oldBytes = knownOldDigest == nil ? oldValue.map { Self.bytes(of: $0, knowing: key.written) } : knownOldDigest?.stored
            var newBytes: [UInt8]?
            if let value = newValue {
                let bytes = Self.bytes(of: value, knowing: key.stored)
                newBytes = bytes
                key.written = bytes.count <= HistoryIdentities.maximumCachedValueBytes ? (value, bytes) : nil
            } else {
                key.written = nil
            }
            key.stored = nil
            var flags = Self.flags(of: entries[index]).rawValue
            // Too large to keep whole: the value alone past the bound, then the row (what is left
            // of it) past the writer's whole quota.
            if knownOldDigest != nil {
                flags |= HistoryRows.oldIsDigest
            } else if let value = oldValue, let bytes = oldBytes, bytes.count > options.maximumValueSize {
                oldBytes = ValueDigest(of: value, encoded: bytes).stored
                flags |= HistoryRows.oldIsDigest
            }
            key.writtenDigest = nil
            if let value = newValue, let bytes = newBytes, bytes.count > options.maximumValueSize {
                let digest = ValueDigest(of: value, encoded: bytes)
                newBytes = digest.stored
                flags |= HistoryRows.newIsDigest
                key.writtenDigest = (value, digest)
            }
            if let quota, HistoryRows.bytes(old: oldBytes?.count ?? 0, new: newBytes?.count ?? 0) > quota {
                if let value = oldValue, let bytes = oldBytes, flags & HistoryRows.oldIsDigest == 0 {
                    oldBytes = ValueDigest(of: value, encoded: bytes).stored
                    flags |= HistoryRows.oldIsDigest
                }
                if let value = newValue, let bytes = newBytes, flags & HistoryRows.newIsDigest == 0 {
                    newBytes = ValueDigest(of: value, encoded: bytes).stored
                    flags |= HistoryRows.newIsDigest
                }
            }
            let rowVia = entries[index].via ?? via
            if boundVia != rowVia {
                try insert.bind(.text(rowVia), at: 9)
                boundVia = rowVia
            }
            try insert.bind(caller.map { .integer($0.id) } ?? .null, at: 10)
            try insert.bind(.integer(flags), at: 11)
            try insert.run(blobs: oldBytes, newBytes, at: (7, 8))
            // The definition the key's rows belong to: a creation starts one, a deletion ends it.
            if kind == "created" { try identities.setDefinition(ofKeyID: keyID, born: rowRevision, alive: true) }
            if kind == "deleted" { try identities.setDefinition(ofKeyID: keyID, born: nil, alive: false) }
            usage.added(bytes: HistoryRows.bytes(old: oldBytes?.count ?? 0, new: newBytes?.count ?? 0), uid: uid)
            // A rolled-back commit leaves a gap in the ids, which only need to grow.
            indexer.added(HistoryIndexer.TailRow(keyID: keyID, uid: uid.map { Int64($0) }, revision: rowRevision, id: nextID),
                          isDeletion: id < rowRevision)
            nextID += 1
            if let limit = options.maximumPerKey { try keyRows.added(to: entries[index].key, id: keyID, limit: limit) }
        }
    }

    /// `value`'s bytes: `known`'s if it holds the same value, else encoded.
    private static func bytes(of value: DBusValue, knowing known: (value: DBusValue, bytes: [UInt8])?) -> [UInt8] {
        if let known, known.value == value { return known.bytes }
        return ValueCodec.encode(value)
    }

    /// The commit ``record(_:options:)`` wrote into was rolled back.
    func commitFailed() {
        // A bind that failed may have left its parameter as it was.
        boundKind = nil
        boundVia = nil
    }
}
