import DBusValues

/// Where property definitions and values are kept between runs.
///
/// One way in: ``commit(_:durability:)``, which the service calls once per dispatch round
/// (group commit) before any reply or signal for the round goes out, with the round's
/// ``WriteSet``. Its ``WriteSet/store`` (``StoreChanges``) holds every row to write; the store
/// writes them in one transaction straight from the value and keeps nothing pending in
/// between. Rolling back is the round throwing its value away: a store has nothing to undo.
///
/// New durable state goes into ``StoreChanges`` (a field, with a `save…`/`remove…` method that
/// records it) and into ``StoredState`` for ``load()``, never into a method of this protocol.
public protocol PropertyStore: AnyObject {
    /// Everything stored: definitions created at run time and stored values.
    func load() throws(PropBusError) -> StoredState
    /// Makes the round's ``WriteSet/store`` durable, in one transaction, with what the round did
    /// (a store that keeps history records it in the same transaction). Throws when it cannot:
    /// then nothing of the round is written, and the round is thrown away.
    ///
    /// A round with no rows to write (``StoreChanges/isEmpty``: transient keys only) touches no
    /// disk; one holding only a revision reservation writes that row alone.
    func commit(_ writeSet: WriteSet, durability: StoreChanges.Durability) throws(PropBusError)
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
    /// The external revisions of the mirrored keys (``StoreChanges/externalRevisions``).
    public var externalRevisions: [Key: ExternalRevisions] = [:]
    /// The last external revision applied; 0: none (a full read first).
    public var externalCursor: Int64 = 0
    /// The external source the revisions and the cursor belong to, if recorded.
    public var externalSource: String?
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

/// A store that keeps nothing across runs.
public final class MemoryStore: PropertyStore {
    public init() {}
    public func load() -> StoredState { StoredState() }
    public func commit(_ writeSet: WriteSet, durability: StoreChanges.Durability) {}
}
