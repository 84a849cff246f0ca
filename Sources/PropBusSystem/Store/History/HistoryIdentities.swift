import CSQLite
import DBusValues
import PropBus

/// The ids of history's callers and keys in `history_caller` and `history_key`, found in
/// memory when they can be (asked for every key of every durable write), and the definition a
/// key's rows belong to (`born`, `alive`: a key deleted and created again starts another).
///
/// Owned by ``SQLiteHistory``, confined like it to the service's queue.
final class HistoryIdentities {
    /// A caller's id in `history_caller` and `last_row` there: the id of a row up to which that
    /// caller row is kept whatever the rows naming it (the last of ``callerLease`` rows from the
    /// row that last raised it), so a caller's writes raise it once in ``callerLease`` rows.
    /// A class, confined to the queue: with many writers the caller changes from one row to the
    /// next, and copying a struct holding the caller's strings in and out of the cache cost more
    /// per row than finding it.
    final class CachedCaller {
        let caller: WriteSet.Caller
        let id: Int64
        var lastRow: Int64
        init(caller: WriteSet.Caller, id: Int64, lastRow: Int64) {
            self.caller = caller
            self.id = id
            self.lastRow = lastRow
        }
    }

    /// A key's id in `history_key`, and the bytes of the last value history wrote for it and
    /// of the value the commit under way stored (``SQLiteHistory/encodeStored(_:of:)``): a row's
    /// old value is the key's last row's new one, and its new value is the one the values table
    /// just got, so neither is encoded again. A class: changed in place wherever it is found.
    final class KeyEntry {
        let id: Int64
        /// The key's text, which ``keySlots`` compares before using the entry.
        let text: String
        var written: (value: DBusValue, bytes: [UInt8])?
        var stored: (value: DBusValue, bytes: [UInt8])?
        /// The digest of the last value history wrote for the key, when it kept only that: the
        /// next row's old value, compared (the model still holds it: no copy) instead of
        /// encoded and hashed again.
        var writtenDigest: (value: DBusValue, digest: ValueDigest)?
        init(id: Int64, text: String) {
            self.id = id
            self.text = text
        }
    }

    /// Values of more bytes are not kept in a ``KeyEntry``: the cache stays small.
    static let maximumCachedValueBytes = 256
    /// Callers by bus name (a connection's identity does not change), bounded: emptied past
    /// ``maximumCachedCallers`` (a miss costs one probe of the identity index).
    private var callers: [String: CachedCaller] = [:]
    static let maximumCachedCallers = 4096
    /// The last change's caller: a connection's writes come one after the other.
    private var lastCaller: CachedCaller?
    /// Recent callers, one per slot of their bus name's ``slot(of:among:)``, in front of
    /// ``callers``: a dictionary lookup hashes the name with SipHash and probes, where this
    /// hashes a few bytes and compares the caller found in full (a collision is a miss, never
    /// another's id). Fixed storage, a `let`: an array in a `var` paid an exclusivity check at
    /// every access.
    private let callerSlots = UnsafeMutableBufferPointer<CachedCaller?>.allocate(capacity: 64)
    /// How many rows, from the one that raises it, a caller's `last_row` covers: a sweep keeps
    /// a caller up to that many rows longer than its last row (internal: tests make it 1).
    var callerLease: Int64 = 4096
    /// Keys by key, bounded like ``callers``.
    private var keys: [Key: KeyEntry] = [:]
    static let maximumCachedKeys = 16_384
    /// The last key's entry, compared by its text: keeping the last `Key` as well retained and
    /// released its three strings at every lookup.
    private var lastKeyEntry: KeyEntry?
    /// Recent keys, one per slot of their text's ``slot(of:among:)``, in front of ``keys``, as
    /// ``callerSlots``: a commit looks each key up twice (its value's bytes, its row).
    let keySlots = UnsafeMutableBufferPointer<KeyEntry?>.allocate(capacity: 1024)
    private var findCaller: SQLiteStatement?
    private var insertCaller: SQLiteStatement?
    private var raiseCallerLastRow: SQLiteStatement?
    private var findKey: SQLiteStatement?
    private var insertKey: SQLiteStatement?
    private var setDefinition: SQLiteStatement?

    init() {
        callerSlots.initialize(repeating: nil)
        keySlots.initialize(repeating: nil)
    }

    deinit {
        callerSlots.deinitialize().deallocate()
        keySlots.deinitialize().deallocate()
    }

    func attach(_ database: SQLiteDatabase) throws(SQLiteError) {
        forget()
        // The identity index answers it (`IS`: a field may be NULL).
        findCaller = try database.prepare("""
            SELECT id, last_row FROM history_caller
            WHERE bus_name = ?1 AND uid IS ?2 AND user IS ?3 AND pid IS ?4 AND comm IS ?5 AND exe IS ?6 AND unit IS ?7 AND host IS ?8
            """)
        insertCaller = try database.prepare("""
            INSERT INTO history_caller (bus_name, uid, user, pid, comm, exe, unit, host, last_row) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) RETURNING id
            """)
        raiseCallerLastRow = try database.prepare("UPDATE history_caller SET last_row = ?2 WHERE id = ?1")
        findKey = try database.prepare("SELECT id FROM history_key WHERE key = ?1")
        insertKey = try database.prepare("INSERT INTO history_key (key) VALUES (?1) RETURNING id")
        setDefinition = try database.prepare("UPDATE history_key SET born = coalesce(?2, born), alive = ?3 WHERE id = ?1")
    }

    /// Forgets the callers' and keys' ids known in memory (a rollback may have taken some
    /// back; a sweep deleted some).
    func forget() {
        forgetCallers()
        forgetKeys()
    }

    func forgetCallers() {
        callers.removeAll()
        lastCaller = nil
        callerSlots.update(repeating: nil)
    }

    func forgetKeys() {
        keys.removeAll()
        lastKeyEntry = nil
        keySlots.update(repeating: nil)
    }

    /// A slot for `text` among `count` (a power of two): FNV-1a over its bytes, a few
    /// instructions a byte. Only ever a place to look: what is found there is compared.
    static func slot(of text: String, among count: Int) -> Int {
        var hash: UInt32 = 2_166_136_261
        let hashed: Void? = text.utf8.withContiguousStorageIfAvailable { bytes in
            for byte in bytes { hash = (hash ^ UInt32(byte)) &* 16_777_619 }
        }
        if hashed == nil { for byte in text.utf8 { hash = (hash ^ UInt32(byte)) &* 16_777_619 } }
        return Int(hash ^ (hash >> 16)) & (count - 1)
    }

    /// `origin`'s caller (``WriteSet/Origin/caller``), read from the origin in place rather
    /// than copied out of it with its strings.
    func caller(of origin: WriteSet.Origin, row: Int64) throws(SQLiteError) -> CachedCaller? {
        switch origin {
        case .call(let caller), .revert(let caller), .fleet(_, let caller?), .fleetLayer(_, let caller?):
            return try self.caller(caller, row: row)
        default:
            return nil
        }
    }

    /// Whether `a` and `b` are the same caller (all but the method, which is the row's).
    private static func sameIdentity(_ a: WriteSet.Caller, _ b: WriteSet.Caller) -> Bool {
        a.busName == b.busName && a.userID == b.userID && a.processID == b.processID && a.userName == b.userName
            && a.command == b.command && a.executable == b.executable && a.unit == b.unit && a.host == b.host
    }

    /// `caller`'s row in `history_caller`, its `last_row` raised to cover `row` if needed: the
    /// last change's, the cache's (by bus name), the table's, or a new row's (in the commit's
    /// transaction: a rollback takes it back, and the owner calls ``forget()``).
    func caller(_ caller: WriteSet.Caller, row: Int64) throws(SQLiteError) -> CachedCaller {
        let cached: CachedCaller
        if let last = lastCaller, Self.sameIdentity(last.caller, caller) {
            cached = last
        } else if case let slot = Self.slot(of: caller.busName, among: callerSlots.count),
                  let recent = callerSlots[slot], Self.sameIdentity(recent.caller, caller) {
            cached = recent
        } else if let known = callers[caller.busName], Self.sameIdentity(known.caller, caller) {
            cached = known
            callerSlots[Self.slot(of: caller.busName, among: callerSlots.count)] = known
        } else if let findCaller, let insertCaller {
            var fields: [SQLiteValue] = [
                .text(caller.busName), caller.userID.map { .integer(Int64($0)) } ?? .null, caller.userName.map { .text($0) } ?? .null,
                caller.processID.map { .integer(Int64($0)) } ?? .null, caller.command.map { .text($0) } ?? .null,
                caller.executable.map { .text($0) } ?? .null, caller.unit.map { .text($0) } ?? .null, caller.host.map { .text($0) } ?? .null,
            ]
            try findCaller.bind(fields)
            if try findCaller.step() {
                cached = CachedCaller(caller: caller, id: findCaller.integer(0), lastRow: findCaller.integer(1))
                while try findCaller.step() {}
            } else {
                fields.append(.integer(row + callerLease - 1))
                try insertCaller.bind(fields)
                guard try insertCaller.step() else { throw SQLiteError(code: SQLITE_ERROR, message: "no id for a new caller row") }
                cached = CachedCaller(caller: caller, id: insertCaller.integer(0), lastRow: row + callerLease - 1)
                while try insertCaller.step() {}
            }
            if callers.count >= Self.maximumCachedCallers { callers.removeAll(keepingCapacity: true) }
            callers[caller.busName] = cached
            callerSlots[Self.slot(of: caller.busName, among: callerSlots.count)] = cached
        } else {
            throw SQLiteError(code: SQLITE_MISUSE, message: "history is not attached")
        }
        if cached.lastRow < row, let raiseCallerLastRow {
            cached.lastRow = row + callerLease - 1
            try raiseCallerLastRow.run([.integer(cached.id), .integer(cached.lastRow)])
        }
        lastCaller = cached
        return cached
    }

    /// `key`'s entry, with its id in `history_key`: the last row's, the cache's, or one made
    /// from the table's row or a new row's (in the commit's transaction, like a caller's).
    func entry(of key: Key) throws(SQLiteError) -> KeyEntry {
        if let lastKeyEntry, lastKeyEntry.text == key.text { return lastKeyEntry }
        let slot = Self.slot(of: key.text, among: keySlots.count)
        if let recent = keySlots[slot], recent.text == key.text {
            lastKeyEntry = recent
            return recent
        }
        let entry: KeyEntry
        if let known = keys[key] {
            entry = known
        } else if let findKey, let insertKey {
            try findKey.bind([.text(key.text)])
            if try findKey.step() {
                entry = KeyEntry(id: findKey.integer(0), text: key.text)
                while try findKey.step() {}
            } else {
                try insertKey.bind([.text(key.text)])
                guard try insertKey.step() else { throw SQLiteError(code: SQLITE_ERROR, message: "no id for a new key row") }
                entry = KeyEntry(id: insertKey.integer(0), text: key.text)
                while try insertKey.step() {}
            }
            if keys.count >= Self.maximumCachedKeys { keys.removeAll(keepingCapacity: true) }
            keys[key] = entry
        } else {
            throw SQLiteError(code: SQLITE_MISUSE, message: "history is not attached")
        }
        keySlots[slot] = entry
        lastKeyEntry = entry
        return entry
    }

    /// Records that key `id`'s present definition began at `revision` (a creation; `nil`: it
    /// goes on) and whether it still exists (a deletion ends it): the rows before it belong to
    /// a definition deleted since. Rare (creations, deletions), so a statement each.
    func setDefinition(ofKeyID id: Int64, born revision: Int64?, alive: Bool) throws(SQLiteError) {
        try setDefinition?.run([.integer(id), revision.map { .integer($0) } ?? .null, .integer(alive ? 1 : 0)])
    }
}
