import DBus

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

        public init(maximumValueSize: Int = 1 << 20, maximumProperties: Int = 100_000) {
            self.maximumValueSize = maximumValueSize
            self.maximumProperties = maximumProperties
        }
    }

    /// One property's state.
    public struct Entry: Sendable {
        public var definition: PropertyDefinition
        /// The stored value, `nil` when the property reads its default.
        public var storedValue: DBusValue?
        /// The model revision of the last change.
        public var revision: UInt64

        /// The value clients see.
        public var value: DBusValue { storedValue ?? definition.defaultValue }
    }

    public let limits: Limits
    private let store: PropertyStore
    private var entries: [Key: Entry] = [:]
    private var groups: [String: Set<String>] = [:]
    /// The highest revision handed out; revisions grow across all keys.
    public private(set) var revision: UInt64 = 0
    /// Stored values whose property is not defined yet (e.g. one a model file declares after
    /// startup); a later ``create(key:type:defaultValue:options:)`` with the same type adopts it.
    private var unclaimedValues: [Key: (value: DBusValue, revision: UInt64)] = [:]
    /// Each key's entry as it was at the last commit (`nil`: it did not exist), first touch wins.
    private var undoLog: [Key: Entry?] = [:]
    private var undoUnclaimed: [Key: (value: DBusValue, revision: UInt64)] = [:]
    private var revisionAtCommit: UInt64 = 0

    /// Loads what `store` holds.
    public init(store: PropertyStore, limits: Limits = Limits()) throws(PropBusError) {
        self.store = store
        self.limits = limits
        let state = try store.load()
        unclaimedValues = state.values
        revision = state.revision
        for definition in state.definitions {
            let stored = unclaimedValues.removeValue(forKey: definition.key)
            let value = stored.flatMap { $0.value.type == definition.type ? $0.value : nil }
            insert(Entry(definition: definition, storedValue: value, revision: stored?.revision ?? 0))
            revision = max(revision, stored?.revision ?? 0)
        }
        for stored in unclaimedValues.values { revision = max(revision, stored.revision) }
        revisionAtCommit = revision
    }

    // MARK: Rounds

    /// Forgets the undo log: the store committed everything done since the last round.
    public func commitRound() {
        undoLog.removeAll(keepingCapacity: true)
        undoUnclaimed.removeAll(keepingCapacity: true)
        revisionAtCommit = revision
    }

    /// Puts every entry back as it was at the last ``commitRound()``; returns the keys that
    /// were touched since, so the caller can bring its exported objects back in line.
    @discardableResult
    public func rollbackRound() -> [Key] {
        let touched = Array(undoLog.keys)
        for (key, old) in undoLog {
            if let old {
                insert(old)
            } else if entries.removeValue(forKey: key) != nil {
                removeFromGroup(key)
            }
        }
        for (key, stored) in undoUnclaimed { unclaimedValues[key] = stored }
        revision = revisionAtCommit
        commitRound()
        return touched
    }

    /// Records `key`'s state before its first change in this round.
    private func remember(_ key: Key) {
        if undoLog[key] == nil { undoLog[key] = .some(entries[key]) }
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

    /// Every entry whose key starts with `prefix`, sorted by key.
    public func list(prefix: String = "") -> [Entry] {
        entries.values.filter { $0.definition.key.text.hasPrefix(prefix) }.sorted { $0.definition.key < $1.definition.key }
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
    /// Like `registerDefaults`, registering again keeps the stored value.
    public func create(key keyText: String, type typeText: String, defaultValue: DBusValue,
                       options: [String: DBusValue] = [:]) throws(PropBusError) -> [PropertyChange] {
        let key = try Key(keyText)
        let type: DBusType
        do { type = try DBusType(parsing: typeText) } catch {
            throw .invalidArgs("type of \(key) is not a single complete D-Bus type: \(error)")
        }
        var definition = PropertyDefinition(key: key, type: type, defaultValue: Self.payload(defaultValue, for: type))
        let initial = try definition.apply(options: options)
        let existing = entries[key]
        if let existing, existing.definition.type != type {
            throw PropBusError(.typeMismatch, "property \(key) already exists with type '\(existing.definition.type.signature)'; cannot register it as '\(type.signature)'")
        }
        if existing == nil, entries.count >= limits.maximumProperties {
            throw PropBusError(.limitsExceeded, "cannot create \(key): the daemon holds the maximum of \(limits.maximumProperties) properties")
        }
        // The default must itself be a valid value, or Reset could produce an invalid state.
        var checked = definition
        checked.choices = nil
        try checked.check(definition.defaultValue, maximumSize: limits.maximumValueSize)
        if let choices = definition.choices {
            for choice in choices { try checked.check(choice, maximumSize: limits.maximumValueSize) }
        }

        remember(key)
        var entry = existing ?? Entry(definition: definition, storedValue: nil, revision: 0)
        if existing == nil, let stored = unclaimedValues[key], stored.value.type == type {
            // A value stored in an earlier run, for a property declared again only now.
            undoUnclaimed[key] = stored
            unclaimedValues[key] = nil
            entry.storedValue = stored.value
            entry.revision = stored.revision
        }
        let oldValue = existing?.value
        entry.definition = definition
        if let stored = entry.storedValue, (try? definition.check(stored, maximumSize: limits.maximumValueSize)) == nil {
            // A stored value the new metadata forbids falls back to the default.
            entry.storedValue = nil
            if definition.persistent { store.removeValue(for: key) }
        }
        if let initial, entry.storedValue == nil {
            try definition.check(initial, maximumSize: limits.maximumValueSize)
            entry.storedValue = initial
        }
        store.saveDefinition(definition)
        if existing == nil || entry.value != oldValue {
            revision += 1
            entry.revision = revision
            if let stored = entry.storedValue, definition.persistent { store.saveValue(stored, revision: revision, for: key) }
            store.saveRevision(revision)
        }
        insert(entry)
        if existing == nil { return [.created(key)] }
        return entry.value != oldValue ? [.valueChanged(key, old: oldValue!)] : [.redefined(key)]
    }

    /// Removes a property and its stored value.
    public func delete(key keyText: String) throws(PropBusError) -> [PropertyChange] {
        let key = try Key(keyText)
        guard entries[key] != nil else { throw .unknownKey(keyText) }
        remember(key)
        let entry = entries.removeValue(forKey: key)!
        removeFromGroup(key)
        store.removeDefinition(key)
        return [.deleted(key, old: entry.value)]
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
    public func apply(set assignments: [(String, DBusValue)], reset resets: [String]) throws(PropBusError) -> [PropertyChange] {
        var planned: [(Key, DBusValue?)] = []
        for (keyText, value) in assignments {
            let entry = try entry(keyText)
            guard entry.definition.writable else {
                throw PropBusError(.readOnly, "property \(keyText) is read-only")
            }
            try entry.definition.check(value, maximumSize: limits.maximumValueSize)
            planned.append((entry.definition.key, value))
        }
        for keyText in resets {
            let entry = try entry(keyText)
            guard entry.definition.writable else {
                throw PropBusError(.readOnly, "property \(keyText) is read-only")
            }
            planned.append((entry.definition.key, nil))
        }
        var changes: [PropertyChange] = []
        for (key, newStored) in planned {
            guard var entry = entries[key] else { continue }
            let old = entry.value
            if newStored == nil && entry.storedValue == nil { continue }
            if let newStored, entry.value == newStored { continue }
            remember(key)
            entry.storedValue = newStored
            if entry.definition.persistent {
                if let newStored { store.saveValue(newStored, revision: revision + 1, for: key) } else { store.removeValue(for: key) }
            }
            // Reset keeps the revision moving even when the default equals the old value, so
            // a CompareAndSet racing a Reset still sees a conflict.
            revision += 1
            entry.revision = revision
            entries[key] = entry
            if entry.value != old { changes.append(.valueChanged(key, old: old)) }
            store.saveRevision(revision)
        }
        return changes
    }

    /// A value as given for a property of `type`: callers may pass the wire argument (a `v`)
    /// or the plain value. For a `v` property only the wire's own wrapper is removed.
    private static func payload(_ value: DBusValue, for type: DBusType) -> DBusValue {
        guard type == .variant else { return value.unwrappingVariant }
        if case .variant(let inner) = value, inner.type == .variant { return inner }
        return value.type == .variant ? value : .variant(value)
    }

    private func insert(_ entry: Entry) {
        let key = entry.definition.key
        entries[key] = entry
        groups[key.group, default: []].insert(key.name)
    }

    private func removeFromGroup(_ key: Key) {
        groups[key.group]?.remove(key.name)
        if groups[key.group]?.isEmpty == true { groups[key.group] = nil }
    }
}

/// What a model mutation changed.
public enum PropertyChange: Hashable, Sendable {
    /// A new property exists.
    case created(Key)
    /// A property's metadata changed but not its value.
    case redefined(Key)
    /// A property's value changed from `old`.
    case valueChanged(Key, old: DBusValue)
    /// A property was removed; `old` was its value.
    case deleted(Key, old: DBusValue)

    /// The key concerned.
    public var key: Key {
        switch self {
        case .created(let key), .redefined(let key), .valueChanged(let key, _), .deleted(let key, _): key
        }
    }
}
