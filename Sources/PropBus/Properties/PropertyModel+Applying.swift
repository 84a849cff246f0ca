import DBusValues

extension PropertyModel {
    // MARK: Results computed elsewhere

    /// Applies the after-images of a write computed before it was sent on (a call whose writes
    /// went to etcd first, taken back out of the round with ``rollback(to:)``): each key's entry
    /// takes the state `images` gives it (`nil`: removed), with a new revision, in key order,
    /// and the rows to store follow. No checks: the write was checked when it was computed.
    public func apply(after images: [Key: Entry?]) -> [PropertyChange] {
        var changes: [PropertyChange] = []
        for key in images.keys.sorted() { changes += apply(after: images[key] ?? nil, of: key) }
        return changes
    }

    private func apply(after entry: Entry?, of key: Key) -> [PropertyChange] {
        let old = entries[key]
        guard let entry else {
            guard let old else { return [] }
            remember(key)
            remove(key)
            dropLeases(of: old)
            storeChanges.removeDefinition(key)
            let ended = bindings.touching(key).map { removeBinding($0.id) }
            return [.deleted(key, old: old.value)] + ended
        }
        if old?.definition == entry.definition, old?.storedValue == entry.storedValue, old?.hidden?.value == entry.hidden?.value { return [] }
        remember(key)
        var next = entry
        if old?.definition != entry.definition { storeChanges.saveDefinition(entry.definition) }
        revision += 1
        next.revision = revision
        if entry.definition.persistent {
            if let stored = entry.storedValue { storeChanges.saveValue(stored, revision: revision, for: key) }
            else if old?.storedValue != nil { storeChanges.removeValue(for: key) }
            saveRevisionCeiling()
        } else {
            reserveRevision()
        }
        insert(next)
        let recheck = old?.definition != entry.definition ? recheckBindings(affectedBy: key) : []
        guard let old else { return [.created(key)] + recheck }
        return (old.value != next.value ? [.valueChanged(key, old: old.value)] : [.redefined(key)]) + recheck
    }

    /// Applies values written elsewhere (another host; `nil`: reset), under the open origin:
    /// each is checked against the local definition (a value it refuses is returned as a
    /// failure, not written), then they spread through the bindings except into `held` keys
    /// (those the writer's own bindings wrote already). When a local binding refuses what they
    /// spread, the values land alone: they are the truth, and the binding's refusal is a failure.
    public func apply(remote values: [(Key, DBusValue?)], holding held: Set<Key>) -> (changes: [PropertyChange], failures: [(Key, PropBusError)]) {
        var planned: [(Key, DBusValue?)] = []
        var failures: [(Key, PropBusError)] = []
        for (key, value) in values {
            guard let entry = entries[key] else { continue }
            if let value {
                do throws(PropBusError) { try entry.definition.check(value, maximumSize: limits.maximumValueSize) } catch {
                    failures.append((key, error))
                    continue
                }
            }
            planned.append((key, value))
        }
        guard let first = planned.first else { return ([], failures) }
        do throws(PropBusError) {
            return (try write(planned, holding: held), failures)
        } catch {
            failures.append((first.0, error))
            return (record(planned), failures)
        }
    }
}
