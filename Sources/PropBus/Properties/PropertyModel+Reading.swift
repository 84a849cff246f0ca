import DBusValues

extension PropertyModel {
    // MARK: Reading

    /// The entry for `key`, or `UnknownKey`.
    public func entry(_ key: String) throws(PropBusError) -> Entry {
        let parsed = try Key(key)
        guard let entry = entries[parsed] else { throw .unknownKey(key) }
        return entry
    }

    /// The entry for a parsed key, if registered.
    public func entry(for key: Key) -> Entry? { entries[key] }

    /// The definition of a parsed key, if registered, read in place (no entry copied).
    public func definition(for key: Key) -> PropertyDefinition? { entries.read(key) { $0.definition } }

    /// The current value of `key`.
    public func value(of key: String) throws(PropBusError) -> DBusValue { try entry(key).value }

    /// What the read paths need of `key`'s entry (Get, GetAll, GetManagedObjects): the value
    /// clients see and whether the key is secret, read in place. ``entry(for:)`` copies the
    /// whole entry, retaining every reference its definition holds, which was most of the time a
    /// GetManagedObjects of 10k properties took.
    public func readableValue(for key: Key) -> (value: DBusValue, secret: Bool)? {
        entries.read(key) { entry in (entry.value, entry.definition.secret) }
    }

    /// Every entry whose key starts with `prefix`, sorted by key.
    public func list(prefix: String = "") -> [Entry] {
        entries.values.filter { $0.definition.key.text.hasPrefix(prefix) }.sorted { $0.definition.key < $1.definition.key }
    }

    /// The keys whose definition satisfies `predicate`, sorted; copies no entry.
    public func keys(where predicate: (PropertyDefinition) -> Bool) -> [Key] {
        var keys: [Key] = []
        for entry in entries.values where predicate(entry.definition) { keys.append(entry.definition.key) }
        return keys.sorted()
    }

    /// Visits every entry whose key starts with `prefix`, in key order, where it is: nothing is
    /// copied (``list(prefix:)`` copies and sorts whole entries, most of what a 10k-property
    /// `ListProperties` cost the model). `body` must not touch the model.
    public func forEachEntry(withPrefix prefix: String, _ body: (borrowing Entry) -> Void) {
        let all = allKeysSorted()
        // Keys are ASCII: those starting with `prefix` are one run of the sorted list.
        var low = 0, high = all.count
        while low < high {
            let middle = (low + high) / 2
            if all[middle].text < prefix { low = middle + 1 } else { high = middle }
        }
        for key in all[low...] {
            guard key.text.hasPrefix(prefix) else { break }
            _ = entries.read(key, body)
        }
    }

    /// Every key, sorted; kept until a key comes or goes.
    func allKeysSorted() -> [Key] {
        if let sortedAllKeys { return sortedAllKeys }
        let sorted = entries.keys.sorted()
        sortedAllKeys = sorted
        return sorted
    }

    /// The keys of `group` in name order; empty for an unknown group. Kept until the group's
    /// names change, so reading a group (GetAll, GetManagedObjects) sorts and builds nothing.
    public func keys(inGroup group: String) -> [Key] {
        if let cached = sortedKeys[group] { return cached }
        let keys = (groups[group] ?? []).sorted().map { Key(uncheckedGroup: group, name: $0) }
        if !keys.isEmpty { sortedKeys[group] = keys }
        return keys
    }

    /// The names in `group`, sorted; empty for an unknown group.
    public func names(inGroup group: String) -> [String] { (groups[group] ?? []).sorted() }

    /// Every group that has at least one property.
    public var groupNames: [String] { groups.keys.sorted() }

    /// How many properties exist.
    public var count: Int { entries.count }
}
