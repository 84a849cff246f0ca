import DBusValues

extension PropertyModel {
    // MARK: State keys

    /// Adds a read-only, transient key owned by `owner` (its state: only the owner sets it,
    /// through ``setState(_:to:)``), unless it exists.
    public func addState(_ key: Key, initialValue value: DBusValue, of owner: Key, description: String) -> [PropertyChange] {
        guard entries[key] == nil else { return [] }
        var definition = PropertyDefinition(key: key, type: value.type, defaultValue: value)
        definition.writable = false
        definition.persistent = false
        definition.stateOf = owner
        definition.description = description
        remember(key)
        revision += 1
        reserveRevision()
        insert(Entry(definition: definition, storedValue: nil, revision: revision))
        return [.created(key)]
    }

    /// Removes every key of `group`, and the bindings that touch them (an owner's state goes
    /// with its owner).
    public func removeGroup(_ group: String) -> [PropertyChange] {
        var changes: [PropertyChange] = []
        for name in names(inGroup: group) {
            let key = Key(uncheckedGroup: group, name: name)
            remember(key)
            let entry = remove(key)!
            dropLeases(of: entry)
            changes.append(.deleted(key, old: entry.value))
            changes += bindings.touching(key).map { removeBinding($0.id) }
        }
        return changes
    }

    /// Sets a state key and spreads the change through its bindings. State is the truth: if a
    /// bound property refuses the value (its range, a failing transform), the state changes alone.
    public func setState(_ key: Key, to value: DBusValue) -> [PropertyChange] {
        guard let entry = entries[key], entry.definition.stateOf != nil, entry.value != value else { return [] }
        // Outside any call: nor through a local key in between may it reach a fleet key (that
        // write would change it on this host only; Bind refuses the direct binding).
        let held = bindings.isEmpty ? [] : boundKeys { $0.scope == .fleet }
        openVia[key] = "command state"
        return (try? write([(key, value)], holding: held)) ?? record([(key, value)])
    }

    /// The keys at either end of a binding whose definition `matches`: the keys a write must
    /// hold (not spread into) when another owns them, e.g. the fleet's for a write made outside
    /// any call. Only a binding's end can be reached by a propagation, so no other key need be named.
    public func boundKeys(where matches: (PropertyDefinition) -> Bool) -> Set<Key> {
        var ends: Set<Key> = []
        for binding in bindings.all {
            for end in [binding.key, binding.to] where entries[end].map({ matches($0.definition) }) == true { ends.insert(end) }
        }
        return ends
    }
}
