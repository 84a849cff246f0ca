import DBusValues

extension PropertyModel {
    // MARK: Rounds

    /// The undo log capacity kept from one round to the next.
    static let keptUndoCapacity = 1024

    /// Makes room in the round's undo log for `count` changes, so declaring many properties at
    /// once (a model file) does not grow it step by step.
    public func reserveUndoCapacity(_ count: Int) {
        undoLog.reserveCapacity(undoLog.count + count)
    }

    /// Makes room for `count` properties in all, so declaring many at once (a model file into
    /// an empty model) does not grow the table by doubling, copying every entry each time.
    /// Never shrinks, and reserves nothing when the model already holds that many (a reload).
    public func reserveCapacity(_ count: Int) {
        if count > entries.count { entries.reserveCapacity(count) }
    }

    /// Forgets the undo log: the store committed everything done since the last round.
    public func commitRound() {
        // A big round's capacity (a model file of 10k keys) is let go: kept, it held megabytes
        // of empty buckets for the daemon's life.
        if undoLog.capacity > Self.keptUndoCapacity { undoLog = [:] } else { undoLog.removeAll(keepingCapacity: true) }
        undoUnclaimed.removeAll(keepingCapacity: true)
        revisionAtCommit = revision
        reservedAtCommit = reservedRevision
        bindingsAtCommit = nil
        leasesAtCommit = nil
        layerStateAtCommit = nil
        keysReadThisRound.removeAll(keepingCapacity: true)
    }

    /// Forgets the round's write set once the store has it (or the round was rolled back).
    /// Apart from ``commitRound()``, which a model-file load also calls to begin its own undo
    /// log: the changes before it are still the round's, and history must see them.
    public func endWriteSet() {
        // A fresh value: a big round's rows (a model file's declarations) are let go, not kept.
        storeChanges = StoreChanges()
        closedChanges.removeAll()
        openBefore.removeAll(keepingCapacity: true)
        if !openVia.isEmpty { openVia.removeAll() }
        openKeys.removeAll(keepingCapacity: true)
        openKeysAtCall = 0
        // What follows the round until someone says otherwise is the daemon's own doing.
        openOrigin = .daemon
    }

    // MARK: Write sets

    /// Where the changes made from now on come from (a call, a model file, …): setting it ends
    /// the change recorded so far in the round's ``WriteSet`` and begins another. Reset to
    /// ``WriteSet/Origin/daemon`` by every commit (``WriteSet/Origin/startup`` until the first).
    public var origin: WriteSet.Origin {
        get { openOrigin }
        set {
            closeChange()
            openOrigin = newValue
        }
    }

    private func closeChange() {
        guard !openKeys.isEmpty else { return }
        let recorded = openKeys.compactMap { key -> WriteSet.Entry? in
            let entry = WriteSet.Entry(key: key, before: openBefore[key] ?? nil, after: entries[key], via: openVia[key])
            return entry.isChange ? entry : nil
        }
        if !recorded.isEmpty { closedChanges.append(WriteSet.Change(origin: openOrigin, entries: recorded)) }
        openBefore.removeAll(keepingCapacity: true)
        if !openVia.isEmpty { openVia.removeAll() }
        openKeys.removeAll(keepingCapacity: true)
        openKeysAtCall = 0
    }

    /// What the round did so far, change by change; the round hands it to the store's commit.
    /// Keeps recording: ``endWriteSet()`` forgets it.
    public func takeWriteSet() -> WriteSet {
        closeChange()
        return WriteSet(changes: closedChanges, revision: revision, store: storeChanges)
    }

    /// Puts every entry back as it was at the last ``commitRound()``; returns the keys that
    /// were touched since, so the caller can bring its exported objects back in line.
    @discardableResult
    public func rollbackRound() -> [Key] {
        let touched = Array(undoLog.keys)
        for (key, old) in undoLog {
            if let old {
                insert(old)
            } else {
                remove(key)
            }
        }
        for (key, stored) in undoUnclaimed { unclaimedValues[key] = stored }
        if let bindingsAtCommit { bindings = bindingsAtCommit }
        if let leasesAtCommit { leases = leasesAtCommit }
        if let layerStateAtCommit {
            (layerFiles, layerProblems) = (layerStateAtCommit.files, layerStateAtCommit.problems)
            // Kept too: a key created in the round and gone again is only looked at once more.
            layeredKeys.formUnion(layerStateAtCommit.keys)
        }
        revision = revisionAtCommit
        reservedRevision = reservedAtCommit
        commitRound()
        endWriteSet()
        return touched
    }

    func rememberUnclaimed(_ key: Key) {
        if undoUnclaimed.index(forKey: key) == nil { undoUnclaimed.updateValue(unclaimedValues[key], forKey: key) }
        if callLog != nil, callUnclaimed.index(forKey: key) == nil { callUnclaimed.updateValue(unclaimedValues[key], forKey: key) }
    }

    /// The keys whose entries changed since the last ``commitRound()`` (``Round/writtenKeys``).
    public var keysChangedThisRound: Set<Key> { Set(undoLog.keys) }

    /// Records `key`'s state before its first change in this round (and in the open call, see
    /// ``beginCall()``).
    func remember(_ key: Key) {
        if undoLog[key] == nil { undoLog[key] = .some(entries[key]) }
        if openBefore.index(forKey: key) == nil {
            openBefore.updateValue(entries[key], forKey: key)
            openKeys.append(key)
        }
        if callLog != nil, callLog![key] == nil { callLog![key] = .some(entries[key]) }
    }

    // MARK: Calls inside a round


    /// Starts recording one call's changes (a savepoint inside the round).
    public func beginCall() {
        callLog = [:]
        callUnclaimed = [:]
        callBindings = bindings
        callLeases = leases
        callRevision = revision
        callStoreChanges = storeChanges
        callReservedRevision = reservedRevision
        callReadKeys = keysReadThisRound
        keysReadThisRound = []
        openKeysAtCall = openKeys.count
    }

    /// The call's changes so far: each touched key's entry before the call (`nil`: it did not
    /// exist), and the keys its bindings read.
    public var callChanges: (before: [Key: Entry?], read: Set<Key>) { (callLog ?? [:], keysReadThisRound) }

    /// Keeps the call's changes in the round and stops recording.
    public func endCall() {
        callLog = nil
        keysReadThisRound.formUnion(callReadKeys)
        callBindings = nil
        callLeases = nil
        callStoreChanges = nil
    }

    /// Takes the call's changes back out of the round (the round's earlier changes stay) and
    /// stops recording, with the rows the call recorded for the store.
    public func rollbackCall() {
        guard let log = callLog else { return }
        for (key, old) in log {
            if let old { insert(old) } else { remove(key) }
            // Untouched by the round before the call: the round need not undo it any more.
            if case .some(let roundOld) = undoLog[key], roundOld.map(\.definition) == old.map(\.definition),
               roundOld?.storedValue == old?.storedValue, roundOld?.revision == old?.revision, roundOld?.hidden?.value == old?.hidden?.value {
                undoLog[key] = nil
            }
        }
        for (key, stored) in callUnclaimed { unclaimedValues[key] = stored }
        // The call's changes leave the write set too (they come back with the fleet's answer).
        for key in openKeys[openKeysAtCall...] { openBefore[key] = nil }
        openKeys.removeSubrange(openKeysAtCall...)
        if let callBindings { bindings = callBindings }
        if let callLeases { leases = callLeases }
        revision = callRevision
        if var restored = callStoreChanges {
            // A block of revisions the call reserved stays reserved (the model keeps its
            // ceiling): the store must record it before a revision of it is handed out again.
            if reservedRevision > callReservedRevision { restored.reserveRevisions(through: reservedRevision) }
            storeChanges = restored
        }
        keysReadThisRound = callReadKeys
        callLog = nil
        callBindings = nil
        callLeases = nil
        callStoreChanges = nil
    }

    /// Puts `key`'s entry in the state `entry` (`nil`: removed) as a call computed it before its
    /// writes went to etcd, with a new revision; writes the store. No checks: the call checked.
    public func overwrite(_ key: Key, with entry: Entry?) -> [PropertyChange] {
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

    /// Applies values that came from the fleet (`nil`: reset): checked against the local
    /// definition (a value it refuses is returned as a failure, not written), then spread
    /// through the bindings except into `frozen` keys (fleet keys: fleet↔fleet bindings ran on
    /// the writing host already).
    public func mirror(_ writes: [(Key, DBusValue?)], frozen: Set<Key>) -> (changes: [PropertyChange], failures: [(Key, PropBusError)]) {
        var planned: [(Key, DBusValue?)] = []
        var failures: [(Key, PropBusError)] = []
        for (key, value) in writes {
            guard let entry = entries[key] else { continue }
            if let value {
                do throws(PropBusError) { try entry.definition.check(value, maximumSize: limits.maximumValueSize) } catch {
                    failures.append((key, error))
                    continue
                }
            }
            planned.append((key, value))
        }
        do throws(PropBusError) {
            return (try write(planned, frozen: frozen), failures)
        } catch {
            // A local binding refused the value: the fleet's value is the truth, it lands alone.
            failures.append((planned.first?.0 ?? Key(uncheckedGroup: "fleet", name: "value"), error))
            return (record(planned), failures)
        }
    }
}
