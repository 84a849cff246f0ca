import DBusValues

extension PropertyModel {
    // MARK: Bindings

    /// Makes `key` follow `to` (docs/channels.md, "The rule"). `key` takes `to`'s mapped value now, and nothing is
    /// written to `to` (for `direction=to`, the other way round: `to` takes `key`'s value).
    ///
    /// - Parameters:
    ///   - owner: the caller's unique bus name; a non-persistent binding ends with it.
    ///   - principal: the caller's uid, whose rights and quota the binding acts with (`nil`:
    ///     the daemon's own, for model files).
    ///   - maximumPerOwner: the most bindings one connection may hold.
    ///   - held: keys held: the first sync writes none of them, not even through another binding
    ///     (a held target's value stands until the leading side changes), e.g. a model file's
    ///     binding must not write a key the fleet owns outside a call.
    public func bind(key keyText: String, to toText: String, options: [String: DBusValue], owner: String?,
                     principal: UInt32? = nil, maximumPerOwner: Int = .max, holding held: Set<Key> = []) throws(PropBusError) -> (binding: Binding, changes: [PropertyChange]) {
        let keyEntry = try entry(keyText)
        let toEntry = try entry(toText)
        let key = keyEntry.definition.key, to = toEntry.definition.key
        guard key != to else { throw .invalidArgs("cannot bind \(key) to itself") }
        if let reason = Self.stateDrivingFleetKey(keyEntry.definition, toEntry.definition) {
            throw .invalidArgs("cannot bind \(key) to \(to): \(reason)")
        }
        var binding = Binding(id: 0, key: key, to: to, options: try BindOptions(options: options, binding: "the binding \(key) ↔ \(to)"),
                              owner: owner, principal: principal)
        // Binding the same persistent pair again (a setup script run twice) must not stack up
        // identical bindings that outlive everyone: the existing one is the answer.
        if binding.persistent, let existing = bindings.persistentBinding(sameChannelAs: binding) {
            return (existing, [])
        }
        if let owner, bindings.count(ownedBy: owner) >= maximumPerOwner {
            throw PropBusError(.limitsExceeded, "cannot bind \(key) to \(to): this connection already holds the maximum of \(maximumPerOwner) bindings")
        }
        if let principal {
            try quotas.check(.bindings, uid: principal, using: UInt64(bindings.count(principal: principal)), "cannot bind \(key) to \(to)")
        }
        try typeCheck(binding)

        // The id counter is stored: a path is never reused, even across restarts, so a stale
        // Unbind cannot hit a newer binding.
        binding.id = bindings.makeID()
        // Before the first sync, whose propagation may record verdicts on other bindings.
        rememberBindings()
        let previous = bindings
        bindings.insert(binding)
        // The leading side's value is mapped through the new binding only; the leading side is
        // held so the initial sync never writes back to the side that wins.
        let changes: [PropertyChange]
        do {
            let (source, target, transform) = binding.flowsToKey ? (to, key, binding.toKey) : (key, to, binding.toTarget)
            let mapped = try propagation.map(entries[source]!.value, through: transform, into: target, binding: binding)
            let targetEntry = try writableEntry(target.text)
            try targetEntry.definition.check(mapped, maximumSize: limits.maximumValueSize)
            // Nor through another binding, from the key it writes on into a held one.
            changes = held.contains(target) ? [] : try write([(target, mapped)], holding: held.union([source]))
        } catch {
            bindings = previous
            throw error
        }
        storeChanges.saveNextBindingID(bindings.nextID)
        if binding.persistent { storeChanges.saveBinding(binding) }
        return (binding, [.bound(binding)] + changes)
    }

    /// Why a binding between `one` and `other` may not exist, if one is a command's state key and
    /// the other a fleet key. State keys change when executions start and end, outside any client
    /// call; a fleet key they drove would change on this host only and fork from the fleet.
    static func stateDrivingFleetKey(_ one: PropertyDefinition, _ other: PropertyDefinition) -> String? {
        for (state, shared) in [(one, other), (other, one)] where state.stateOf != nil && shared.scope == .fleet {
            return "\(state.key) is a command's state and changes outside any call, so it cannot drive the fleet-scoped key \(shared.key); bind it to a local key"
        }
        return nil
    }

    /// Ends the bindings `Bind` would refuse today because a command's state key drives a fleet
    /// key through them (see ``bind(key:to:options:owner:principal:maximumPerOwner:holding:)``): a store written
    /// before that rule may hold some, and a local key becomes a fleet key when the fleet defines
    /// one of its name. Call once the commands and model files are loaded (the state keys exist),
    /// and after fleet definitions arrive; returns each binding ended, with why, for the log, and
    /// the changes to publish.
    public func unbindStateDrivingFleetKeys() -> (ended: [(binding: Binding, reason: String)], changes: [PropertyChange]) {
        var ended: [(binding: Binding, reason: String)] = []
        var changes: [PropertyChange] = []
        for binding in bindings.all {
            guard let one = entries[binding.key]?.definition, let other = entries[binding.to]?.definition,
                  let reason = Self.stateDrivingFleetKey(one, other) else { continue }
            changes.append(removeBinding(binding.id))
            ended.append((binding, reason))
        }
        return (ended, changes)
    }

    /// Applies the bind-time rule again to every binding (the leading side wins), e.g. at
    /// startup, when a transient side came back with its default. A binding whose sync fails
    /// is left as it is; its error is returned with it.
    ///
    /// A binding that would write a `held` key is left alone, and no sync spreads into one: the
    /// keys another owns (with `--fleet`, the fleet keys bound here: such a write must go to etcd
    /// first, and at startup there is no call to carry it; their value stands until the
    /// binding's leading side changes in a call).
    public func resynchronizeBindings(holding held: Set<Key> = []) -> (changes: [PropertyChange], failures: [(Binding, PropBusError)]) {
        var changes: [PropertyChange] = []
        var failures: [(Binding, PropBusError)] = []
        for binding in bindings.all {
            // A stored binding acts with its principal's rights of today, not those it was made with.
            guard noteVerdict(binding, denial: denial(of: binding)) else { continue }
            if !held.isEmpty, held.contains(binding.flowsToKey ? binding.key : binding.to) { continue }
            do {
                changes += try synchronize(binding, holding: held)
            } catch {
                failures.append((binding, error))
            }
        }
        return (changes, failures)
    }

    /// The bind-time rule for one binding: the leading side's value, mapped, goes to the
    /// following side (never back), and on through other bindings except into `held` keys.
    private func synchronize(_ binding: Binding, holding held: Set<Key>) throws(PropBusError) -> [PropertyChange] {
        let (source, target, transform) = binding.flowsToKey ? (binding.to, binding.key, binding.toKey) : (binding.key, binding.to, binding.toTarget)
        guard let sourceValue = entries[source]?.value, let targetEntry = entries[target] else { return [] }
        let mapped = try propagation.map(sourceValue, through: transform, into: target, binding: binding)
        guard mapped != targetEntry.value else { return [] }
        try targetEntry.definition.check(mapped, maximumSize: limits.maximumValueSize)
        return try write([(target, mapped)], holding: held.union([source]))
    }

    // MARK: Binding rights

    /// Why `binding` may not act now with its principal's rights: the first key it writes that
    /// the principal may not write, or reads (its leading side, the keys its transforms name)
    /// that the principal may not read. `nil` when it may, and always for the daemon's own
    /// bindings (no principal) or without a ``bindingAuthority``. A key that does not exist
    /// denies nothing: it is checked when it comes.
    ///
    /// - Parameter definition: stands for its key's current definition (a redefinition's).
    public func denial(of binding: Binding, overriding definition: PropertyDefinition? = nil) -> String? {
        guard let bindingAuthority, let principal = binding.principal, !bindingAuthority.isExempt(principal) else { return nil }
        var uses: [BindingAuthority.Use] = []
        func use(_ key: Key, _ access: BindingAuthority.Access) {
            guard let current = definition?.key == key ? definition : entries[key]?.definition else { return }
            uses.append(BindingAuthority.Use(current, access))
        }
        // A writer may read what it writes: a key written needs no read check of its own.
        var written: Set<Key> = []
        if binding.flowsToKey { use(binding.key, .write); written.insert(binding.key) }
        if binding.flowsToTarget { use(binding.to, .write); written.insert(binding.to) }
        for key in [binding.to, binding.key] + bindings.referencedKeys(ofBinding: binding.id) where !written.contains(key) {
            use(key, .read)
        }
        return bindingAuthority.denial(principal, uses)
    }

    /// Records whether `binding` may act (`denial` is why not), telling ``bindingStateHandler``
    /// when it is suspended or resumes; returns whether it may act.
    @discardableResult
    func noteVerdict(_ binding: Binding, denial reason: String?) -> Bool {
        let before = bindings.suspension(of: binding.id)
        guard before != reason, bindings[binding.id] != nil else { return reason == nil }
        rememberBindings()
        bindings.setSuspension(reason, of: binding.id)
        if (before == nil) != (reason == nil) { bindingStateHandler?(binding, reason) }
        return reason == nil
    }

    /// Checks again the bindings that end at `key` or whose transforms read it, after its
    /// definition changed: one whose principal lost a right is suspended, and a suspended one
    /// whose rights came back resumes with the bind-time sync (the leading side wins), except
    /// into `held` keys. A sync that fails leaves the binding active and the values as they are.
    func recheckBindings(affectedBy key: Key, holding held: Set<Key> = []) -> [PropertyChange] {
        guard bindingAuthority != nil, !bindings.isEmpty else { return [] }
        var changes: [PropertyChange] = []
        for binding in bindings.affected(by: key) where binding.principal != nil {
            let wasSuspended = bindings.suspension(of: binding.id) != nil
            guard noteVerdict(binding, denial: denial(of: binding)), wasSuspended else { continue }
            if held.contains(binding.flowsToKey ? binding.key : binding.to) { continue }
            changes += (try? synchronize(binding, holding: held)) ?? []
        }
        return changes
    }

    /// Ends a binding.
    public func unbind(_ id: UInt64) throws(PropBusError) -> [PropertyChange] {
        guard bindings[id] != nil else {
            throw PropBusError(.unknownKey, "no binding \(id)")
        }
        return [removeBinding(id)]
    }

    /// Ends the non-persistent bindings a connection made; called when it leaves the bus.
    public func unbindAll(ownedBy owner: String) -> [PropertyChange] {
        bindings.all.filter { $0.owner == owner && !$0.persistent }.map { removeBinding($0.id) }
    }

    func removeBinding(_ id: UInt64) -> PropertyChange {
        rememberBindings()
        let binding = bindings.remove(id)!
        if binding.persistent { storeChanges.removeBinding(id) }
        return .unbound(binding)
    }

    /// Refuses a binding whose transforms cannot produce the other side's type.
    private func typeCheck(_ binding: Binding) throws(PropBusError) {
        let keyTypes = { [unowned self] (name: String) -> DBusType? in (try? Key(name)).flatMap { entries[$0]?.definition.type } }
        func check(_ transform: Expression?, from source: Key, to target: Key, option: String) throws(PropBusError) {
            guard let sourceType = entries[source]?.definition.type, let targetType = entries[target]?.definition.type else { return }
            let produced = try transform?.resultType(valueType: sourceType, keyType: keyTypes) ?? sourceType
            guard produced == targetType || Self.convertible(produced, to: targetType) else {
                let what = transform == nil ? "without a transform, \(source) ('\(sourceType.name)')" : "\(option) yields '\(produced.name)', which"
                throw PropBusError(.transformFailed, "cannot bind \(binding.key) to \(binding.to): \(what) cannot become \(target)'s type '\(targetType.name)'")
            }
        }
        if binding.flowsToKey { try check(binding.toKey, from: binding.to, to: binding.key, option: "to_key") }
        if binding.flowsToTarget { try check(binding.toTarget, from: binding.key, to: binding.to, option: "to_target") }
    }

    /// Whether values of `source` can convert to `target` at all (ranges are checked later).
    private static func convertible(_ source: DBusType, to target: DBusType) -> Bool {
        if target == .variant || source == .variant { return true }
        if source.isNumeric && target.isNumeric { return true }
        let textual: Set<DBusType> = [.string, .objectPath, .signature]
        return textual.contains(source) && textual.contains(target)
    }

    /// A value as given for a property of `type`: callers may pass the wire argument (a `v`)
    /// or the plain value. For a `v` property only the wire's own wrapper is removed.
    static func payload(_ value: DBusValue, for type: DBusType) -> DBusValue {
        guard type == .variant else { return value.unwrappingVariant }
        if case .variant(let inner) = value, inner.type == .variant { return inner }
        return value.type == .variant ? value : .variant(value)
    }
}
