import DBusValues

/// The daemon's properties: definitions, current values and revisions.
///
/// Single owner: the service confines the model to its connection's queue, so the model itself
/// takes no locks. Mutations validate everything first and change nothing when they throw.
/// Each returns the ``PropertyChange``s it made, which the caller turns into signals.
///
/// Mutations since the last ``commitRound()`` are recorded in an undo log, so that when the
/// store cannot commit a round, ``rollbackRound()`` puts the model back as it was.
public final class PropertyModel {
    /// Limits from the daemon's options.
    public struct Limits: Sendable {
        /// The largest value, in marshalled bytes.
        public var maximumValueSize = 1 << 20
        /// The most properties in total.
        public var maximumProperties = 100_000
        /// The largest message the daemon may send (`--max-message-size`, the bus's limit): a
        /// write that would make one group's `GetAll` bigger than this is refused.
        public var maximumMessageSize = 32 << 20

        public init(maximumValueSize: Int = 1 << 20, maximumProperties: Int = 100_000, maximumMessageSize: Int = 32 << 20) {
            self.maximumValueSize = maximumValueSize
            self.maximumProperties = maximumProperties
            self.maximumMessageSize = maximumMessageSize
        }
    }

    /// One property's state.
    public struct Entry: Sendable {
        public var definition: PropertyDefinition
        /// The stored value, `nil` when the property reads its default.
        public var storedValue: DBusValue?
        /// The model revision of the last change.
        public var revision: UInt64
        /// A stored value the current definition does not admit (range, choices, type): kept in
        /// the store, unseen, until a later definition admits it again (issue 11: a
        /// redefinition never deletes data).
        public var hidden: HiddenValue? {
            get { hiddenBox?.hidden }
            set { hiddenBox = newValue.map(HiddenBox.init) }
        }
        /// Rare, so out of line: one pointer in every entry instead of a value and a string.
        private var hiddenBox: HiddenBox?
        /// What the layers above and below the user's give this key (``ValueLayers``); `nil`
        /// when none does, which is the common case.
        public var layers: ValueLayers? {
            get { layersBox?.layers }
            set { layersBox = newValue.flatMap { $0.isEmpty ? nil : LayersBox($0) } }
        }
        /// Rare, so out of line, as ``hidden``.
        private var layersBox: LayersBox?

        public init(definition: PropertyDefinition, storedValue: DBusValue?, revision: UInt64, hidden: HiddenValue? = nil) {
            self.definition = definition
            self.storedValue = storedValue
            self.revision = revision
            self.hidden = hidden
        }

        private final class HiddenBox: Sendable {
            let hidden: HiddenValue
            init(_ hidden: HiddenValue) { self.hidden = hidden }
        }

        private final class LayersBox: Sendable {
            let layers: ValueLayers
            init(_ layers: ValueLayers) { self.layers = layers }
        }

        /// The value clients see: the user's (``storedValue``) unless a layer above it holds
        /// one, else the layers below it and the definition's default.
        public var value: DBusValue {
            guard let layers = layersBox?.layers else { return storedValue ?? definition.defaultValue }
            return layers.effective(stored: storedValue, defaultValue: definition.defaultValue).value
        }

        /// Whether a layer above the user's (an override, a mandatory value) holds a value: a
        /// write of the user's value then changes nothing clients see.
        public var isShadowed: Bool {
            guard let layers = layersBox?.layers else { return false }
            return layers.mandatoryInForce != nil || !layers.overrides.isEmpty
        }

        /// The user's value, or what the key reads without one: what a write of the user's
        /// value is compared with (a Set of the value already there is a no-op).
        public var userValue: DBusValue {
            storedValue ?? layersBox?.layers.fallback(defaultValue: definition.defaultValue) ?? definition.defaultValue
        }

        /// The layer ``value`` comes from.
        public var valueLayer: ValueLayer {
            guard let layers = layersBox?.layers else { return storedValue == nil ? .default : .user }
            return layers.effective(stored: storedValue, defaultValue: definition.defaultValue).layer
        }
    }

    /// A stored value kept out of sight, and why.
    public struct HiddenValue: Sendable {
        public var value: DBusValue
        /// Why the current definition does not admit it.
        public var reason: String
    }

    public let limits: Limits
    /// The rows the round must make durable, as a value: the model, the command table and the
    /// daemon's other parts record into it instead of calling the store; ``takeWriteSet()``
    /// hands it to the store's commit with the round's changes; a rollback throws it away, and
    /// a savepoint inside the round (``beginCall()``) is a copy of it.
    public var storeChanges = StoreChanges()
    private var entries = EntryTable()
    private var groups: [String: Set<String>] = [:]
    /// ``keys(inGroup:)``, by group, built on first use and dropped when the group's names change.
    private var sortedKeys: [String: [Key]] = [:]
    /// ``allKeysSorted()``, dropped when a key comes or goes.
    private var sortedAllKeys: [Key]?
    /// An upper bound of each group's `GetAll` body (the sum of ``replyBound(name:value:)`` over
    /// its entries), kept as entries come, change and go, so that a write sizes only what it
    /// changes rather than the whole group (a 10k-property group made every write O(n)).
    private var groupBounds: [String: Int] = [:]
    /// The definition created last, whose metadata box the next one shares when equal.
    private var lastCreated: PropertyDefinition?
    /// The highest revision handed out; revisions grow across all keys.
    public private(set) var revision: UInt64 = 0
    /// Stored values whose property is not defined yet (e.g. one a model file declares after
    /// startup); a later ``create(key:type:defaultValue:options:frozen:)`` with the same type adopts it.
    private var unclaimedValues: [Key: (value: DBusValue, revision: UInt64)] = [:]
    /// Each key's entry as it was at the last commit (`nil`: it did not exist), first touch wins.
    private var undoLog: [Key: Entry?] = [:]
    /// Unclaimed values as they were at the last commit (`nil`: there was none), first touch wins.
    private var undoUnclaimed: [Key: (value: DBusValue, revision: UInt64)?] = [:]
    private var revisionAtCommit: UInt64 = 0
    /// Revisions up to here are reserved in the store: transient changes hand them out without
    /// touching the disk (issue 11: transient means memory), and a restart starts above them.
    private var reservedRevision: UInt64 = 0
    /// ``reservedRevision`` at the last commit: what the store has recorded. A rolled-back round
    /// goes back to it, so the next one reserves again rather than hand out what was never
    /// recorded.
    private var reservedAtCommit: UInt64 = 0
    /// How many revisions one reservation covers: one small write per this many transient changes.
    static let revisionBlock: UInt64 = 4096
    /// The daemon-side channels (docs/channels.md).
    public private(set) var bindings = BindingTable()
    /// The bindings as they were at the last commit, once the round changed them.
    private var bindingsAtCommit: BindingTable?
    /// The overrides' index and the ephemeral keys (``LeaseTable``); the overrides themselves
    /// are in their entries' layers.
    public private(set) var leases = LeaseTable()
    /// The leases as they were at the last commit, once the round changed them.
    private var leasesAtCommit: LeaseTable?
    /// Leases the store held, until ``adoptLoadedLeases()`` (model files declare keys after the
    /// model is loaded).
    private var loadedLeases: [Lease] = []
    /// Ephemeral keys of a connection's lifetime loaded from the store: their creator's
    /// connection was to the daemon before, and ``endLeasesOfPreviousRun()`` deletes them.
    private var leasesOfPreviousRun: Set<UInt64> = []
    /// Checks, each time a binding acts, that its principal still may read and write what it
    /// does (the daemon sets it from its access policy); `nil`: every binding may do everything.
    public var bindingAuthority: BindingAuthority?
    /// Told when a binding is suspended (with why) or resumes (`nil`), for the daemon's log.
    public var bindingStateHandler: ((Binding, String?) -> Void)?
    /// Asked before a property is created; throws when the key is taken by something that is
    /// not a property (a command's key and group hold only its state: ``CommandTable`` sets it).
    public var creationCheck: ((Key) throws(PropBusError) -> Void)?
    /// The quota of each uid (``Quota/bindings``, ``Quota/properties``, ``Quota/storedBytes``);
    /// none unless the daemon checks callers.
    public var quotas = Quotas.off
    /// Who a mandatory value's lock refuses (the daemon sets it from its accounts and bus).
    public var lockAuthority = LockAuthority.rootOnly
    /// The layer files in force (``applyLayerFiles(_:)``): keys created later take their values.
    public private(set) var layerFiles = LayerFileSet()
    /// What is wrong with the layer files in force: what could not be read, and the entries a
    /// key's definition refuses (`SkippedModelFiles`, `propctl status`).
    public private(set) var layerProblems: [LayerProblem] = []
    /// Told of a problem found when a key is created after the files were read, for the log
    /// (those of ``applyLayerFiles(_:)`` are returned by it).
    public var layerProblemHandler: ((LayerProblem) -> Void)?
    /// The keys whose entry carries (or carried) layer-file values, so a reload revisits them
    /// without a scan; a key leaves it when its entry goes.
    private var layeredKeys: Set<Key> = []
    /// The layer files in force, their problems and ``layeredKeys`` as they were at the last
    /// commit, once the round changed them: a reload whose commit the store refuses puts the
    /// files it replaced back in force, with the entries.
    private var layerStateAtCommit: (files: LayerFileSet, problems: [LayerProblem], keys: Set<Key>)?

    /// Why some of what the store holds was not loaded (an older version accepted unix fds),
    /// one line each, for the daemon's log.
    public private(set) var refusedAtLoad: [String] = []

    /// Loads what `store` holds.
    public convenience init(store: PropertyStore, limits: Limits = Limits()) throws(PropBusError) {
        self.init(store: store, loaded: try store.load(), limits: limits)
    }

    /// Takes the properties, values and bindings of `state`, which `store` loaded (the caller
    /// hands its commands to a ``CommandTable``). The model keeps no reference to the store:
    /// what it changes goes into ``storeChanges``, which the round commits.
    public init(store: PropertyStore, loaded state: StoredState, limits: Limits = Limits()) {
        self.limits = limits
        revision = state.revision
        entries.reserveCapacity(state.definitions.count)
        // Text with a NUL, which an older version took from model files, made every reply
        // carrying the definition unsendable.
        let textWithNUL = Set(state.definitions.filter(\.holdsNUL).map(\.key))
        let refusedDefinitions = Set(state.definitions.filter { $0.type.containsUnixFD || $0.defaultValue.containsUnixFD }.map(\.key))
            .union(textWithNUL)
        var fdValues = Set<Key>()
        var valueCount = 0
        state.forEachValue { key, stored in
            valueCount += 1
            // Dropped values count too: revisions never go back.
            revision = max(revision, stored.revision)
            guard stored.value.containsUnixFD else { return }
            // The stored number was the old daemon's own fd; today it names something else.
            fdValues.insert(key)
            guard !refusedDefinitions.contains(key) else { return }
            refusedAtLoad.append("the stored value of \(key) holds a unix fd ('h'), which means nothing after a restart; it reads its default")
        }
        // The loaded values are only read here: taking them as `unclaimedValues` and removing
        // each claimed one copied the whole dictionary on the first removal.
        var claimed = 0
        for (index, definition) in state.definitions.enumerated() {
            var stored = state.storedValue(ofDefinitionAt: index)
            if stored != nil { claimed += 1 }
            if refusedDefinitions.contains(definition.key) {
                if textWithNUL.contains(definition.key) {
                    refusedAtLoad.append("property \(definition.key) has a NUL character (U+0000) in its description or writers, which D-Bus strings cannot carry; it was left out, its stored value kept (declare it again)")
                } else {
                    refusedAtLoad.append("property \(definition.key) (type '\(definition.type.signature)') holds a unix fd ('h'), which cannot be stored; it was left out (CreateProperty with another type replaces it)")
                }
                continue
            }
            if stored != nil, !fdValues.isEmpty, fdValues.contains(definition.key) { stored = nil }
            var entry = Entry(definition: definition, storedValue: nil, revision: stored?.revision ?? 0)
            if let stored { admit(stored.value, into: &entry) }
            insert(entry)
        }
        // Values stored for properties not defined (yet), or whose definition was left out: a
        // later create adopts them.
        if claimed < valueCount || !refusedDefinitions.isEmpty {
            state.forEachValue { key, stored in
                if entries[key] == nil, !fdValues.contains(key) { unclaimedValues[key] = stored }
            }
        }
        reservedRevision = revision
        reservedAtCommit = revision
        for binding in state.bindings { bindings.insert(binding) }
        bindings.reserveIDs(below: state.nextBindingID)
        revisionAtCommit = revision
        loadedLeases = state.leases
        leases.reserveHandles(below: state.nextLeaseHandle)
    }

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
    private var openOrigin: WriteSet.Origin = .startup
    /// The changes of the round that ended (their after-states taken when they ended).
    private var closedChanges: [WriteSet.Change] = []
    /// The open change's keys, in the order first touched, with their state before it.
    private var openBefore: [Key: Entry?] = [:]
    private var openKeys: [Key] = []
    /// Why keys of the open change changed other than by its origin (``WriteSet/Entry/via``).
    private var openVia: [Key: String] = [:]
    /// How many of ``openKeys`` were there when the open call began (``beginCall()``).
    private var openKeysAtCall = 0

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

    private func rememberUnclaimed(_ key: Key) {
        if undoUnclaimed.index(forKey: key) == nil { undoUnclaimed.updateValue(unclaimedValues[key], forKey: key) }
        if callLog != nil, callUnclaimed.index(forKey: key) == nil { callUnclaimed.updateValue(unclaimedValues[key], forKey: key) }
    }

    /// The keys whose entries changed since the last ``commitRound()`` (``Round/writtenKeys``).
    public var keysChangedThisRound: Set<Key> { Set(undoLog.keys) }
    /// The keys whose values bindings read since the last ``commitRound()`` (``Round/readKeys``).
    public private(set) var keysReadThisRound: Set<Key> = []

    /// Records `key`'s state before its first change in this round (and in the open call, see
    /// ``beginCall()``).
    private func remember(_ key: Key) {
        if undoLog[key] == nil { undoLog[key] = .some(entries[key]) }
        if openBefore.index(forKey: key) == nil {
            openBefore.updateValue(entries[key], forKey: key)
            openKeys.append(key)
        }
        if callLog != nil, callLog![key] == nil { callLog![key] = .some(entries[key]) }
    }

    // MARK: Calls inside a round

    /// What one call changed, recorded between ``beginCall()`` and ``endCall()`` or
    /// ``rollbackCall()``: a savepoint inside the round, for the fleet, which must take a call's
    /// writes of fleet keys back out of the round and send them to etcd first.
    private var callLog: [Key: Entry?]?
    private var callUnclaimed: [Key: (value: DBusValue, revision: UInt64)?] = [:]
    private var callBindings: BindingTable?
    private var callLeases: LeaseTable?
    private var callRevision: UInt64 = 0
    private var callReadKeys: Set<Key> = []
    /// ``storeChanges`` when the call began: its rows leave with it.
    private var callStoreChanges: StoreChanges?
    /// ``reservedRevision`` when the call began.
    private var callReservedRevision: UInt64 = 0

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

    // MARK: Reading

    /// The entry for `key`, or `UnknownKey`.
    public func entry(_ key: String) throws(PropBusError) -> Entry {
        let parsed = try Key(key)
        guard let entry = entries[parsed] else { throw .unknownKey(key) }
        return entry
    }

    /// The entry for a parsed key, if registered.
    public func entry(for key: Key) -> Entry? { entries[key] }

    /// The definition of a parsed key, if registered, read in place (no entry copied).
    public func definition(for key: Key) -> PropertyDefinition? { entries.read(key) { $0.definition } }

    /// The current value of `key`.
    public func value(of key: String) throws(PropBusError) -> DBusValue { try entry(key).value }

    /// What the read paths need of `key`'s entry (Get, GetAll, GetManagedObjects): the value
    /// clients see and whether the key is secret, read in place. ``entry(for:)`` copies the
    /// whole entry, retaining every reference its definition holds, which was most of the time a
    /// GetManagedObjects of 10k properties took.
    public func readableValue(for key: Key) -> (value: DBusValue, secret: Bool)? {
        entries.read(key) { entry in (entry.value, entry.definition.secret) }
    }

    /// Every entry whose key starts with `prefix`, sorted by key.
    public func list(prefix: String = "") -> [Entry] {
        entries.values.filter { $0.definition.key.text.hasPrefix(prefix) }.sorted { $0.definition.key < $1.definition.key }
    }

    /// The keys whose definition satisfies `predicate`, sorted; copies no entry.
    public func keys(where predicate: (PropertyDefinition) -> Bool) -> [Key] {
        var keys: [Key] = []
        for entry in entries.values where predicate(entry.definition) { keys.append(entry.definition.key) }
        return keys.sorted()
    }

    /// Visits every entry whose key starts with `prefix`, in key order, where it is: nothing is
    /// copied (``list(prefix:)`` copies and sorts whole entries, most of what a 10k-property
    /// `ListProperties` cost the model). `body` must not touch the model.
    public func forEachEntry(withPrefix prefix: String, _ body: (borrowing Entry) -> Void) {
        let all = allKeysSorted()
        // Keys are ASCII: those starting with `prefix` are one run of the sorted list.
        var low = 0, high = all.count
        while low < high {
            let middle = (low + high) / 2
            if all[middle].text < prefix { low = middle + 1 } else { high = middle }
        }
        for key in all[low...] {
            guard key.text.hasPrefix(prefix) else { break }
            _ = entries.read(key, body)
        }
    }

    /// Every key, sorted; kept until a key comes or goes.
    private func allKeysSorted() -> [Key] {
        if let sortedAllKeys { return sortedAllKeys }
        let sorted = entries.keys.sorted()
        sortedAllKeys = sorted
        return sorted
    }

    /// The keys of `group` in name order; empty for an unknown group. Kept until the group's
    /// names change, so reading a group (GetAll, GetManagedObjects) sorts and builds nothing.
    public func keys(inGroup group: String) -> [Key] {
        if let cached = sortedKeys[group] { return cached }
        let keys = (groups[group] ?? []).sorted().map { Key(uncheckedGroup: group, name: $0) }
        if !keys.isEmpty { sortedKeys[group] = keys }
        return keys
    }

    /// The names in `group`, sorted; empty for an unknown group.
    public func names(inGroup group: String) -> [String] { (groups[group] ?? []).sorted() }

    /// Every group that has at least one property.
    public var groupNames: [String] { groups.keys.sorted() }

    /// How many properties exist.
    public var count: Int { entries.count }

    // MARK: Definitions

    /// Registers a property, or updates its metadata if it exists with the same type.
    ///
    /// Like `registerDefaults`, registering again keeps the stored value. A redefinition that
    /// changes the value spreads through the bindings, except into `frozen` keys (and on from
    /// them): fleet keys, when the redefinition is not a call's (a model file's, the fleet's
    /// own), since such a write would change the fleet key on this host only.
    ///
    /// `creator`, the caller's uid, is charged with a new property (``Quota/properties``) and
    /// with its stored value; a property created again keeps its first creator.
    public func create(key keyText: String, type typeText: String, defaultValue: DBusValue,
                       options: [String: DBusValue] = [:], frozen: Set<Key> = [], creator: UInt32? = nil) throws(PropBusError) -> [PropertyChange] {
        let key = try Key(keyText)
        try checkCreatable(key)
        let type: DBusType
        do { type = try DBusType(parsing: typeText) } catch {
            throw .invalidArgs("type of \(key) is not a single complete D-Bus type: \(error)")
        }
        return try create(key: key, type: type, defaultValue: defaultValue, options: options, frozen: frozen, creator: creator, keyChecked: true)
    }

    /// ``create(key:type:defaultValue:options:frozen:creator:)`` for a key and type already parsed (a model
    /// file's declarations: parsing them again was repeated work for every key).
    public func create(key: Key, type: DBusType, defaultValue: DBusValue,
                       options: [String: DBusValue] = [:], frozen: Set<Key> = []) throws(PropBusError) -> [PropertyChange] {
        try create(key: key, type: type, defaultValue: defaultValue, options: options, frozen: frozen, creator: nil, keyChecked: false)
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

    private func create(key: Key, type: DBusType, defaultValue: DBusValue, options: [String: DBusValue],
                        frozen: Set<Key>, creator: UInt32?, keyChecked: Bool) throws(PropBusError) -> [PropertyChange] {
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
            propagated = try propagation(overriding: definition).expand([(key, entry.value)], frozen: frozen)
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
            changes = [.valueChanged(key, old: oldValue!)] + (try write(propagated.map { ($0.0, $0.1) }, frozen: frozen.union([key])))
        }
        // Made secret, writers narrowed or widened: the bindings that read or write it may no
        // longer act, or may again.
        return changes + recheckBindings(affectedBy: key, sparing: frozen)
    }

    /// Makes `value` the entry's stored value if its definition admits it, else keeps it hidden
    /// with the reason.
    private func admit(_ value: DBusValue, into entry: inout Entry) {
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
        return try write([(key, value)], frozen: [])
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
        return try write(planned, frozen: [])
    }

    private func writableEntry(_ keyText: String) throws(PropBusError) -> Entry {
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
    private func write(_ planned: [(Key, DBusValue?)], frozen: Set<Key>) throws(PropBusError) -> [PropertyChange] {
        var all = planned
        if !bindings.isEmpty {
            // Only a real change spreads: a same-value write is a no-op everywhere.
            let origins = planned.compactMap { key, value -> (Key, DBusValue)? in
                guard let entry = entries[key] else { return nil }
                let next = Self.effectiveValue(of: entry, stored: value)
                return next == entry.value ? nil : (key, next)
            }
            var written = Set(origins.map(\.0))
            for (target, value) in try propagation.expand(origins, frozen: frozen) {
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
    private func noteBindingSource(of target: Key, among written: Set<Key>) {
        for binding in bindings.touching(target) {
            let other = binding.key == target ? binding.to : binding.key
            if written.contains(other) {
                openVia[target] = "binding from \(other.text)"
                return
            }
        }
    }

    /// Writes checked values (`nil`: reset) into the entries and the store.
    private func record(_ all: [(Key, DBusValue?)]) -> [PropertyChange] {
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
    private func saveRevisionCeiling() {
        if revision >= reservedRevision { reservedRevision = revision + Self.revisionBlock }
        storeChanges.saveRevision(reservedRevision)
    }

    /// Makes sure the revision just handed out is reserved in the store, reserving a new block
    /// (one small write) when it is not.
    private func reserveRevision() {
        guard revision > reservedRevision else { return }
        reservedRevision = revision + Self.revisionBlock
        storeChanges.reserveRevisions(through: reservedRevision)
    }

    private var propagation: Propagation { propagation() }

    /// The propagation of the current bindings; `definition` stands for its key's current one
    /// in the rights checks (a redefinition spreads with the rights it brings).
    private func propagation(overriding definition: PropertyDefinition? = nil) -> Propagation {
        // Every value propagation reads (a transform's inputs, a bound key compared before it is
        // written) joins the round's read set.
        var result = Propagation(bindings: bindings, currentValue: { [unowned self] key in
                                     keysReadThisRound.insert(key)
                                     return entries[key]?.value
                                 },
                                 type: { [unowned self] in entries[$0]?.definition.type }, maximumSize: limits.maximumValueSize,
                                 isSecret: { [unowned self] in entries[$0]?.definition.secret == true })
        if bindingAuthority != nil {
            result.mayAct = { [unowned self] binding in noteVerdict(binding, denial: denial(of: binding, overriding: definition)) }
        }
        return result
    }

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
        let (frozen, propagated) = try plannedSpread(of: entry, from: old)
        if entry.value != old { try checkGroupFits(key.group, with: [(key, entry.value)]) }
        // Takes the handle: the table's next one is above it from now on.
        changeLeases { $0.addOverride(hold, on: key) }
        // Handles never repeat, also across restarts (a stale ReleaseOverride must not end another).
        storeChanges.saveNextLeaseHandle(leases.nextHandle)
        if expires != nil { storeChanges.saveLease(Lease(hold, on: key)) }
        return (hold.handle, replaceLayers(of: entry, from: old, frozen: frozen, propagated: propagated))
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
        let (frozen, propagated) = (try? plannedSpread(of: entry, from: old)) ?? ([], [])
        return replaceLayers(of: entry, from: old, frozen: frozen, propagated: propagated)
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
    private func plannedSpread(of entry: Entry, from old: DBusValue) throws(PropBusError) -> (frozen: Set<Key>, [(Key, DBusValue)]) {
        let key = entry.definition.key
        guard entry.value != old, !bindings.isEmpty else { return ([], []) }
        let frozen = bindingEnds { $0.scope == .fleet }.union([key])
        let propagated = try propagation.expand([(key, entry.value)], frozen: frozen)
        for (target, value) in propagated {
            try writableEntry(target.text).definition.check(value, maximumSize: limits.maximumValueSize)
        }
        return (frozen, propagated)
    }

    /// Puts `entry` (its layers changed) in the model with a new revision, and its spread.
    private func replaceLayers(of entry: Entry, from old: DBusValue, frozen: Set<Key>, propagated: [(Key, DBusValue)]) -> [PropertyChange] {
        let key = entry.definition.key
        var next = entry
        remember(key)
        // A CompareAndSet racing an override sees a conflict; history gives the change an id of its own.
        revision += 1
        next.revision = revision
        insert(next)
        saveRevisionCeiling()
        guard next.value != old else { return [] }
        let spread = propagated.isEmpty ? [] : ((try? write(propagated.map { ($0.0, $0.1) }, frozen: frozen)) ?? [])
        return [.valueChanged(key, old: old)] + spread
    }

    /// Forgets the leases of a key that goes (deleted, retired): its overrides, its lifetime.
    private func dropLeases(of entry: Entry) {
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

    /// Changes the lease table, keeping it as it was at the last commit for a rollback.
    private func changeLeases(_ body: (inout LeaseTable) -> Void) {
        if leasesAtCommit == nil { leasesAtCommit = leases }
        body(&leases)
    }

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
        let frozen = bindings.isEmpty ? [] : bindingEnds { $0.scope == .fleet }
        openVia[key] = "command state"
        return (try? write([(key, value)], frozen: frozen)) ?? record([(key, value)])
    }

    /// The keys at either end of a binding whose definition `matches` (fleet keys, for writes
    /// made outside any call, which must not spread into them).
    private func bindingEnds(where matches: (PropertyDefinition) -> Bool) -> Set<Key> {
        var ends: Set<Key> = []
        for binding in bindings.all {
            for end in [binding.key, binding.to] where entries[end].map({ matches($0.definition) }) == true { ends.insert(end) }
        }
        return ends
    }

    // MARK: Bindings

    /// Makes `key` follow `to` (docs/channels.md, "The rule"). `key` takes `to`'s mapped value now, and nothing is
    /// written to `to` (for `direction=to`, the other way round: `to` takes `key`'s value).
    ///
    /// - Parameters:
    ///   - owner: the caller's unique bus name; a non-persistent binding ends with it.
    ///   - principal: the caller's uid, whose rights and quota the binding acts with (`nil`:
    ///     the daemon's own, for model files).
    ///   - maximumPerOwner: the most bindings one connection may hold.
    ///   - sparing: a target whose first sync is skipped (its value stands until the leading side
    ///     changes): a model file's binding must not write a fleet key outside a call.
    public func bind(key keyText: String, to toText: String, options: [String: DBusValue], owner: String?,
                     principal: UInt32? = nil, maximumPerOwner: Int = .max, sparing: ((PropertyDefinition) -> Bool)? = nil) throws(PropBusError) -> (binding: Binding, changes: [PropertyChange]) {
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
        let previous = bindings
        // Before the first sync, whose propagation may record verdicts on other bindings.
        let snapshotTaken = bindingsAtCommit == nil
        if snapshotTaken { bindingsAtCommit = previous }
        bindings.insert(binding)
        // The leading side's value is mapped through the new binding only; the other side is
        // frozen so the initial sync never writes back to the side that wins.
        let changes: [PropertyChange]
        do {
            let (source, target, transform) = binding.flowsToKey ? (to, key, binding.toKey) : (key, to, binding.toTarget)
            let mapped = try propagation.map(entries[source]!.value, through: transform, into: target, binding: binding)
            let targetEntry = try writableEntry(target.text)
            try targetEntry.definition.check(mapped, maximumSize: limits.maximumValueSize)
            // Nor through another binding, from the key it writes on into a spared one.
            let spared = sparing.map { bindingEnds(where: $0) } ?? []
            changes = sparing?(targetEntry.definition) == true ? [] : try write([(target, mapped)], frozen: spared.union([source]))
        } catch {
            bindings = previous
            if snapshotTaken { bindingsAtCommit = nil }
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
    /// key through them (see ``bind(key:to:options:owner:principal:maximumPerOwner:sparing:)``): a store written
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
    /// With `sparingFleetKeys` (the daemon's `--fleet`), a binding that would write a fleet key is
    /// left alone: such a write must go to etcd first, and at startup there is no call to carry
    /// it; the fleet's value stands until the binding's leading side changes in a call.
    public func resynchronizeBindings(sparingFleetKeys: Bool = false) -> (changes: [PropertyChange], failures: [(Binding, PropBusError)]) {
        var changes: [PropertyChange] = []
        var failures: [(Binding, PropBusError)] = []
        // Nor through a local key in between.
        let spared = sparingFleetKeys ? bindingEnds { $0.scope == .fleet } : []
        for binding in bindings.all {
            // A stored binding acts with its principal's rights of today, not those it was made with.
            guard noteVerdict(binding, denial: denial(of: binding)) else { continue }
            if sparingFleetKeys, let target = entries[binding.flowsToKey ? binding.key : binding.to], target.definition.scope == .fleet { continue }
            do {
                changes += try synchronize(binding, sparing: spared)
            } catch {
                failures.append((binding, error))
            }
        }
        return (changes, failures)
    }

    /// The bind-time rule for one binding: the leading side's value, mapped, goes to the
    /// following side (never back), and on through other bindings except into `spared` keys.
    private func synchronize(_ binding: Binding, sparing spared: Set<Key>) throws(PropBusError) -> [PropertyChange] {
        let (source, target, transform) = binding.flowsToKey ? (binding.to, binding.key, binding.toKey) : (binding.key, binding.to, binding.toTarget)
        guard let sourceValue = entries[source]?.value, let targetEntry = entries[target] else { return [] }
        let mapped = try propagation.map(sourceValue, through: transform, into: target, binding: binding)
        guard mapped != targetEntry.value else { return [] }
        try targetEntry.definition.check(mapped, maximumSize: limits.maximumValueSize)
        return try write([(target, mapped)], frozen: spared.union([source]))
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
    private func noteVerdict(_ binding: Binding, denial reason: String?) -> Bool {
        let before = bindings.suspension(of: binding.id)
        guard before != reason, bindings[binding.id] != nil else { return reason == nil }
        if bindingsAtCommit == nil { bindingsAtCommit = bindings }
        bindings.setSuspension(reason, of: binding.id)
        if (before == nil) != (reason == nil) { bindingStateHandler?(binding, reason) }
        return reason == nil
    }

    /// Checks again the bindings that end at `key` or whose transforms read it, after its
    /// definition changed: one whose principal lost a right is suspended, and a suspended one
    /// whose rights came back resumes with the bind-time sync (the leading side wins), except
    /// into `spared` keys. A sync that fails leaves the binding active and the values as they are.
    private func recheckBindings(affectedBy key: Key, sparing spared: Set<Key> = []) -> [PropertyChange] {
        guard bindingAuthority != nil, !bindings.isEmpty else { return [] }
        var changes: [PropertyChange] = []
        for binding in bindings.affected(by: key) where binding.principal != nil {
            let wasSuspended = bindings.suspension(of: binding.id) != nil
            guard noteVerdict(binding, denial: denial(of: binding)), wasSuspended else { continue }
            if spared.contains(binding.flowsToKey ? binding.key : binding.to) { continue }
            changes += (try? synchronize(binding, sparing: spared)) ?? []
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

    private func removeBinding(_ id: UInt64) -> PropertyChange {
        if bindingsAtCommit == nil { bindingsAtCommit = bindings }
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
    private static func payload(_ value: DBusValue, for type: DBusType) -> DBusValue {
        guard type == .variant else { return value.unwrappingVariant }
        if case .variant(let inner) = value, inner.type == .variant { return inner }
        return value.type == .variant ? value : .variant(value)
    }

    /// Room kept for a `GetAll` reply's header fields.
    private static let replyHeaderAllowance = 4096

    /// Refuses a write that would make `group`'s `GetAll` (its every value, as `a{sv}`) too big
    /// for one message, unless it shrinks it: a group nobody could read whole (and whose
    /// start-up InterfacesAdded would be too big) must not be built one Set at a time.
    private func checkGroupFits(_ group: String, with changed: [(Key, DBusValue)]) throws(PropBusError) {
        let limit = limits.maximumMessageSize - Self.replyHeaderAllowance
        if changed.count == 1 {
            // The common case (one create or Set), without building a dictionary of one.
            let (key, value) = changed[0]
            var bound = (groupBounds[group] ?? 0) + 8 + Self.replyBound(name: key.name, value: value)
            if let old = entries[key] { bound -= Self.replyBound(name: key.name, value: old.value) }
            if bound <= limit { return }
        }
        let overrides = Dictionary(changed.map { ($0.0.name, $0.1) }, uniquingKeysWith: { $1 })
        // Fast path: the kept bound, with the changed entries' bounds in place of their old ones.
        var bound = (groupBounds[group] ?? 0) + 8
        for (name, value) in overrides {
            if let old = entries[Key(uncheckedGroup: group, name: name)] { bound -= Self.replyBound(name: name, value: old.value) }
            bound += Self.replyBound(name: name, value: value)
        }
        if bound <= limit { return }
        let names = groups[group] ?? []
        var before: [DictionaryEntry] = []
        var after: [DictionaryEntry] = []
        for name in names {
            guard let entry = entries[Key(uncheckedGroup: group, name: name)] else { continue }
            before.append(DictionaryEntry(.string(name), .variant(entry.value)))
            after.append(DictionaryEntry(.string(name), .variant(overrides[name] ?? entry.value)))
        }
        for (name, value) in overrides where !names.contains(name) {
            after.append(DictionaryEntry(.string(name), .variant(value)))
        }
        let newSize = DBusValue.dictionary(key: .string, value: .variant, after).wireSize()
        guard newSize > limit else { return }
        let oldSize = DBusValue.dictionary(key: .string, value: .variant, before).wireSize()
        guard newSize > oldSize else { return }
        throw PropBusError(.limitsExceeded, "group \(group) would hold \(newSize) bytes of values, more than fits in one message (\(limits.maximumMessageSize) bytes, --max-message-size), so its GetAll could not be answered; store large values in separate groups")
    }

    /// At least what the entry `name` → `value` adds to an `a{sv}` body wherever it falls: the
    /// entry's alignment, the name, the variant's signature, and the value at its worst offset
    /// (its layout depends only on where it starts modulo 8).
    static func replyBound(name: String, value: DBusValue) -> Int {
        var valueSize = 0
        for offset in 0..<8 { valueSize = max(valueSize, value.wireSize(at: offset)) }
        return 7 + (4 + name.utf8.count + 1) + (1 + value.signature.utf8.count + 1) + valueSize
    }

    /// Adds or replaces an entry; every change of `entries` goes through here or ``remove(_:)``,
    /// which keep `groups` and `groupBounds` in step.
    private func insert(_ entry: Entry) {
        let key = entry.definition.key
        if let old = entries.updateValue(entry) {
            groupBounds[key.group, default: 0] -= Self.replyBound(name: key.name, value: old.value)
            if let creator = old.definition.creator { release(old, from: creator) }
        }
        if let creator = entry.definition.creator {
            usage.charge(.properties, to: creator)
            usage.charge(.storedBytes, to: creator, Self.storedSize(of: entry))
        }
        groupBounds[key.group, default: 0] += Self.replyBound(name: key.name, value: entry.value)
        if groups[key.group, default: []].insert(key.name).inserted {
            // Checked first: a start-up inserts every key while no group was read yet, and
            // removing from an empty dictionary still hashes the group.
            if !sortedKeys.isEmpty { sortedKeys[key.group] = nil }
            sortedAllKeys = nil
        }
    }

    @discardableResult
    private func remove(_ key: Key) -> Entry? {
        guard let entry = entries.removeValue(forKey: key) else { return nil }
        groupBounds[key.group, default: 0] -= Self.replyBound(name: key.name, value: entry.value)
        if let creator = entry.definition.creator { release(entry, from: creator) }
        groups[key.group]?.remove(key.name)
        sortedKeys[key.group] = nil
        sortedAllKeys = nil
        if groups[key.group]?.isEmpty == true {
            groups[key.group] = nil
            groupBounds[key.group] = nil
        }
        return entry
    }

    private func release(_ entry: Entry, from creator: UInt32) {
        usage.release(.properties, from: creator)
        usage.release(.storedBytes, from: creator, Self.storedSize(of: entry))
    }

    /// What an entry's value holds of its creator's ``Quota/storedBytes``: the marshalled size
    /// of its stored value (a hidden one included: it is kept too); a default costs nothing.
    private static func storedSize(of entry: Entry) -> UInt64 {
        guard let value = entry.storedValue ?? entry.hidden?.value else { return 0 }
        return UInt64(value.wireSize())
    }

    /// Refuses writes (`nil`: reset) that would take a creator over its quota of stored bytes.
    /// Charged to the key's creator, whoever writes: a uid's keys hold at most its quota.
    private func checkStoredBytes(_ writes: [(Key, DBusValue?)]) throws(PropBusError) {
        guard quotas.isEnabled, !usage.isEmpty else { return }
        var growth: [UInt32: (added: UInt64, removed: UInt64, key: Key)] = [:]
        for (key, value) in writes {
            guard let entry = entries[key], let creator = entry.definition.creator, !quotas.isExempt(creator) else { continue }
            let old = Self.storedSize(of: entry)
            let new = value.map { UInt64($0.wireSize()) } ?? (entry.hidden == nil ? 0 : old)
            var total = growth[creator] ?? (0, 0, key)
            total.added += new
            total.removed += old
            growth[creator] = total
        }
        for (creator, total) in growth.sorted(by: { $0.key < $1.key }) where total.added > total.removed {
            try quotas.check(.storedBytes, uid: creator, using: usage.used(.storedBytes, by: creator) - min(total.removed, usage.used(.storedBytes, by: creator)),
                             adding: total.added, "cannot write \(total.key)")
        }
    }

    /// What each uid holds here: the properties it created and their stored bytes.
    public private(set) var usage = UsageLedger()

    /// The kept bound of `group`'s `GetAll` body (tests check it against a fresh sum).
    func replyBound(ofGroup group: String) -> Int { groupBounds[group] ?? 0 }
}

// MARK: Layer files

extension PropertyModel {
    /// What the layer files give one key: its mandatory, site and vendor values, and the
    /// entries its definition refuses.
    struct ResolvedLayers {
        var mandatory: MandatoryValue?
        var site: LayerValue?
        var vendor: LayerValue?
        var problems: [LayerProblem] = []

        /// `current` with these in place of its file layers (its overrides are kept).
        func layers(over current: ValueLayers?) -> ValueLayers? {
            var layers = current ?? ValueLayers()
            layers.mandatory = mandatory
            layers.site = site
            layers.vendor = vendor
            return layers.isEmpty ? nil : layers
        }

        /// The file the key's value comes from among these, if one does.
        var topSource: String? { mandatory?.value.source ?? site?.source ?? vendor?.source }
    }

    /// Types and checks every entry of ``layerFiles`` that names `definition`'s key; a later
    /// entry of a layer wins. An entry the definition refuses is left out, with a problem.
    func resolveLayers(for definition: PropertyDefinition) -> ResolvedLayers {
        var resolved = ResolvedLayers()
        let key = definition.key
        for entry in layerFiles.entries where entry.target.matches(key) {
            func refuse(_ problem: String) {
                // A prefix's entry says so: the key alone would not tell which entry of the file it is.
                let which = if case .prefix = entry.target { "(from \(entry.target.text)) " } else { "" }
                resolved.problems.append(LayerProblem(file: entry.source, key: key.text, problem: which + problem + "; this entry is skipped"))
            }
            if definition.scope == .fleet {
                refuse("\(key) is a fleet key, whose value is the fleet's on every host: layer files do not apply to fleet keys")
                continue
            }
            if let command = definition.stateOf {
                refuse("\(key) is the state of command \(command), which only its executions change")
                continue
            }
            let value: DBusValue
            do { value = try ValueText.value(from: entry.value, as: definition.type) } catch {
                refuse("expected a '\(definition.type.signature)' (\(definition.type.name)) value: \(error.withoutValue)")
                continue
            }
            do { try definition.check(value, maximumSize: limits.maximumValueSize) } catch {
                refuse(error.message)
                continue
            }
            let layered = LayerValue(value: value, source: entry.source)
            switch entry.layer {
            case .mandatory: resolved.mandatory = MandatoryValue(value: layered, lockedFor: entry.lockedFor)
            case .site: resolved.site = layered
            default: resolved.vendor = layered
            }
        }
        return resolved
    }

    /// Keeps the layer state as it was at the last commit, before the round's first change of it.
    private func rememberLayerState() {
        if layerStateAtCommit == nil { layerStateAtCommit = (layerFiles, layerProblems, layeredKeys) }
    }

    /// Puts `files` in force: every key they name, or named until now, takes its mandatory, site
    /// and vendor values from them; keys created later take theirs when created. Each key is
    /// changed with the file it now takes its value from (or lost it from) as the origin, so
    /// history shows which file did what. A value that changes spreads through the bindings.
    ///
    /// Returns the changes to publish and the keys whose lock came, went or changed whom it
    /// refuses (their writability changed for someone).
    public func applyLayerFiles(_ files: LayerFileSet) -> (changes: [PropertyChange], lockChanged: [Key]) {
        rememberLayerState()
        layerFiles = files
        var candidates = layeredKeys
        for entry in files.entries {
            switch entry.target {
            case .key(let key): if entries[key] != nil { candidates.insert(key) }
            case .prefix(let prefix): forEachEntry(withPrefix: prefix) { candidates.insert($0.definition.key) }
            }
        }
        var problems = files.problems
        var planned: [(key: Key, layers: ValueLayers?, file: String)] = []
        for key in candidates.sorted() {
            guard let entry = entries[key] else {
                layeredKeys.remove(key)
                continue
            }
            let resolved = resolveLayers(for: entry.definition)
            problems += resolved.problems
            let next = resolved.layers(over: entry.layers)
            guard next != entry.layers else { continue }
            let old = entry.layers
            let oldSource = old?.mandatory?.value.source ?? old?.site?.source ?? old?.vendor?.source
            planned.append((key, next, resolved.topSource ?? oldSource ?? ""))
        }
        layerProblems = problems
        let previousOrigin = origin
        defer { origin = previousOrigin }
        var changes: [PropertyChange] = []
        var lockChanged: [Key] = []
        for (file, group) in Dictionary(grouping: planned, by: \.file).sorted(by: { $0.key < $1.key }) {
            origin = .layerFile(path: file)
            for (key, layers, _) in group {
                let (changed, lockChange) = replaceLayers(of: key, with: layers, frozen: [key])
                changes += changed
                if lockChange { lockChanged.append(key) }
            }
        }
        return (changes, lockChanged)
    }

    /// Gives `key`'s entry `layers`, under the open origin; returns the changes (its value's,
    /// spread through the bindings except into `frozen`) and whether its lock came, went or
    /// changed whom it refuses.
    private func replaceLayers(of key: Key, with layers: ValueLayers?, frozen: Set<Key>) -> (changes: [PropertyChange], lockChanged: Bool) {
        guard var entry = entries[key] else { return ([], false) }
        let oldValue = entry.value, oldLock = entry.layers?.mandatoryInForce
        remember(key)
        entry.layers = layers
        revision += 1
        entry.revision = revision
        if entry.definition.persistent { saveRevisionCeiling() } else { reserveRevision() }
        insert(entry)
        // Kept when its layers go: a rolled-back round may bring them back.
        layeredKeys.insert(key)
        let newLock = layers?.mandatoryInForce
        let lockChanged = (oldLock == nil) != (newLock == nil) || oldLock?.lockedFor != newLock?.lockedFor
        let value = entry.value
        guard value != oldValue else { return ([], lockChanged) }
        var changes: [PropertyChange] = [.valueChanged(key, old: oldValue)]
        guard !bindings.isEmpty else { return (changes, lockChanged) }
        // The new value spreads as a redefinition's does; a target that refuses it keeps its own.
        if let propagated = try? propagation.expand([(key, value)], frozen: frozen),
           let written = try? write(propagated.map { ($0.0, $0.1) }, frozen: frozen) {
            changes += written
        }
        return (changes, lockChanged)
    }

    /// Puts a fleet key's layers from etcd in force (``ValueLayers/fleetMandatory``,
    /// ``ValueLayers/fleetDefault``), each key under its own origin (history names the etcd key
    /// and who wrote it). A value its definition refuses is left out, with a problem (for the
    /// log: the fleet's layers are not files this host can fix). A key that does not exist, or
    /// is not a fleet key here, is passed over: the fleet applies its layers when it defines it.
    /// A changed value spreads through the bindings into local keys only (`frozen`: the fleet
    /// keys bound here), as the fleet's values do.
    ///
    /// Returns the changes to publish, the keys whose lock changed, and the problems.
    public func applyFleetLayers(_ layers: [(key: Key, mandatory: MandatoryValue?, fleetDefault: LayerValue?, origin: WriteSet.Origin)],
                                 frozen: Set<Key>) -> (changes: [PropertyChange], lockChanged: [Key], problems: [String]) {
        let previousOrigin = origin
        defer { origin = previousOrigin }
        var changes: [PropertyChange] = [], lockChanged: [Key] = [], problems: [String] = []
        for item in layers {
            guard let entry = entries[item.key], entry.definition.scope == .fleet else { continue }
            func checked<Layer>(_ layer: Layer?, _ value: (Layer) -> DBusValue, _ name: String) -> Layer? {
                guard let layer else { return nil }
                do throws(PropBusError) { try entry.definition.check(value(layer), maximumSize: limits.maximumValueSize) } catch {
                    problems.append("the fleet \(name) of \(item.key) is skipped: \(error.message)")
                    return nil
                }
                return layer
            }
            var next = entry.layers ?? ValueLayers()
            next.fleetMandatory = checked(item.mandatory, \.value.value, "mandatory value")
            next.fleetDefault = checked(item.fleetDefault, \.value, "default")
            let nextLayers: ValueLayers? = next.isEmpty ? nil : next
            guard nextLayers != entry.layers else { continue }
            origin = item.origin
            let (changed, lockChange) = replaceLayers(of: item.key, with: nextLayers, frozen: frozen.union([item.key]))
            changes += changed
            if lockChange { lockChanged.append(item.key) }
        }
        return (changes, lockChanged, problems)
    }

    /// Whether `entry` is locked for `userID` (`nil`: not known, the daemon's user): what its
    /// `writable` metadata and introspection tell that caller.
    public func isLocked(_ entry: borrowing Entry, forUser userID: UInt32?) -> Bool {
        guard let mandatory = entry.layers?.mandatoryInForce else { return false }
        return lockAuthority.locks(mandatory, userID: userID)
    }
}

/// What a model mutation changed.
///
/// The binding cases are boxed: a `Binding` inline made every change (a model file's 10k
/// `created`) several times larger to copy.
public enum PropertyChange: Hashable, Sendable {
    /// A new property exists.
    case created(Key)
    /// A property's metadata changed but not its value.
    case redefined(Key)
    /// A property's value changed from `old`.
    case valueChanged(Key, old: DBusValue)
    /// A property was removed; `old` was its value.
    case deleted(Key, old: DBusValue)
    /// A binding was made.
    indirect case bound(Binding)
    /// A binding ended.
    indirect case unbound(Binding)

    /// The key concerned (a binding's following side).
    public var key: Key {
        switch self {
        case .created(let key), .redefined(let key), .valueChanged(let key, _), .deleted(let key, _): key
        case .bound(let binding), .unbound(let binding): binding.key
        }
    }
}
