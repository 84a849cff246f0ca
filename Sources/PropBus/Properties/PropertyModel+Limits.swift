import DBusValues

extension PropertyModel {
    /// Room kept for a `GetAll` reply's header fields.
    private static let replyHeaderAllowance = 4096

    /// Refuses a write that would make `group`'s `GetAll` (its every value, as `a{sv}`) too big
    /// for one message, unless it shrinks it: a group nobody could read whole (and whose
    /// start-up InterfacesAdded would be too big) must not be built one Set at a time.
    func checkGroupFits(_ group: String, with changed: [(Key, DBusValue)]) throws(PropBusError) {
        let limit = limits.maximumMessageSize - Self.replyHeaderAllowance
        if changed.count == 1 {
            // The common case (one create or Set), without building a dictionary of one.
            let (key, value) = changed[0]
            var bound = (groupBounds[group] ?? 0) + 8 + Self.replyBound(name: key.name, value: value)
            if let old = entries[key] { bound -= Self.replyBound(name: key.name, value: old.value) }
            if bound <= limit { return }
        }
        let overrides = Dictionary(changed.map { ($0.0.name, $0.1) }, uniquingKeysWith: { $1 })
        // Fast path: the kept bound, with the changed entries' bounds in place of their old ones.
        var bound = (groupBounds[group] ?? 0) + 8
        for (name, value) in overrides {
            if let old = entries[Key(uncheckedGroup: group, name: name)] { bound -= Self.replyBound(name: name, value: old.value) }
            bound += Self.replyBound(name: name, value: value)
        }
        if bound <= limit { return }
        let names = groups[group] ?? []
        var before: [DictionaryEntry] = []
        var after: [DictionaryEntry] = []
        for name in names {
            guard let entry = entries[Key(uncheckedGroup: group, name: name)] else { continue }
            before.append(DictionaryEntry(.string(name), .variant(entry.value)))
            after.append(DictionaryEntry(.string(name), .variant(overrides[name] ?? entry.value)))
        }
        for (name, value) in overrides where !names.contains(name) {
            after.append(DictionaryEntry(.string(name), .variant(value)))
        }
        let newSize = DBusValue.dictionary(key: .string, value: .variant, after).wireSize()
        guard newSize > limit else { return }
        let oldSize = DBusValue.dictionary(key: .string, value: .variant, before).wireSize()
        guard newSize > oldSize else { return }
        throw PropBusError(.limitsExceeded, "group \(group) would hold \(newSize) bytes of values, more than fits in one message (\(limits.maximumMessageSize) bytes, --max-message-size), so its GetAll could not be answered; store large values in separate groups")
    }

    /// At least what the entry `name` → `value` adds to an `a{sv}` body wherever it falls: the
    /// entry's alignment, the name, the variant's signature, and the value at its worst offset
    /// (its layout depends only on where it starts modulo 8).
    static func replyBound(name: String, value: DBusValue) -> Int {
        var valueSize = 0
        for offset in 0..<8 { valueSize = max(valueSize, value.wireSize(at: offset)) }
        return 7 + (4 + name.utf8.count + 1) + (1 + value.signature.utf8.count + 1) + valueSize
    }

    /// Adds or replaces an entry; every change of `entries` goes through here or ``remove(_:)``,
    /// which keep `groups` and `groupBounds` in step.
    func insert(_ entry: Entry) {
        let key = entry.definition.key
        if let old = entries.updateValue(entry) {
            groupBounds[key.group, default: 0] -= Self.replyBound(name: key.name, value: old.value)
            if let creator = old.definition.creator { release(old, from: creator) }
        }
        if let creator = entry.definition.creator {
            usage.charge(.properties, to: creator)
            usage.charge(.storedBytes, to: creator, Self.storedSize(of: entry))
        }
        groupBounds[key.group, default: 0] += Self.replyBound(name: key.name, value: entry.value)
        if groups[key.group, default: []].insert(key.name).inserted {
            // Checked first: a start-up inserts every key while no group was read yet, and
            // removing from an empty dictionary still hashes the group.
            if !sortedKeys.isEmpty { sortedKeys[key.group] = nil }
            sortedAllKeys = nil
        }
    }

    @discardableResult
    func remove(_ key: Key) -> Entry? {
        guard let entry = entries.removeValue(forKey: key) else { return nil }
        groupBounds[key.group, default: 0] -= Self.replyBound(name: key.name, value: entry.value)
        if let creator = entry.definition.creator { release(entry, from: creator) }
        groups[key.group]?.remove(key.name)
        sortedKeys[key.group] = nil
        sortedAllKeys = nil
        if groups[key.group]?.isEmpty == true {
            groups[key.group] = nil
            groupBounds[key.group] = nil
        }
        return entry
    }

    private func release(_ entry: Entry, from creator: UInt32) {
        usage.release(.properties, from: creator)
        usage.release(.storedBytes, from: creator, Self.storedSize(of: entry))
    }

    /// What an entry's value holds of its creator's ``Quota/storedBytes``: the marshalled size
    /// of its stored value (a hidden one included: it is kept too); a default costs nothing.
    static func storedSize(of entry: Entry) -> UInt64 {
        guard let value = entry.storedValue ?? entry.hidden?.value else { return 0 }
        return UInt64(value.wireSize())
    }

    /// Refuses writes (`nil`: reset) that would take a creator over its quota of stored bytes.
    /// Charged to the key's creator, whoever writes: a uid's keys hold at most its quota.
    func checkStoredBytes(_ writes: [(Key, DBusValue?)]) throws(PropBusError) {
        guard quotas.isEnabled, !usage.isEmpty else { return }
        var growth: [UInt32: (added: UInt64, removed: UInt64, key: Key)] = [:]
        for (key, value) in writes {
            guard let entry = entries[key], let creator = entry.definition.creator, !quotas.isExempt(creator) else { continue }
            let old = Self.storedSize(of: entry)
            let new = value.map { UInt64($0.wireSize()) } ?? (entry.hidden == nil ? 0 : old)
            var total = growth[creator] ?? (0, 0, key)
            total.added += new
            total.removed += old
            growth[creator] = total
        }
        for (creator, total) in growth.sorted(by: { $0.key < $1.key }) where total.added > total.removed {
            try quotas.check(.storedBytes, uid: creator, using: usage.used(.storedBytes, by: creator) - min(total.removed, usage.used(.storedBytes, by: creator)),
                             adding: total.added, "cannot write \(total.key)")
        }
    }


    /// The kept bound of `group`'s `GetAll` body (tests check it against a fresh sum).
    func replyBound(ofGroup group: String) -> Int { groupBounds[group] ?? 0 }
}
