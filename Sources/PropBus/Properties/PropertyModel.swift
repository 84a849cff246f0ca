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
    private let store: PropertyStore
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

    /// Why some of what the store holds was not loaded (an older version accepted unix fds),
    /// one line each, for the daemon's log.
    public private(set) var refusedAtLoad: [String] = []

    /// Loads what `store` holds.
    public convenience init(store: PropertyStore, limits: Limits = Limits()) throws(PropBusError) {
        self.init(store: store, loaded: try store.load(), limits: limits)
    }

    /// Takes the properties, values and bindings of `state`, which `store` loaded (the caller
    /// hands its commands to a ``CommandTable``).
    public init(store: PropertyStore, loaded state: StoredState, limits: Limits = Limits()) {
        self.store = store
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
        keysReadThisRound.removeAll(keepingCapacity: true)
    }

    /// Forgets the round's write set once the store has it (or the round was rolled back).
    /// Apart from ``commitRound()``, which a model-file load also calls to begin its own undo
    /// log: the changes before it are still the round's, and history must see them.
    public func endWriteSet() {
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
        return WriteSet(changes: closedChanges, revision: revision)
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
    private var callRevision: UInt64 = 0
    private var callReadKeys: Set<Key> = []

    /// Starts recording one call's changes (a savepoint inside the round).
    public func beginCall() {
        callLog = [:]
        callUnclaimed = [:]
        callBindings = bindings
        callRevision = revision
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
    }

    /// Takes the call's changes back out of the round (the round's earlier changes stay) and
    /// stops recording. The caller restores the store's savepoint taken with ``beginCall()``.
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
        revision = callRevision
        keysReadThisRound = callReadKeys
        callLog = nil
        callBindings = nil
    }

    /// Puts `key`'s entry in the state `entry` (`nil`: removed) as a call computed it before its
    /// writes went to etcd, with a new revision; writes the store. No checks: the call checked.
    public func overwrite(_ key: Key, with entry: Entry?) -> [PropertyChange] {
        let old = entries[key]
        guard let entry else {
            guard let old else { return [] }
            remember(key)
            remove(key)
            store.removeDefinition(key)
            let ended = bindings.touching(key).map { removeBinding($0.id) }
            return [.deleted(key, old: old.value)] + ended
        }
        if old?.definition == entry.definition, old?.storedValue == entry.storedValue, old?.hidden?.value == entry.hidden?.value { return [] }
        remember(key)
        var next = entry
        if old?.definition != entry.definition { store.saveDefinition(entry.definition) }
        revision += 1
        next.revision = revision
        if entry.definition.persistent {
            if let stored = entry.storedValue { store.saveValue(stored, revision: revision, for: key) }
            else if old?.storedValue != nil { store.removeValue(for: key) }
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
        store.saveDefinition(definition)
        if existing == nil || entry.value != oldValue {
            revision += 1
            entry.revision = revision
            if let stored = entry.storedValue, definition.persistent { store.saveValue(stored, revision: revision, for: key) }
            saveRevisionCeiling()
        }
        insert(entry)
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
        store.retireDefinition(key)
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
            store.removeValue(for: key)
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
        store.removeDefinition(key)
        // A channel cannot outlive one of its ends.
        let ended = bindings.touching(key).map { removeBinding($0.id) }
        return [.deleted(key, old: entry.value)] + ended + recheckBindings(affectedBy: key)
    }

    // MARK: Writing

    /// Sets one value. A value equal to the current one changes nothing and returns no change.
    public func set(_ keyText: String, to value: DBusValue) throws(PropBusError) -> [PropertyChange] {
        try apply(set: [(keyText, value)], reset: [])
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
        guard entry.definition.writable else {
            if let command = entry.definition.stateOf {
                throw PropBusError(.readOnly, "\(keyText) is the state of command \(command) and is read-only; bind to it with direction=from")
            }
            throw PropBusError(.readOnly, "property \(keyText) is read-only")
        }
        return entry
    }

    /// Propagates validated writes (`nil`: reset) through the bindings, checks every
    /// propagated value against its target, then writes everything.
    private func write(_ planned: [(Key, DBusValue?)], frozen: Set<Key>) throws(PropBusError) -> [PropertyChange] {
        var all = planned
        if !bindings.isEmpty {
            // Only a real change spreads: a same-value write is a no-op everywhere.
            let origins = planned.compactMap { key, value -> (Key, DBusValue)? in
                guard let entry = entries[key] else { return nil }
                let next = value ?? entry.definition.defaultValue
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
            byGroup[key.group, default: []].append((key, value ?? entry.definition.defaultValue))
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
            if let newStored, entry.value == newStored { continue }
            remember(key)
            entry.storedValue = newStored
            // A new value replaces a hidden one (in the store too); a Reset leaves it be.
            if newStored != nil { entry.hidden = nil }
            if entry.definition.persistent {
                if let newStored { store.saveValue(newStored, revision: revision + 1, for: key) } else { store.removeValue(for: key) }
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
        store.saveRevision(reservedRevision)
    }

    /// Makes sure the revision just handed out is reserved in the store, reserving a new block
    /// (one small write) when it is not.
    private func reserveRevision() {
        guard revision > reservedRevision else { return }
        reservedRevision = revision + Self.revisionBlock
        store.reserveRevisions(through: reservedRevision)
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
        var binding = Binding(id: 0, key: key, to: to, owner: owner, principal: principal)
        for (name, raw) in options.sorted(by: { $0.key < $1.key }) {
            let value = raw.unwrappingVariant
            switch name {
            case "direction":
                guard let text = value.stringValue, let direction = Binding.Direction(rawValue: text) else {
                    throw .invalidArgs("option 'direction' of the binding \(key) ↔ \(to) must be one of both, from, to; got \(ValueDescription.short(value))")
                }
                binding.direction = direction
            case "to_key", "to_target":
                guard case .string(let text) = value else {
                    throw .invalidArgs("option '\(name)' of the binding \(key) ↔ \(to) must be an expression string (s), got '\(value.signature)'")
                }
                let expression: Expression
                do { expression = try Expression(parsing: text) } catch {
                    throw PropBusError(error.code, "option '\(name)' of the binding \(key) ↔ \(to): \(error.message)")
                }
                if name == "to_key" { binding.toKey = expression } else { binding.toTarget = expression }
            case "persistent":
                guard let flag = value.boolValue else {
                    throw .invalidArgs("option 'persistent' of the binding \(key) ↔ \(to) must be a boolean (b), got '\(value.signature)'")
                }
                binding.persistent = flag
            default:
                throw .invalidArgs("unknown option '\(name)' for Bind; expected one of: \(Binding.optionNames.joined(separator: ", "))")
            }
        }
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
        store.saveNextBindingID(bindings.nextID)
        if binding.persistent { store.saveBinding(binding) }
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
        if binding.persistent { store.removeBinding(id) }
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
