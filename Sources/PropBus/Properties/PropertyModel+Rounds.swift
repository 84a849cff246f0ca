import DBusValues

extension PropertyModel {
    // MARK: Rounds

    /// Makes room in the round's journal for `count` changes, so declaring many properties at
    /// once (a model file) does not grow it step by step.
    public func reserveJournalCapacity(_ count: Int) {
        transaction.reserveCapacity(count)
    }

    /// Makes room for `count` properties in all, so declaring many at once (a model file into
    /// an empty model) does not grow the table by doubling, copying every entry each time.
    /// Never shrinks, and reserves nothing when the model already holds that many (a reload).
    public func reserveCapacity(_ count: Int) {
        if count > entries.count { entries.reserveCapacity(count) }
    }

    /// Makes what the round did so far durable in the model: a rollback no longer takes it back
    /// (the store committed it, or the start-up keeps it). Ends any savepoint still open. The
    /// write set keeps recording: ``endWriteSet()`` forgets it.
    public func commitRound() {
        transaction.commitRound(revision: revision, reservedRevision: reservedRevision)
    }

    /// Forgets the round's write set once the store has it (or the round was rolled back).
    /// Apart from ``commitRound()``, which the start-up also calls before its write set is
    /// committed: the changes before it are still the round's, and history must see them.
    public func endWriteSet() {
        // A fresh value: a big round's rows (a model file's declarations) are let go, not kept.
        storeChanges = StoreChanges()
        closedChanges.removeAll()
        if !openVia.isEmpty { openVia.removeAll() }
        transaction.endWriteSet()
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
        let open = transaction.openChange()
        guard !open.isEmpty else { return }
        var recorded: [WriteSet.Entry] = []
        recorded.reserveCapacity(open.count)
        for (key, before) in open {
            let entry = WriteSet.Entry(key: key, before: before, after: entries[key], via: openVia[key])
            if entry.isChange { recorded.append(entry) }
        }
        if !recorded.isEmpty { closedChanges.append(WriteSet.Change(origin: openOrigin, entries: recorded)) }
        if !openVia.isEmpty { openVia.removeAll() }
        transaction.beginChange()
    }

    /// What the round did so far, change by change; the round hands it to the store's commit.
    /// Keeps recording: ``endWriteSet()`` forgets it.
    public func takeWriteSet() -> WriteSet {
        closeChange()
        return WriteSet(changes: closedChanges, revision: revision, store: storeChanges)
    }

    /// Puts everything back as it was at the last ``commitRound()`` and forgets the round's
    /// write set; returns the keys that were touched since, so the caller can bring its
    /// exported objects back in line.
    @discardableResult
    public func rollbackRound() -> [Key] {
        var touched: [Key] = []
        let restored = transaction.rollback(toDepth: 0) { record in
            if case .entry(let key, _, _) = record { touched.append(key) }
            put(back: record)
        }
        putBack(restored)
        revision = restored.revision
        reservedRevision = restored.reservedRevision
        commitRound()
        endWriteSet()
        // Each key once, first touched first, as the journal had them.
        var seen = Set<Key>()
        return touched.reversed().filter { seen.insert($0).inserted }
    }

    /// Puts one before-image back.
    private func put(back record: Transaction.Record) {
        switch record {
        case .entry(let key, let old, _):
            if let old { insert(old) } else { remove(key) }
        case .unclaimed(let key, let stored, _):
            unclaimedValues[key] = stored
        }
    }

    /// Puts back the tables a rollback restores as a whole.
    private func putBack(_ restored: Transaction.Restored) {
        if let bindings = restored.bindings { self.bindings = bindings }
        if let leases = restored.leases { self.leases = leases }
        if let layerState = restored.layerState {
            (layerFiles, layerProblems) = (layerState.files, layerState.problems)
            // Kept too: a key created in the round and gone again is only looked at once more.
            layeredKeys.formUnion(layerState.keys)
        }
    }

    /// The keys whose entries changed since the last ``commitRound()`` (``Round/writtenKeys``).
    public var keysChangedThisRound: Set<Key> { transaction.keysChanged }

    /// The keys whose values bindings read since the round, or the innermost savepoint, began
    /// (``Round/readKeys``).
    public var keysReadThisRound: Set<Key> { transaction.reads }

    /// Journals `key`'s state before its first change in the innermost level and the open change.
    func remember(_ key: Key) {
        transaction.journalEntry(key) { entries[key] }
    }

    func rememberUnclaimed(_ key: Key) {
        transaction.journalUnclaimed(key) { unclaimedValues[key] }
    }

    /// Keeps the bindings as they are, before the innermost level's first change of them.
    func rememberBindings() {
        transaction.journalBindings(bindings)
    }

    /// Keeps the leases as they are, before the innermost level's first change of them.
    func rememberLeases() {
        transaction.journalLeases(leases)
    }

    /// Keeps the layer state as it is, before the innermost level's first change of it.
    func rememberLayerState() {
        transaction.journalLayerState((layerFiles, layerProblems, layeredKeys))
    }

    // MARK: Savepoints

    /// Begins a savepoint inside the round (or inside the savepoint open now): ``rollback(to:)``
    /// takes back what follows and leaves what came before; ``release(_:)`` keeps it in the
    /// level around. Bindings' reads from now on are the savepoint's (``changes(since:)``).
    public func savepoint() -> Transaction.Savepoint {
        transaction.begin { level in
            level.revision = revision
            level.reservedRevision = reservedRevision
            level.storeChanges = storeChanges
            level.closedChanges = closedChanges.count
            level.origin = openOrigin
        }
    }

    /// What was changed since `savepoint`: each entry touched with its state then (`nil`: it
    /// did not exist), and the keys bindings read since.
    public func changes(since savepoint: Transaction.Savepoint) -> (before: [Key: Entry?], read: Set<Key>) {
        transaction.changes(since: savepoint)
    }

    /// Ends `savepoint` (and any taken after it), keeping its changes in the round.
    public func release(_ savepoint: Transaction.Savepoint) {
        transaction.release(savepoint)
    }

    /// Takes back what was changed since `savepoint` (the round's earlier changes stay), with
    /// the rows it recorded for the store, and ends it. A savepoint that ended already is ignored.
    public func rollback(to savepoint: Transaction.Savepoint) {
        guard transaction.isOpen(savepoint) else { return }
        let viaToForget = !openVia.isEmpty
        let restored = transaction.rollback(toDepth: savepoint.depth) { record in
            if viaToForget, case .entry(let key, _, _) = record { openVia[key] = nil }
            put(back: record)
        }
        putBack(restored)
        revision = restored.revision
        if var rows = restored.storeChanges {
            // A block of revisions reserved since stays reserved (the model keeps its ceiling):
            // the store must record it before a revision of it is handed out again.
            if reservedRevision > restored.reservedRevision { rows.reserveRevisions(through: reservedRevision) }
            storeChanges = rows
        }
        // A change that closed since goes too; the one open then is open again.
        if closedChanges.count > restored.closedChanges {
            closedChanges.removeSubrange(restored.closedChanges...)
            openOrigin = restored.origin
        }
    }
}
