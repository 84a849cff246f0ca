import DBusValues

/// The round's one journal over the model (``PropertyModel``), with nested savepoints: SQLite's
/// idea, where a transaction is rolled back by putting back the before-images it journaled.
///
/// The round is the outer level; a savepoint (``PropertyModel/savepoint()``: a call the fleet
/// must send to etcd first, a model file of a reload) is a level inside it, and levels nest.
/// A level journals each key's entry (and unclaimed value) before its first change in that
/// level, and keeps what is put back as a whole (the revision, the rows to store, the keys
/// read) as it was when the level began, and the tables it changed (bindings, leases, the layer
/// files in force) as they were before its first change of them. Rolling back to a savepoint
/// walks the journal back to where it began; releasing one hands its records to the level
/// around it, whose rollback then takes them back too.
///
/// The journal is also the round's write set: the open change's keys are the journal's records
/// since the change began, in the order first touched, with their state before it.
///
/// Plain data, confined with the model to the owner's queue.
public struct Transaction {
    /// A point inside the round, to go back to (``PropertyModel/rollback(to:)``) or to keep
    /// (``PropertyModel/release(_:)``). Either ends it and the savepoints taken after it.
    public struct Savepoint: Sendable, Hashable {
        /// Its level: 1 for the first savepoint inside the round.
        let depth: Int
        /// Which savepoint of that depth it is: one that ended is recognised and ignored.
        let serial: UInt64
    }

    typealias Unclaimed = (value: DBusValue, revision: UInt64)
    typealias LayerState = (files: LayerFileSet, problems: [LayerProblem], keys: Set<Key>)

    /// A before-image, with the index of the same key's record before it (-1: none), so that
    /// truncating the journal finds each key's earlier record again without a scan.
    enum Record {
        case entry(Key, PropertyModel.Entry?, previous: Int)
        case unclaimed(Key, Unclaimed?, previous: Int)
    }

    /// What one level puts back as a whole.
    struct Level {
        var serial: UInt64
        /// The journal's length when the level began: its records are those from here on.
        var journalStart: Int
        var revision: UInt64
        var reservedRevision: UInt64
        /// The rows to store when the level began; `nil` for the round, whose rollback writes nothing.
        var storeChanges: StoreChanges?
        /// The keys read before the level began (reads inside it start empty, for the fleet's compares).
        var reads: Set<Key>
        /// The open change when the level began: where it began in the journal, how many changes
        /// had closed, and its origin (a change closed inside the level goes with it).
        var changeStart: Int
        var closedChanges: Int
        var origin: WriteSet.Origin
        /// The tables before the level's first change of them (`nil`: it has not changed them).
        var bindings: BindingTable?
        var leases: LeaseTable?
        var layerState: LayerState?
    }

    /// What a rollback puts back as a whole: the level rolled back to, with each table as it was
    /// before the first change of it by that level or one inside it.
    typealias Restored = Level

    private(set) var journal: [Record] = []
    /// Each key's latest entry record, and unclaimed record.
    private var latestEntry: [Key: Int] = [:]
    private var latestUnclaimed: [Key: Int] = [:]
    /// The round (first) and the savepoints inside it, innermost last.
    private(set) var levels: [Level]
    /// The keys bindings read since the innermost level began.
    var reads: Set<Key> = []
    /// Where the open change began in the journal (``WriteSet/Change``).
    private(set) var changeStart = 0
    private var nextSerial: UInt64 = 1

    /// The journal capacity kept from one round to the next: a big round's (a model file of 10k
    /// keys) is let go, or it held megabytes of empty buckets for the daemon's life.
    static let keptCapacity = 1024

    init(revision: UInt64, reservedRevision: UInt64) {
        levels = [Level(serial: 0, journalStart: 0, revision: revision, reservedRevision: reservedRevision, storeChanges: nil,
                        reads: [], changeStart: 0, closedChanges: 0, origin: .startup)]
    }

    /// Whether the entry of `key` is journaled already in the innermost level and the open change.
    private func hasEntryRecord(_ key: Key) -> Bool {
        guard let index = latestEntry[key] else { return false }
        return index >= changeStart && index >= levels[levels.count - 1].journalStart
    }

    /// Journals `key`'s entry as `before()` gives it, unless the innermost level and the open
    /// change hold it already (first touch wins). `before` is asked only when it is journaled.
    mutating func journalEntry(_ key: Key, before: () -> PropertyModel.Entry?) {
        guard !hasEntryRecord(key) else { return }
        let previous = latestEntry.updateValue(journal.count, forKey: key) ?? -1
        journal.append(.entry(key, before(), previous: previous))
    }

    /// Journals `key`'s unclaimed value, unless the innermost level holds it already.
    mutating func journalUnclaimed(_ key: Key, before: () -> Unclaimed?) {
        if let index = latestUnclaimed[key], index >= levels[levels.count - 1].journalStart { return }
        let previous = latestUnclaimed.updateValue(journal.count, forKey: key) ?? -1
        journal.append(.unclaimed(key, before(), previous: previous))
    }

    /// Keeps the tables as they are now, before the innermost level's first change of each.
    mutating func journalBindings(_ bindings: BindingTable) {
        if levels[levels.count - 1].bindings == nil { levels[levels.count - 1].bindings = bindings }
    }

    mutating func journalLeases(_ leases: LeaseTable) {
        if levels[levels.count - 1].leases == nil { levels[levels.count - 1].leases = leases }
    }

    mutating func journalLayerState(_ state: @autoclosure () -> LayerState) {
        if levels[levels.count - 1].layerState == nil { levels[levels.count - 1].layerState = state() }
    }

    /// The keys whose entries the round changed since it began (not counting what a
    /// ``commitRound(revision:reservedRevision:)`` in the middle made durable).
    var keysChanged: Set<Key> {
        let start = levels[0].journalStart
        var keys = Set<Key>(minimumCapacity: latestEntry.count)
        for (key, index) in latestEntry where index >= start { keys.insert(key) }
        return keys
    }

    // MARK: Savepoints

    /// Begins a level inside the innermost one; `level` holds the state to put back.
    mutating func begin(_ level: (inout Level) -> Void) -> Savepoint {
        var next = Level(serial: nextSerial, journalStart: journal.count, revision: 0, reservedRevision: 0, storeChanges: nil,
                         reads: reads, changeStart: changeStart, closedChanges: 0, origin: .startup)
        nextSerial += 1
        level(&next)
        levels.append(next)
        reads = []
        return Savepoint(depth: levels.count - 1, serial: next.serial)
    }

    /// Whether `savepoint` is still open.
    func isOpen(_ savepoint: Savepoint) -> Bool {
        savepoint.depth > 0 && savepoint.depth < levels.count && levels[savepoint.depth].serial == savepoint.serial
    }

    /// Ends `savepoint` and those after it, keeping their changes in the level around it.
    mutating func release(_ savepoint: Savepoint) {
        guard isOpen(savepoint) else { return }
        while levels.count > savepoint.depth {
            let inner = levels.removeLast()
            let last = levels.count - 1
            reads.formUnion(inner.reads)
            if levels[last].bindings == nil { levels[last].bindings = inner.bindings }
            if levels[last].leases == nil { levels[last].leases = inner.leases }
            if levels[last].layerState == nil { levels[last].layerState = inner.layerState }
        }
    }

    /// Takes back everything since level `depth` began (0: the round, since its last commit):
    /// hands each before-image to `restore`, latest first, so that a key's oldest image is put
    /// back last; ends the levels inside it (and it, unless it is the round). Returns the level
    /// with the tables to put back.
    mutating func rollback(toDepth depth: Int, restore: (Record) -> Void) -> Restored {
        var restored = levels[depth]
        // The oldest snapshot of each table, among the levels rolled back.
        for level in levels[(depth + 1)...].reversed() {
            restored.bindings = level.bindings ?? restored.bindings
            restored.leases = level.leases ?? restored.leases
            restored.layerState = level.layerState ?? restored.layerState
        }
        if let bindings = levels[depth].bindings { restored.bindings = bindings }
        if let leases = levels[depth].leases { restored.leases = leases }
        if let layerState = levels[depth].layerState { restored.layerState = layerState }
        let start = restored.journalStart
        for index in stride(from: journal.count - 1, through: start, by: -1) {
            let record = journal[index]
            switch record {
            case .entry(let key, _, let previous):
                if previous >= 0 { latestEntry[key] = previous } else { latestEntry[key] = nil }
            case .unclaimed(let key, _, let previous):
                if previous >= 0 { latestUnclaimed[key] = previous } else { latestUnclaimed[key] = nil }
            }
            restore(record)
        }
        journal.removeSubrange(start...)
        reads = restored.reads
        if depth == 0 {
            levels.removeSubrange(1...)
            levels[0].bindings = nil
            levels[0].leases = nil
            levels[0].layerState = nil
        } else {
            levels.removeSubrange(depth...)
            changeStart = min(changeStart, restored.changeStart)
        }
        return restored
    }

    /// The entries first journaled since `savepoint` began, with their state then, and the
    /// keys read since.
    func changes(since savepoint: Savepoint) -> (before: [Key: PropertyModel.Entry?], read: Set<Key>) {
        guard isOpen(savepoint) else { return ([:], []) }
        let start = levels[savepoint.depth].journalStart
        var before: [Key: PropertyModel.Entry?] = [:]
        for record in journal[start...] {
            if case .entry(let key, let entry, let previous) = record, previous < start { before.updateValue(entry, forKey: key) }
        }
        var read = reads
        for level in levels[(savepoint.depth + 1)...] { read.formUnion(level.reads) }
        return (before, read)
    }

    // MARK: The round

    /// The round's changes so far are durable: a rollback no longer takes them back, and the
    /// round's level begins again here. The open change keeps its keys (a start-up commits the
    /// model files' declarations later, with their history).
    mutating func commitRound(revision: UInt64, reservedRevision: UInt64) {
        levels.removeSubrange(1...)
        levels[0] = Level(serial: 0, journalStart: journal.count, revision: revision, reservedRevision: reservedRevision, storeChanges: nil,
                          reads: [], changeStart: 0, closedChanges: 0, origin: .startup)
        reads.removeAll(keepingCapacity: true)
        if journal.count == changeStart { forgetJournal() }
    }

    /// Forgets the journal once the store has the round's write set.
    mutating func endWriteSet() {
        forgetJournal()
        levels[0].journalStart = 0
        changeStart = 0
    }

    private mutating func forgetJournal() {
        if journal.capacity > Self.keptCapacity {
            journal = []
            latestEntry = [:]
            latestUnclaimed = [:]
        } else {
            journal.removeAll(keepingCapacity: true)
            latestEntry.removeAll(keepingCapacity: true)
            if !latestUnclaimed.isEmpty { latestUnclaimed.removeAll() }
        }
        levels[0].journalStart = 0
        changeStart = 0
    }

    /// Makes room for `count` records, so declaring many properties at once does not grow the
    /// journal step by step.
    mutating func reserveCapacity(_ count: Int) {
        journal.reserveCapacity(journal.count + count)
        latestEntry.reserveCapacity(latestEntry.count + count)
    }

    // MARK: The open change

    /// The open change's entries, in the order first touched, with their state before it.
    func openChange() -> [(key: Key, before: PropertyModel.Entry?)] {
        var result: [(key: Key, before: PropertyModel.Entry?)] = []
        for record in journal[changeStart...] {
            if case .entry(let key, let entry, let previous) = record, previous < changeStart { result.append((key, entry)) }
        }
        return result
    }

    /// Ends the open change and begins the next one here.
    mutating func beginChange() {
        changeStart = journal.count
    }
}
