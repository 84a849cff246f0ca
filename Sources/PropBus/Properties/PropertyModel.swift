import DBusValues

/// The daemon's properties: definitions, current values and revisions.
///
/// Single owner: the service confines the model to its connection's queue, so the model itself
/// takes no locks. Mutations validate everything first and change nothing when they throw.
/// Each returns the ``PropertyChange``s it made, which the caller turns into signals.
///
/// Mutations since the last ``commitRound()`` are journaled (``Transaction``), so that when the
/// store cannot commit a round, ``rollbackRound()`` puts the model back as it was, and a
/// savepoint inside the round (``savepoint()``) can be rolled back alone.
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
        /// the store, unseen, until a later definition admits it again (a
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
        /// Rare, so out of line, as ``hidden``. Visible to ``value``'s inlined body.
        @usableFromInline var layersBox: LayersBox?

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

        @usableFromInline final class LayersBox: Sendable {
            @usableFromInline let layers: ValueLayers
            init(_ layers: ValueLayers) { self.layers = layers }
        }

        /// The value clients see: the user's (``storedValue``) unless a layer above it holds
        /// one, else the layers below it and the definition's default.
        // Inlinable: called on an entry in another module's memory (history reads the write
        // set in place), an opaque getter made the caller copy the whole entry first.
        @inlinable public var value: DBusValue {
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

    // The model's state, which the extensions in PropertyModel+*.swift change: internal (or
    // `internal(set)`) rather than private, as Swift's `private` does not reach an extension in
    // another file. Still the model's alone: nothing public changes.
    public let limits: Limits
    /// The rows the round must make durable, as a value: the model, the command table and the
    /// daemon's other parts record into it instead of calling the store; ``takeWriteSet()``
    /// hands it to the store's commit with the round's changes; a rollback throws it away, and
    /// a savepoint inside the round (``savepoint()``) keeps a copy of it.
    public var storeChanges = StoreChanges()
    var entries = EntryTable()
    var groups: [String: Set<String>] = [:]
    /// ``keys(inGroup:)``, by group, built on first use and dropped when the group's names change.
    var sortedKeys: [String: [Key]] = [:]
    /// ``allKeysSorted()``, dropped when a key comes or goes.
    var sortedAllKeys: [Key]?
    /// An upper bound of each group's `GetAll` body (the sum of ``replyBound(name:value:)`` over
    /// its entries), kept as entries come, change and go, so that a write sizes only what it
    /// changes rather than the whole group (a 10k-property group made every write O(n)).
    var groupBounds: [String: Int] = [:]
    /// The definition created last, whose metadata box the next one shares when equal.
    var lastCreated: PropertyDefinition?
    /// The highest revision handed out; revisions grow across all keys.
    public internal(set) var revision: UInt64 = 0
    /// Stored values whose property is not defined yet (e.g. one a model file declares after
    /// startup); a later ``create(key:type:defaultValue:options:holding:)`` with the same type adopts it.
    var unclaimedValues: [Key: (value: DBusValue, revision: UInt64)] = [:]
    /// The round's one journal, with its savepoints (PropertyModel+Rounds.swift): what a
    /// rollback puts back, and the open change's keys for the round's ``WriteSet``.
    var transaction = Transaction(revision: 0, reservedRevision: 0)
    /// Revisions up to here are reserved in the store: transient changes hand them out without
    /// touching the disk (transient means memory), and a restart starts above them.
    var reservedRevision: UInt64 = 0
    /// How many revisions one reservation covers: one small write per this many transient changes.
    static let revisionBlock: UInt64 = 4096
    /// The daemon-side channels (docs/channels.md).
    public internal(set) var bindings = BindingTable()
    /// The overrides' index and the ephemeral keys (``LeaseTable``); the overrides themselves
    /// are in their entries' layers.
    public internal(set) var leases = LeaseTable()
    /// Leases the store held, until ``adoptLoadedLeases()`` (model files declare keys after the
    /// model is loaded).
    var loadedLeases: [Lease] = []
    /// Ephemeral keys of a connection's lifetime loaded from the store: their creator's
    /// connection was to the daemon before, and ``endLeasesOfPreviousRun()`` deletes them.
    var leasesOfPreviousRun: Set<UInt64> = []
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
    public internal(set) var layerFiles = LayerFileSet()
    /// What is wrong with the layer files in force: what could not be read, and the entries a
    /// key's definition refuses (`SkippedModelFiles`, `propctl status`).
    public internal(set) var layerProblems: [LayerProblem] = []
    /// Told of a problem found when a key is created after the files were read, for the log
    /// (those of ``applyLayerFiles(_:)`` are returned by it).
    public var layerProblemHandler: ((LayerProblem) -> Void)?
    /// The keys whose entry carries (or carried) layer-file values, so a reload revisits them
    /// without a scan; a key leaves it when its entry goes.
    var layeredKeys: Set<Key> = []
    /// Why some of what the store holds was not loaded (an older version accepted unix fds),
    /// one line each, for the daemon's log.
    public private(set) var refusedAtLoad: [String] = []

    // The round's write set (PropertyModel+Rounds.swift, with the journal above) and the uids'
    // usage (PropertyModel+Limits.swift): stored here, as an extension cannot store.
    /// The origin of the open change (``origin``).
    var openOrigin: WriteSet.Origin = .startup
    /// The changes of the round that ended (their after-states taken when they ended).
    var closedChanges: [WriteSet.Change] = []
    /// Why keys of the open change changed other than by its origin (``WriteSet/Entry/via``).
    var openVia: [Key: String] = [:]
    /// What each uid holds here: the properties it created and their stored bytes.
    public internal(set) var usage = UsageLedger()

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
        for binding in state.bindings { bindings.insert(binding) }
        bindings.reserveIDs(below: state.nextBindingID)
        transaction = Transaction(revision: revision, reservedRevision: reservedRevision)
        loadedLeases = state.leases
        leases.reserveHandles(below: state.nextLeaseHandle)
    }
}
