/// The model's entries, compactly: one contiguous array of entries and an index from key text
/// to position, instead of a `[Key: Entry]` whose buckets (a 48-byte key and a whole entry
/// each, at most three quarters full) took most of a 100k-property daemon's memory.
///
/// Removal moves the last entry into the freed place, so positions are not stable; the table
/// has no order (callers sort).
struct EntryTable {
    private(set) var entries: [PropertyModel.Entry] = []
    /// Position in `entries` by key text (a key's identity is its text).
    private var index: [String: Int32] = [:]

    var count: Int { entries.count }

    /// Makes room for `count` entries, so a bulk load grows nothing.
    mutating func reserveCapacity(_ count: Int) {
        entries.reserveCapacity(count)
        index.reserveCapacity(count)
    }

    subscript(key: Key) -> PropertyModel.Entry? {
        guard let position = index[key.text] else { return nil }
        return entries[Int(position)]
    }

    /// Reads the entry for `key` where it is, without copying it (a copy retains every
    /// reference its definition holds: the read paths' cost).
    func read<Result>(_ key: Key, _ body: (borrowing PropertyModel.Entry) -> Result) -> Result? {
        guard let position = index[key.text] else { return nil }
        return entries.withUnsafeBufferPointer { body($0[Int(position)]) }
    }

    /// Every key, in no particular order.
    var keys: [Key] { entries.map(\.definition.key) }

    /// Every entry, in no particular order.
    var values: [PropertyModel.Entry] { entries }

    /// Adds `entry` or replaces the one with its key; returns the replaced one.
    @discardableResult
    mutating func updateValue(_ entry: PropertyModel.Entry) -> PropertyModel.Entry? {
        let text = entry.definition.key.text
        if let position = index[text] {
            let old = entries[Int(position)]
            entries[Int(position)] = entry
            return old
        }
        index[text] = Int32(entries.count)
        entries.append(entry)
        return nil
    }

    /// Removes the entry for `key`; returns it.
    mutating func removeValue(forKey key: Key) -> PropertyModel.Entry? {
        guard let position = index.removeValue(forKey: key.text).map(Int.init) else { return nil }
        let removed = entries[position]
        let last = entries.removeLast()
        if position < entries.count {
            entries[position] = last
            index[last.definition.key.text] = Int32(position)
        }
        return removed
    }
}
