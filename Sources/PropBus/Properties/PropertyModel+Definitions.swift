import DBusValues

extension PropertyModel {
    // MARK: Definitions

    /// Registers a property, or updates its metadata if it exists with the same type.
    ///
    /// Like `registerDefaults`, registering again keeps the stored value. A redefinition that
    /// changes the value spreads through the bindings, except into `held` keys (and on from
    /// them): fleet keys, when the redefinition is not a call's (a model file's, the fleet's
    /// own), since such a write would change the fleet key on this host only.
    ///
    /// `creator`, the caller's uid, is charged with a new property (``Quota/properties``) and
    /// with its stored value; a property created again keeps its first creator.
    public func create(key keyText: String, type typeText: String, defaultValue: DBusValue,
                       options: [String: DBusValue] = [:], holding held: Set<Key> = [], creator: UInt32? = nil) throws(PropBusError) -> [PropertyChange] {
        let key = try Key(keyText)
        try checkCreatable(key)
        let type: DBusType
        do { type = try DBusType(parsing: typeText) } catch {
            throw .invalidArgs("type of \(key) is not a single complete D-Bus type: \(error)")
        }
        return try create(key: key, type: type, defaultValue: defaultValue, options: options, holding: held, creator: creator, keyChecked: true)
    }

    /// ``create(key:type:defaultValue:options:holding:creator:)`` for a key and type already parsed (a model
    /// file's declarations: parsing them again was repeated work for every key).
    public func create(key: Key, type: DBusType, defaultValue: DBusValue,
                       options: [String: DBusValue] = [:], holding held: Set<Key> = []) throws(PropBusError) -> [PropertyChange] {
        try create(key: key, type: type, defaultValue: defaultValue, options: options, holding: held, creator: nil, keyChecked: false)
    }

    /// Names no new key may take: the group of binding objects, the Values interface's methods
    /// (the key would be a property of that interface), and what ``creationCheck`` refuses.
    private func checkCreatable(_ key: Key) throws(PropBusError) {
        if key.group == "bindings" || key.group.hasPrefix("bindings.") {
            throw PropBusError(.invalidKey, "invalid key '\(key)': the group 'bindings' is reserved for binding objects (\(Key.rootPath)/bindings/N)")
        }
        if PropBusAPI.valuesMethods.contains(key.name) {
            throw PropBusError(.invalidKey, "invalid key '\(key)': '\(key.name)' is a method of \(PropBusAPI.valuesInterface), the interface that carries the key; choose another name")
        }
        try creationCheck?(key)
    }

    func create(key: Key, type: DBusType, defaultValue: DBusValue, options: [String: DBusValue],
                        holding held: Set<Key>, creator: UInt32?, keyChecked: Bool) throws(PropBusError) -> [PropertyChange] {
        if !keyChecked { try checkCreatable(key) }
        try PropertyDefinition.checkStorable(type, key: key)
        var definition = PropertyDefinition(key: key, type: type, defaultValue: Self.payload(defaultValue, for: type))
        let initial = try definition.apply(options: options)
        if let lastCreated { definition.shareMetadata(with: lastCreated) }
        lastCreated = definition
        let existing = entries[key]
        if let existing, existing.definition.type != type {
            throw PropBusError(.typeMismatch, "property \(key) already exists with type '\(existing.definition.type.signature)'; cannot register it as '\(type.signature)'")
        }
        if existing == nil, entries.count >= limits.maximumProperties {
            throw PropBusError(.limitsExceeded, "cannot create \(key): the daemon holds the maximum of \(limits.maximumProperties) properties")
        }
        // A model file's declaration (no caller, a source) makes the key the daemon's; otherwise
        // the first creator keeps it. A caller's `source` option changes nothing: it is charged.
        definition.creator = creator == nil && definition.source != nil ? nil : (existing.map { $0.definition.creator } ?? creator)
        if existing == nil, let creator {
            try quotas.check(.properties, uid: creator, using: usage.used(.properties, by: creator), "cannot create \(key)")
        }
        // The default must itself be a valid value, or Reset could produce an invalid state.
        var checked = definition
        if checked.choices != nil { checked.choices = nil }
        try checked.check(definition.defaultValue, maximumSize: limits.maximumValueSize)
        if let choices = definition.choices {
            for choice in choices { try checked.check(choice, maximumSize: limits.maximumValueSize) }
        }

        remember(key)
        var entry = existing ?? Entry(definition: definition, storedValue: nil, revision: 0)
        var candidate = entry.storedValue ?? entry.hidden?.value
        if existing == nil, let stored = unclaimedValues[key] {
            // A value stored in an earlier run, for a property declared again only now.
            rememberUnclaimed(key)
            unclaimedValues[key] = nil
            candidate = stored.value
            entry.revision = stored.revision
        }
        let oldValue = existing?.value
        entry.definition = definition
        // A stored value the new definition does not admit is hidden, never deleted: it stays in
        // the store and comes back when a later definition admits it.
        entry.storedValue = nil
        entry.hidden = nil
        if let candidate { admit(candidate, into: &entry) }
        if let initial, entry.storedValue == nil, entry.hidden == nil {
            try definition.check(initial, maximumSize: limits.maximumValueSize)
            entry.storedValue = initial
        }
        // Layer-file values waiting for this key (or typed again against its new definition).
        if !layerFiles.isEmpty || entry.layers != nil {
            let resolved = resolveLayers(for: definition)
            entry.layers = resolved.layers(over: entry.layers)
            for problem in resolved.problems where !layerProblems.contains(problem) {
                rememberLayerState()
                layerProblems.append(problem)
                layerProblemHandler?(problem)
            }
        }
        // A redefinition that changes the value (a new default, a stored value the new
        // metadata forbids) spreads through the bindings like any other change.
        var propagated: [(Key, DBusValue)] = []
        if let oldValue, entry.value != oldValue, !bindings.isEmpty {
            // With the new definition's rights: one made secret now must not spread its new value.
            propagated = try propagation(overriding: definition).expand([(key, entry.value)], holding: held)
            for (target, value) in propagated {
                try writableEntry(target.text).definition.check(value, maximumSize: limits.maximumValueSize)
            }
        }
        if existing == nil || entry.value != oldValue {
            try checkGroupFits(key.group, with: [(key, entry.value)] + propagated.map { ($0.0, $0.1) })
        }
        if let creator = definition.creator, !quotas.isExempt(creator) {
            let used = usage.used(.storedBytes, by: creator), before = existing.map(Self.storedSize) ?? 0, after = Self.storedSize(of: entry)
            if after > before {
                try quotas.check(.storedBytes, uid: creator, using: used - min(before, used), adding: after, "cannot create \(key) with its value")
            }
        }
        storeChanges.saveDefinition(definition)
        if existing == nil || entry.value != oldValue {
            revision += 1
            entry.revision = revision
            if let stored = entry.storedValue, definition.persistent { storeChanges.saveValue(stored, revision: revision, for: key) }
            saveRevisionCeiling()
        }
        insert(entry)
        if entry.layers != nil { layeredKeys.insert(key) }
        let changes: [PropertyChange]
        if existing == nil {
            changes = [.created(key)]
        } else if entry.value == oldValue {
            changes = [.redefined(key)]
        } else {
            for (target, _) in propagated { noteBindingSource(of: target, among: Set(propagated.map(\.0)).union([key]).subtracting([target])) }
            changes = [.valueChanged(key, old: oldValue!)] + (try write(propagated.map { ($0.0, $0.1) }, holding: held.union([key])))
        }
        // Made secret, writers narrowed or widened: the bindings that read or write it may no
        // longer act, or may again.
        return changes + recheckBindings(affectedBy: key, holding: held)
    }

    /// Makes `value` the entry's stored value if its definition admits it, else keeps it hidden
    /// with the reason.
    func admit(_ value: DBusValue, into entry: inout Entry) {
        let definition = entry.definition
        guard value.type == definition.type else {
            entry.hidden = HiddenValue(value: value, reason: "the stored value has type '\(value.signature)' and \(definition.key) now has type '\(definition.type.signature)'")
            return
        }
        do {
            try definition.check(value, maximumSize: limits.maximumValueSize)
            entry.storedValue = value
        } catch {
            entry.hidden = HiddenValue(value: value, reason: error.message)
        }
    }

    // MARK: Model files

    /// Takes a property off the bus but keeps its stored value, unclaimed: a key its model file
    /// no longer declares. Declared again, it gets its value back; ``prune(_:)`` drops it.
    public func retire(_ key: Key) -> [PropertyChange] {
        guard let existing = entries[key], existing.definition.stateOf == nil else { return [] }
        remember(key)
        remove(key)
        dropLeases(of: existing)
        storeChanges.retireDefinition(key)
        if existing.definition.persistent, let kept = existing.storedValue ?? existing.hidden?.value {
            rememberUnclaimed(key)
            unclaimedValues[key] = (kept, existing.revision)
        }
        let ended = bindings.touching(key).map { removeBinding($0.id) }
        return [.deleted(key, old: existing.value)] + ended + recheckBindings(affectedBy: key)
    }

    /// Stored values that no definition claims, sorted by key.
    public var unclaimed: [(key: Key, value: DBusValue)] {
        unclaimedValues.map { ($0.key, $0.value.value) }.sorted { $0.key < $1.key }
    }

    /// Deletes stored values no definition claims; returns the keys whose value went.
    public func prune(_ keys: [Key]) -> [Key] {
        var pruned: [Key] = []
        for key in keys where unclaimedValues[key] != nil {
            rememberUnclaimed(key)
            unclaimedValues[key] = nil
            storeChanges.removeValue(for: key)
            pruned.append(key)
        }
        return pruned
    }

    /// Removes a property and its stored value.
    public func delete(key keyText: String) throws(PropBusError) -> [PropertyChange] {
        let key = try Key(keyText)
        guard let existing = entries[key] else { throw .unknownKey(keyText) }
        if let command = existing.definition.stateOf {
            throw PropBusError(.readOnly, "\(key) is the state of command \(command); it goes with its command: propctl delete-command \(command) (Manager.DeleteCommand)")
        }
        remember(key)
        let entry = remove(key)!
        dropLeases(of: entry)
        storeChanges.removeDefinition(key)
        // A channel cannot outlive one of its ends.
        let ended = bindings.touching(key).map { removeBinding($0.id) }
        return [.deleted(key, old: entry.value)] + ended + recheckBindings(affectedBy: key)
    }
}
