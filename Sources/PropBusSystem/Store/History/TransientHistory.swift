import DBusValues
import PropBus

/// The changes of transient keys, kept in memory only (never written to disk), oldest first,
/// bounded in rows and in bytes (``HistoryRecord/chargedBytes``) and per uid by the
/// `history-bytes` quota: past it a uid's own oldest records go first. A value larger than
/// ``HistoryOptions/maximumValueSize`` is kept as its digest, as on disk.
///
/// Owned by ``SQLiteHistory``, confined like it to the service's queue.
final class TransientHistory {
    /// The records, oldest first (revisions never decrease).
    private(set) var records: [HistoryRecord] = []
    /// Their bytes, together and by the uid whose call made each.
    private(set) var bytes = 0
    private(set) var bytesByUID: [UInt32: Int] = [:]
    /// The revision at which each key's present definition began (its last creation) and
    /// whether it was deleted since: what ``HistoryRecord/ofDeletedDefinition`` is read from.
    /// Kept apart from the records, which may go before the creation or deletion that ended
    /// their definition; forgotten with the key's last record.
    private var definitions: [Key: (born: UInt64, alive: Bool)] = [:]

    /// Keeps the transient keys' changes of `writeSet` (after its commit: nothing to undo).
    func record(_ writeSet: WriteSet, time: Int64, options: HistoryOptions) {
        var added = false
        for change in writeSet.changes where change.entries.contains(where: HistoryRecorder.isTransient) {
            let caller = change.origin.caller
            for entry in change.entries where HistoryRecorder.isTransient(entry) {
                let old = entry.before?.value, new = entry.after?.value
                let kind = HistoryRecorder.kind(old: old, new: new) { entry.before?.definition != entry.after?.definition }
                var record = HistoryRecord(change: change.id, revision: entry.after?.revision ?? writeSet.revision, time: time, key: entry.key,
                                           kind: kind, oldValue: nil, newValue: nil, via: entry.via ?? change.origin.via,
                                           caller: caller, transient: true)
                record.flags = HistoryRecorder.flags(of: entry)
                // Too large to keep whole: the value alone past the bound, then the record (what
                // is left of it) past the writer's whole quota.
                func kept(_ value: DBusValue?, within bound: Int) -> (DBusValue?, ValueDigest?) {
                    guard let value else { return (nil, nil) }
                    return value.wireSize() > bound ? (nil, ValueDigest(of: value)) : (value, nil)
                }
                (record.oldValue, record.oldDigest) = kept(old, within: options.maximumValueSize)
                (record.newValue, record.newDigest) = kept(new, within: options.maximumValueSize)
                if let quota = options.quota(of: caller?.userID), record.chargedBytes > quota {
                    (record.oldValue, record.oldDigest) = kept(old, within: -1)
                    (record.newValue, record.newDigest) = kept(new, within: -1)
                }
                if kind == "created" { definitions[entry.key] = (record.revision, true) }
                if kind == "deleted" { definitions[entry.key, default: (0, true)].alive = false }
                append(record)
                added = true
            }
        }
        if added { trim(options) }
    }

    private func append(_ record: HistoryRecord) {
        let size = record.chargedBytes
        bytes += size
        if let uid = record.caller?.userID { bytesByUID[uid, default: 0] += size }
        records.append(record)
    }

    /// Drops records past the bounds: the oldest past the rows and bytes, a uid's own oldest
    /// past its quota, a key's oldest past ``HistoryOptions/maximumPerKey``.
    private func trim(_ options: HistoryOptions) {
        var uidExcess: [UInt32: Int] = [:]
        for (uid, held) in bytesByUID { if let quota = options.quota(of: uid), held > quota { uidExcess[uid] = held - quota } }
        var keyExcess: [Key: Int] = [:]
        if let limit = options.maximumPerKey {
            var counts: [Key: Int] = [:]
            for record in records { counts[record.key, default: 0] += 1 }
            for (key, count) in counts where count > limit { keyExcess[key] = count - limit }
        }
        if !uidExcess.isEmpty || !keyExcess.isEmpty {
            // Rare (a uid past its quota, a key past its bound): one pass that keeps the others.
            var kept: [HistoryRecord] = []
            kept.reserveCapacity(records.count)
            for record in records {
                if let uid = record.caller?.userID, let excess = uidExcess[uid], excess > 0 {
                    uidExcess[uid] = excess - record.chargedBytes
                    continue
                }
                if let excess = keyExcess[record.key], excess > 0 {
                    keyExcess[record.key] = excess - 1
                    continue
                }
                kept.append(record)
            }
            records.removeAll(keepingCapacity: true)
            bytes = 0
            bytesByUID.removeAll(keepingCapacity: true)
            for record in kept { append(record) }
        }
        // The common case: the oldest go, a prefix.
        var dropped = 0
        while records.count - dropped > options.maximumTransientRows || (bytes > options.maximumTransientBytes && dropped < records.count) {
            let size = records[dropped].chargedBytes
            bytes -= size
            if let uid = records[dropped].caller?.userID {
                bytesByUID[uid, default: 0] -= size
                if bytesByUID[uid] ?? 0 <= 0 { bytesByUID[uid] = nil }
            }
            dropped += 1
        }
        if dropped > 0 { records.removeFirst(dropped) }
        // What a dropped key's definition was matters no more once its last record went.
        if definitions.count > 1024, definitions.count > records.count / 2 {
            let keys = Set(records.map(\.key))
            definitions = definitions.filter { keys.contains($0.key) }
        }
    }

    /// `record` with ``HistoryRecord/ofDeletedDefinition`` read from the key's definitions.
    private func placed(_ record: HistoryRecord) -> HistoryRecord {
        guard let definition = definitions[record.key] else { return record }
        var record = record
        record.ofDeletedDefinition = !definition.alive || record.revision < definition.born
        return record
    }

    /// The records `query` could select above `after`, in revision order (the scan filters them).
    func records(after: UInt64) -> [HistoryRecord] {
        let start = records.partitioningIndex { $0.revision > after }
        return records[start...].map(placed)
    }

    /// The records of one change.
    func records(ofChange change: UInt64) -> [HistoryRecord] {
        records.filter { $0.change == change }.map(placed)
    }

    /// `key`'s last record at or before `revision`, and its latest.
    func records(of key: Key, atOrBefore revision: UInt64) -> (then: HistoryRecord?, latest: HistoryRecord?) {
        (records.last { $0.key == key && $0.revision <= revision }.map(placed), records.last { $0.key == key }.map(placed))
    }
}
