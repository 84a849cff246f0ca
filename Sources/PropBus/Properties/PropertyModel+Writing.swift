import DBusValues

extension PropertyModel {
    // MARK: Writing

    /// Sets one value. A value equal to the current one changes nothing and returns no change.
    public func set(_ keyText: String, to value: DBusValue) throws(PropBusError) -> [PropertyChange] {
        try apply(set: [(keyText, value)], reset: [])
    }

    /// Sets one value of a parsed key, as ``set(_:to:)-(String,_)`` does: for `Properties.Set`,
    /// which has the key at hand (no text to parse again).
    public func set(_ key: Key, to value: DBusValue) throws(PropBusError) -> [PropertyChange] {
        guard let definition = definition(for: key) else { throw .unknownKey(key.text) }
        if let refusal = Self.refusalToWrite(definition) { throw refusal }
        // Locks too: the same refusals as Apply's, in the same order.
        try checkLock(entries.read(key) { $0.layers } ?? nil, keyText: key.text)
        try definition.check(value, maximumSize: limits.maximumValueSize)
        return try write([(key, value)], holding: [])
    }

    /// Why a client may not write a property with `definition`, or `nil` when it may: the
    /// `ReadOnly` error every write path answers with.
    public static func refusalToWrite(_ definition: PropertyDefinition) -> PropBusError? {
        guard !definition.writable else { return nil }
        if let command = definition.stateOf {
            return PropBusError(.readOnly, "\(definition.key) is the state of command \(command) and is read-only; bind to it with direction=from")
        }
        return PropBusError(.readOnly, "property \(definition.key) is read-only")
    }

    /// Forgets the stored value, so the property reads its default again.
    public func reset(_ keyText: String) throws(PropBusError) -> [PropertyChange] {
        try apply(set: [], reset: [keyText])
    }

    /// Sets `value` only if `key` is still at `expectedRevision`; returns the new revision.
    public func compareAndSet(_ keyText: String, expectedRevision: UInt64, to value: DBusValue) throws(PropBusError) -> (revision: UInt64, changes: [PropertyChange]) {
        let current = try entry(keyText)
        guard current.revision == expectedRevision else {
            throw PropBusError(.conflict, "property \(keyText) is at revision \(current.revision), not \(expectedRevision); read it again and retry")
        }
        let changes = try set(keyText, to: value)
        return (try entry(keyText).revision, changes)
    }

    /// Sets and resets many keys atomically: everything is validated before anything changes.
    ///
    /// Every change spreads through the bindings in the same step; if a transform or a
    /// propagated target rejects its value, the whole call fails and nothing changes.
    public func apply(set assignments: [(String, DBusValue)], reset resets: [String]) throws(PropBusError) -> [PropertyChange] {
        var planned: [(Key, DBusValue?)] = []
        for (keyText, value) in assignments {
            let entry = try writableEntry(keyText)
            try entry.definition.check(value, maximumSize: limits.maximumValueSize)
            planned.append((entry.definition.key, value))
        }
        for keyText in resets {
            planned.append((try writableEntry(keyText).definition.key, nil))
        }
        return try write(planned, holding: [])
    }

    func writableEntry(_ keyText: String) throws(PropBusError) -> Entry {
        let entry = try entry(keyText)
        if let refusal = Self.refusalToWrite(entry.definition) { throw refusal }
        try checkLock(entry.layers, keyText: keyText)
        return entry
    }

    /// Throws `Locked` when a mandatory value locks the key for the open origin's caller.
    private func checkLock(_ layers: ValueLayers?, keyText: String) throws(PropBusError) {
        guard let mandatory = layers?.mandatoryInForce, case .some(let uid) = lockSubject, lockAuthority.locks(mandatory, userID: uid) else { return }
        let who = uid.map { "uid \($0)" } ?? "the daemon's user"
        let whom = mandatory.lockedFor.map { "for " + $0.joined(separator: ", ") } ?? "for everyone but root"
        let unlock = layers?.fleetMandatory != nil ? "propctl unlock \(keyText) --fleet" : "propctl unlock \(keyText)"
        throw PropBusError(.locked, "property \(keyText) is locked by \(mandatory.value.source) (a mandatory value, \(whom)), so \(who) may not write it; the administrator unlocks it there (\(unlock))")
    }

    /// Whom the writes of the open origin are made for, as locks see it: a call's caller
    /// (`.some(nil)`: its uid is not known); `nil` for the daemon's own writes (reloads, model
    /// files, bindings acting between calls), which no lock refuses.
    private var lockSubject: UInt32?? {
        switch openOrigin {
        case .call(let caller), .revert(let caller): return .some(caller.userID)
        default: return nil
        }
    }

    /// The value `entry` would read with `stored` as its user value.
    private static func effectiveValue(of entry: Entry, stored: DBusValue?) -> DBusValue {
        guard let layers = entry.layers else { return stored ?? entry.definition.defaultValue }
        return layers.effective(stored: stored, defaultValue: entry.definition.defaultValue).value
    }

    /// Propagates validated writes (`nil`: reset) through the bindings, checks every
    /// propagated value against its target, then writes everything.
    func write(_ planned: [(Key, DBusValue?)], holding held: Set<Key>) throws(PropBusError) -> [PropertyChange] {
        var all = planned
        if !bindings.isEmpty {
            // Only a real change spreads: a same-value write is a no-op everywhere.
            let origins = planned.compactMap { key, value -> (Key, DBusValue)? in
                guard let entry = entries[key] else { return nil }
                let next = Self.effectiveValue(of: entry, stored: value)
                return next == entry.value ? nil : (key, next)
            }
            var written = Set(origins.map(\.0))
            for (target, value) in try propagation.expand(origins, holding: held) {
                let entry = try writableEntry(target.text)
                try entry.definition.check(value, maximumSize: limits.maximumValueSize)
                all.append((target, value))
                noteBindingSource(of: target, among: written)
                written.insert(target)
            }
        }
        var byGroup: [String: [(Key, DBusValue)]] = [:]
        for (key, value) in all {
            guard let entry = entries[key] else { continue }
            byGroup[key.group, default: []].append((key, Self.effectiveValue(of: entry, stored: value)))
        }
        for (group, values) in byGroup { try checkGroupFits(group, with: values) }
        try checkStoredBytes(all)
        return record(all)
    }

    /// Records for history that `target` changed through a binding from one of `written`
    /// (the keys the propagation had reached before it).
    func noteBindingSource(of target: Key, among written: Set<Key>) {
        for binding in bindings.touching(target) {
            let other = binding.key == target ? binding.to : binding.key
            if written.contains(other) {
                openVia[target] = "binding from \(other.text)"
                return
            }
        }
    }

    /// Writes checked values (`nil`: reset) into the entries and the store.
    func record(_ all: [(Key, DBusValue?)]) -> [PropertyChange] {
        var changes: [PropertyChange] = []
        for (key, newStored) in all {
            guard var entry = entries[key] else { continue }
            let old = entry.value
            if newStored == nil && entry.storedValue == nil { continue }
            if let newStored, entry.userValue == newStored { continue }
            remember(key)
            entry.storedValue = newStored
            // A new value replaces a hidden one (in the store too); a Reset leaves it be.
            if newStored != nil { entry.hidden = nil }
            if entry.definition.persistent {
                if let newStored { storeChanges.saveValue(newStored, revision: revision + 1, for: key) } else { storeChanges.removeValue(for: key) }
            }
            // Reset keeps the revision moving even when the default equals the old value, so
            // a CompareAndSet racing a Reset still sees a conflict.
            revision += 1
            entry.revision = revision
            insert(entry)
            if entry.value != old { changes.append(.valueChanged(key, old: old)) }
            if entry.definition.persistent {
                saveRevisionCeiling()
            } else {
                reserveRevision()
            }
        }
        return changes
    }

    /// With a write that commits anyway: records the reserved ceiling, renewing the block
    /// first when it is used up, so transient changes that follow need no write of their own.
    func saveRevisionCeiling() {
        if revision >= reservedRevision { reservedRevision = revision + Self.revisionBlock }
        storeChanges.saveRevision(reservedRevision)
    }

    /// Makes sure the revision just handed out is reserved in the store, reserving a new block
    /// (one small write) when it is not.
    func reserveRevision() {
        guard revision > reservedRevision else { return }
        reservedRevision = revision + Self.revisionBlock
        storeChanges.reserveRevisions(through: reservedRevision)
    }

    var propagation: Propagation { propagation() }

    /// The propagation of the current bindings; `definition` stands for its key's current one
    /// in the rights checks (a redefinition spreads with the rights it brings).
    func propagation(overriding definition: PropertyDefinition? = nil) -> Propagation {
        // Every value propagation reads (a transform's inputs, a bound key compared before it is
        // written) joins the round's read set.
        var result = Propagation(bindings: bindings, currentValue: { [unowned self] key in
                                     transaction.reads.insert(key)
                                     return entries[key]?.value
                                 },
                                 type: { [unowned self] in entries[$0]?.definition.type }, maximumSize: limits.maximumValueSize,
                                 isSecret: { [unowned self] in entries[$0]?.definition.secret == true })
        if bindingAuthority != nil {
            result.mayAct = { [unowned self] binding in noteVerdict(binding, denial: denial(of: binding, overriding: definition)) }
        }
        return result
    }
}
