import DBusValues

/// Where property definitions and values are kept between runs.
///
/// Writes are buffered until ``commit()``, which the service calls once per dispatch round
/// (group commit) before any reply or signal for the round goes out.
public protocol PropertyStore: AnyObject {
    /// Everything stored: definitions created at run time and stored values.
    func load() throws(PropBusError) -> StoredState
    /// Records a run-time definition.
    func saveDefinition(_ definition: PropertyDefinition)
    /// Forgets a definition and its value.
    func removeDefinition(_ key: Key)
    /// Forgets a definition but keeps its stored value (a key whose model file no longer
    /// declares it: the value returns if the key is declared again, until pruned).
    func retireDefinition(_ key: Key)
    /// The writes recorded since the last commit, to go back to with ``StoreSavepoint/restore()``
    /// (a model file that fails half-way is skipped as a whole).
    func savepoint() -> StoreSavepoint
    /// Records a persistent property's value.
    func saveValue(_ value: DBusValue, revision: UInt64, for key: Key)
    /// Forgets a stored value (Reset).
    func removeValue(for key: Key)
    /// Records the model's highest revision, so revisions never go back across restarts even
    /// when the latest change was a Reset (whose value is not stored).
    func saveRevision(_ revision: UInt64)
    /// Records that revisions up to `ceiling` may be handed out without another write, so a
    /// restart starts above it. Advisory: a store may write it with the next commit or on its
    /// own, and a failure to write it must not fail a round that wrote nothing else (transient
    /// keys live in memory and must work on a full disk).
    func reserveRevisions(through ceiling: UInt64)
    /// Records a persistent binding.
    func saveBinding(_ binding: Binding)
    /// Forgets a persistent binding.
    func removeBinding(_ id: UInt64)
    /// Records the next binding id, so ids are not reused after a restart.
    func saveNextBindingID(_ id: UInt64)
    /// Records a persistent command's definition, as its `CreateCommand` options.
    func saveCommand(_ key: Key, options: [String: DBusValue])
    /// Forgets a command's definition.
    func removeCommand(_ key: Key)
    /// Records a fleet key's etcd `mod_revision`s (issue 14): of its value (`PREFIX/keys/KEY`)
    /// and of its definition (`PREFIX/defs/KEY`); negative: deleted at that revision.
    func saveFleetRevisions(_ revisions: FleetRevisions, for key: Key)
    /// Forgets a key's etcd revisions.
    func removeFleetRevisions(for key: Key)
    /// Records the last etcd revision the mirror applied (the watch resumes after it).
    func saveFleetCursor(_ revision: Int64)
    /// Records which fleet (etcd cluster and prefix) the mirror, its cursor and its revisions
    /// belong to.
    func saveFleetSource(_ source: String)
    /// Whether anything was recorded since the last commit (the owner counts writing commits as
    /// work, see the service's memory release).
    var hasPendingWrites: Bool { get }
    /// Records a lease that outlives a restart: a TTL override, an ephemeral key.
    func saveLease(_ lease: Lease)
    /// Forgets a lease.
    func removeLease(_ handle: UInt64)
    /// Records the next lease handle, so handles are not reused after a restart.
    func saveNextLeaseHandle(_ handle: UInt64)
    /// Makes everything recorded since the last commit durable.
    func commit() throws(PropBusError)
    /// Makes everything recorded since the last commit durable, with what the round did as a
    /// value (a store that keeps history records it in the same transaction).
    func commit(_ writeSet: WriteSet) throws(PropBusError)
    /// Drops everything recorded since the last commit.
    func rollback()
}

extension PropertyStore {
    public func saveFleetRevisions(_ revisions: FleetRevisions, for key: Key) {}
    public func removeFleetRevisions(for key: Key) {}
    public func saveFleetCursor(_ revision: Int64) {}
    public func saveFleetSource(_ source: String) {}
    public func saveLease(_ lease: Lease) {}
    public func removeLease(_ handle: UInt64) {}
    public func saveNextLeaseHandle(_ handle: UInt64) {}
    public func reserveRevisions(through ceiling: UInt64) { saveRevision(ceiling) }
    public func retireDefinition(_ key: Key) {}
    public func savepoint() -> StoreSavepoint { StoreSavepoint {} }
    public func commit(_ writeSet: WriteSet) throws(PropBusError) { try commit() }
}

/// Uncommitted writes as they were at one moment.
public struct StoreSavepoint {
    /// Puts the uncommitted writes back as they were.
    public let restore: () -> Void

    public init(restore: @escaping () -> Void) { self.restore = restore }
}

/// The contents of a store, as loaded at startup.
public struct StoredState: Sendable {
    public var definitions: [PropertyDefinition] = []
    /// The stored value of each of ``definitions``, in the same order (`nil`: none), for a store
    /// that reads them together (no dictionary to build and search at start-up); empty when
    /// ``values`` holds every value instead.
    public var definitionValues: [(value: DBusValue, revision: UInt64)?] = []
    /// Stored values by key: those not in ``definitionValues`` (all of them when it is empty).
    public var values: [Key: (value: DBusValue, revision: UInt64)] = [:]
    /// No revision above this was handed out before (the highest one, or a reserved ceiling).
    public var revision: UInt64 = 0
    /// Persistent bindings.
    public var bindings: [Binding] = []
    /// The next binding id to hand out.
    public var nextBindingID: UInt64 = 1
    /// Persistent commands, as their `CreateCommand` options.
    public var commands: [(key: Key, options: [String: DBusValue])] = []
    /// The etcd revisions of the fleet keys the mirror holds.
    public var fleetRevisions: [Key: FleetRevisions] = [:]
    /// The last etcd revision the mirror applied; 0: none (a full read first).
    public var fleetCursor: Int64 = 0
    /// The fleet the mirror belongs to (``PropertyStore/saveFleetSource(_:)``), if recorded.
    public var fleetSource: String?
    /// TTL overrides and ephemeral keys (``Lease``).
    public var leases: [Lease] = []
    /// The next lease handle to hand out.
    public var nextLeaseHandle: UInt64 = 1

    public init() {}

    /// The stored value of `definitions[index]`, wherever the store put it.
    public func storedValue(ofDefinitionAt index: Int) -> (value: DBusValue, revision: UInt64)? {
        if definitionValues.count == definitions.count, let aligned = definitionValues[index] { return aligned }
        return values.isEmpty ? nil : values[definitions[index].key]
    }

    /// Every stored value, with its key: the aligned ones first, then the others.
    public func forEachValue(_ body: (Key, (value: DBusValue, revision: UInt64)) -> Void) {
        if definitionValues.count == definitions.count {
            for (index, stored) in definitionValues.enumerated() { if let stored { body(definitions[index].key, stored) } }
        }
        for (key, stored) in values { body(key, stored) }
    }
}

/// A fleet key's etcd `mod_revision`s: of its value and of its definition. A positive number is
/// the revision of the key that exists; a negative one the revision at which it was deleted
/// (kept, so an older change arriving late is recognised); 0: never seen.
public struct FleetRevisions: Hashable, Sendable {
    public var value: Int64
    public var definition: Int64

    public init(value: Int64 = 0, definition: Int64 = 0) {
        self.value = value
        self.definition = definition
    }
}

/// A store that keeps nothing across runs.
public final class MemoryStore: PropertyStore {
    public init() {}
    public func load() -> StoredState { StoredState() }
    public func saveDefinition(_ definition: PropertyDefinition) {}
    public func removeDefinition(_ key: Key) {}
    public func saveValue(_ value: DBusValue, revision: UInt64, for key: Key) {}
    public func removeValue(for key: Key) {}
    public func saveRevision(_ revision: UInt64) {}
    public func reserveRevisions(through ceiling: UInt64) {}
    public func saveBinding(_ binding: Binding) {}
    public func removeBinding(_ id: UInt64) {}
    public func saveNextBindingID(_ id: UInt64) {}
    public func saveCommand(_ key: Key, options: [String: DBusValue]) {}
    public func removeCommand(_ key: Key) {}
    /// Never: it records nothing.
    public var hasPendingWrites: Bool { false }
    public func commit() {}
    public func rollback() {}
}
