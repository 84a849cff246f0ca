import DBusValues

extension PropertyModel {
    // MARK: Overrides and ephemeral keys

    /// Puts `value` over `key`'s user value while the lease holds (docs/layers.md, "Overrides"):
    /// the latest override wins, and ending one falls back to the one below it, or the user's
    /// value, which no override writes. Checked as a Set is (the key writable, the value's
    /// type, range, choices, size) and charged to the holder's uid (``Quota/overrides``).
    ///
    /// - Parameters:
    ///   - now: nanoseconds since the epoch (UTC), for `since`.
    ///   - expires: when it ends by itself (a TTL, kept across restarts); `nil`: with the
    ///     holder's connection.
    public func override(_ keyText: String, with value: DBusValue, holder: LeaseHolder, now: UInt64,
                         expires: UInt64?) throws(PropBusError) -> (handle: UInt64, changes: [PropertyChange]) {
        var entry = try writableEntry(keyText)
        let key = entry.definition.key
        try entry.definition.check(value, maximumSize: limits.maximumValueSize)
        try quotas.check(.overrides, uid: holder.userID, using: holder.userID.map { leases.usage.used(.overrides, by: $0) } ?? 0, "cannot override \(key)")
        let old = entry.value
        var layers = entry.layers ?? ValueLayers()
        let hold = OverrideHold(handle: leases.nextHandle, value: value, holder: holder.busName, since: now, expires: expires,
                                userID: holder.userID, processID: holder.processID, command: holder.command)
        layers.overrides.append(hold)
        entry.layers = layers
        // Checked before anything changes: what the new value spreads to, and the group's size.
        let (held, propagated) = try plannedSpread(of: entry, from: old)
        if entry.value != old { try checkGroupFits(key.group, with: [(key, entry.value)]) }
        // Takes the handle: the table's next one is above it from now on.
        changeLeases { $0.addOverride(hold, on: key) }
        // Handles never repeat, also across restarts (a stale ReleaseOverride must not end another).
        storeChanges.saveNextLeaseHandle(leases.nextHandle)
        if expires != nil { storeChanges.saveLease(Lease(hold, on: key)) }
        return (hold.handle, replaceLayers(of: entry, from: old, holding: held, propagated: propagated))
    }

    /// The key and the hold of override `handle`, if it is held.
    public func override(_ handle: UInt64) -> (key: Key, hold: OverrideHold)? {
        guard let key = leases.overrideKeys[handle], let hold = entries[key]?.layers?.overrides.first(where: { $0.handle == handle }) else { return nil }
        return (key, hold)
    }

    /// Ends override `handle` (`ReleaseOverride`).
    public func releaseOverride(_ handle: UInt64) throws(PropBusError) -> [PropertyChange] {
        guard override(handle) != nil else {
            throw PropBusError(.unknownKey, "no override \(handle) is held (it ended, or was never made)")
        }
        return endOverride(handle)
    }

    /// Makes `key` (just created) ephemeral: deleted, with the signals a Delete sends, when its
    /// holder's connection leaves the bus (`expires` `nil`) or at `expires`.
    public func addLifetime(to key: Key, holder: LeaseHolder, now: UInt64, expires: UInt64?) {
        let lease = Lease(handle: leases.nextHandle, key: key, subject: .key, holder: holder, since: now, expires: expires)
        if let old = leases.keyLeases[key] { storeChanges.removeLease(old.handle) }
        changeLeases { $0.addKeyLease(lease) }
        storeChanges.saveNextLeaseHandle(leases.nextHandle)
        // Kept with a connection lifetime too: after a restart its creator's connection is gone.
        storeChanges.saveLease(lease)
    }

    /// Ends every lease `busName` holds without a TTL: its overrides end, its ephemeral keys go.
    public func endLeases(heldBy busName: String) -> [PropertyChange] {
        guard !leases.isEmpty else { return [] }
        var changes: [PropertyChange] = []
        let overrides = leases.overrideKeys.keys.sorted().compactMap { override($0) }
        for (_, hold) in overrides where hold.holder == busName && hold.expires == nil {
            changes += ending(.overrideEnded(handle: hold.handle, .holderLeft(busName))) { endOverride(hold.handle) }
        }
        for lease in leases.keyLeases.values.sorted(by: { $0.handle < $1.handle }) where lease.holder.busName == busName && lease.expires == nil {
            changes += ending(.lifetimeEnded(handle: lease.handle, .holderLeft(busName))) { endKeyLease(lease) }
        }
        return changes
    }

    /// Ends the TTL leases whose end is `now` or past, earliest first.
    public func endExpiredLeases(now: UInt64) -> [PropertyChange] {
        var changes: [PropertyChange] = []
        for handle in leases.expired(by: now) {
            if override(handle) != nil {
                changes += ending(.overrideEnded(handle: handle, .expired)) { endOverride(handle) }
            } else if let lease = leases.keyLeases.values.first(where: { $0.handle == handle }) {
                changes += ending(.lifetimeEnded(handle: handle, .expired)) { endKeyLease(lease) }
            }
        }
        return changes
    }

    /// Takes the leases the store held: overrides onto their keys (model files have declared
    /// theirs by now), ephemeral keys into the table; a lease whose key is gone is forgotten.
    /// Announces nothing: call before the name is owned.
    public func adoptLoadedLeases() {
        for lease in loadedLeases.sorted(by: { $0.handle < $1.handle }) {
            guard var entry = entries[lease.key] else {
                storeChanges.removeLease(lease.handle)
                continue
            }
            if let hold = lease.hold {
                // A definition changed meanwhile (a model file) may no longer admit the value.
                guard (try? entry.definition.check(hold.value, maximumSize: limits.maximumValueSize)) != nil else {
                    storeChanges.removeLease(lease.handle)
                    continue
                }
                var layers = entry.layers ?? ValueLayers()
                layers.overrides.append(hold)
                entry.layers = layers
                insert(entry)
                leases.addOverride(hold, on: lease.key)
            } else {
                leases.addKeyLease(lease)
                if lease.expires == nil { leasesOfPreviousRun.insert(lease.handle) }
            }
        }
        loadedLeases = []
    }

    /// Deletes the ephemeral keys whose creator's connection was to the daemon before this
    /// start; call once the name is owned, so their deletion is announced.
    public func endLeasesOfPreviousRun() -> [PropertyChange] {
        var changes: [PropertyChange] = []
        for lease in leases.keyLeases.values.sorted(by: { $0.handle < $1.handle }) where leasesOfPreviousRun.contains(lease.handle) {
            changes += ending(.lifetimeEnded(handle: lease.handle, .restarted)) { endKeyLease(lease) }
        }
        leasesOfPreviousRun = []
        return changes
    }

    /// Runs `body` as a change of its own with `origin` (history), then goes back to the origin before.
    private func ending(_ origin: WriteSet.Origin, _ body: () -> [PropertyChange]) -> [PropertyChange] {
        let before = self.origin
        self.origin = origin
        defer { self.origin = before }
        return body()
    }

    private func endOverride(_ handle: UInt64) -> [PropertyChange] {
        guard let (key, hold) = override(handle), var entry = entries[key], var layers = entry.layers else { return [] }
        let old = entry.value
        layers.overrides.removeAll { $0.handle == handle }
        entry.layers = layers
        changeLeases { $0.removeOverride(hold) }
        if hold.expires != nil { storeChanges.removeLease(handle) }
        // An end cannot be refused: a binding that would refuse the value it falls back to is left as it is.
        let (held, propagated) = (try? plannedSpread(of: entry, from: old)) ?? ([], [])
        return replaceLayers(of: entry, from: old, holding: held, propagated: propagated)
    }

    private func endKeyLease(_ lease: Lease) -> [PropertyChange] {
        guard entries[lease.key] != nil, let changes = try? delete(key: lease.key.text) else {
            changeLeases { $0.removeKeyLease(of: lease.key) }
            storeChanges.removeLease(lease.handle)
            return []
        }
        return changes
    }

    /// The bindings' spread of `entry`'s new value (its layers changed; `old` was its value):
    /// checked against every target, into no fleet key (an override is this host's alone).
    private func plannedSpread(of entry: Entry, from old: DBusValue) throws(PropBusError) -> (held: Set<Key>, [(Key, DBusValue)]) {
        let key = entry.definition.key
        guard entry.value != old, !bindings.isEmpty else { return ([], []) }
        let held = boundKeys { $0.scope == .fleet }.union([key])
        let propagated = try propagation.expand([(key, entry.value)], holding: held)
        for (target, value) in propagated {
            try writableEntry(target.text).definition.check(value, maximumSize: limits.maximumValueSize)
        }
        return (held, propagated)
    }

    /// Puts `entry` (its layers changed) in the model with a new revision, and its spread.
    func replaceLayers(of entry: Entry, from old: DBusValue, holding held: Set<Key>, propagated: [(Key, DBusValue)]) -> [PropertyChange] {
        let key = entry.definition.key
        var next = entry
        remember(key)
        // A CompareAndSet racing an override sees a conflict; history gives the change an id of its own.
        revision += 1
        next.revision = revision
        insert(next)
        saveRevisionCeiling()
        guard next.value != old else { return [] }
        let spread = propagated.isEmpty ? [] : ((try? write(propagated.map { ($0.0, $0.1) }, holding: held)) ?? [])
        return [.valueChanged(key, old: old)] + spread
    }

    /// Forgets the leases of a key that goes (deleted, retired): its overrides, its lifetime.
    func dropLeases(of entry: Entry) {
        guard !leases.isEmpty else { return }
        let key = entry.definition.key
        for hold in entry.layers?.overrides ?? [] {
            changeLeases { $0.removeOverride(hold) }
            if hold.expires != nil { storeChanges.removeLease(hold.handle) }
        }
        if let lease = leases.keyLeases[key] {
            changeLeases { $0.removeKeyLease(of: key) }
            storeChanges.removeLease(lease.handle)
        }
    }

    /// Changes the lease table, journaling it first for a rollback.
    private func changeLeases(_ body: (inout LeaseTable) -> Void) {
        rememberLeases()
        body(&leases)
    }
}
