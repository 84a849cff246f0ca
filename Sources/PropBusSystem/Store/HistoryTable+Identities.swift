import CSQLite
import PropBus

/// The ids of history's callers and keys in `history_caller` and `history_key`, found in
/// memory when they can be: asked for every key of every durable write.
extension HistoryTable {
    /// Forgets the callers' and keys' ids known in memory (a rollback may have taken some
    /// back; a sweep deleted some).
    func forgetIdentities() {
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

    /// The id of `origin`'s caller (``WriteSet/Origin/caller``), read from the origin in place
    /// rather than copied out of it with its strings.
    func callerID(of origin: WriteSet.Origin, row: Int64) throws(SQLiteError) -> Int64? {
        switch origin {
        case .call(let caller), .revert(let caller), .fleet(_, let caller?), .fleetLayer(_, let caller?):
            return try callerID(of: caller, row: row)
        default:
            return nil
        }
    }

    /// Whether `a` and `b` are the same caller (all but the method, which is the row's).
    private static func sameIdentity(_ a: WriteSet.Caller, _ b: WriteSet.Caller) -> Bool {
        a.busName == b.busName && a.userID == b.userID && a.processID == b.processID && a.userName == b.userName
            && a.command == b.command && a.executable == b.executable && a.unit == b.unit && a.host == b.host
    }

    /// `caller`'s id in `history_caller`, its `last_row` raised to cover `row` if needed: the
    /// last change's, the cache's (by bus name), the table's, or a new row's (in the commit's
    /// transaction: a rollback takes it back, ``commitFailed()``).
    func callerID(of caller: WriteSet.Caller, row: Int64) throws(SQLiteError) -> Int64 {
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
        return cached.id
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
}
