import DBusValues

/// What a round must make durable, as a value: the rows the store writes in its one
/// transaction (``PropertyStore/commit(_:durability:)``), carried by the round's ``WriteSet``.
///
/// The model, the command table and the daemon's other parts record into the round's value
/// (``PropertyModel/storeChanges``) instead of calling the store; a savepoint inside the round
/// is a copy of it (copy-on-write), put back when what followed fails; a round that cannot
/// commit throws it away. Last write wins per key, per id and per handle, so a key written a
/// thousand times in a round is one row.
///
/// Plain data, no references: a store can write it straight, and a test can build one by hand.
public struct StoreChanges: Sendable {
    /// One row to write: its new contents, or its removal.
    public enum Write<Row: Sendable>: Sendable {
        case save(Row)
        case delete
    }

    /// A persistent value with the revision it was written at.
    public struct RevisedValue: Sendable, Equatable {
        public var value: DBusValue
        public var revision: UInt64

        public init(value: DBusValue, revision: UInt64) {
            self.value = value
            self.revision = revision
        }
    }

    /// Run-time definitions upserted or removed (a removed or retired definition).
    public private(set) var definitions: [Key: Write<PropertyDefinition>] = [:]
    /// Persistent values written or removed (Reset, Delete, Prune).
    public private(set) var values: [Key: Write<RevisedValue>] = [:]
    /// The model's revision ceiling, recorded with a durable write: revisions never go back across
    /// restarts even when the latest change was a Reset (whose value is not stored).
    public private(set) var revision: UInt64?
    /// A revision ceiling reserved by transient changes alone: a round holding only this writes
    /// one small row per block of revisions, and fails if it cannot (its revisions would be
    /// handed out again after a crash, and a CompareAndSet holding one would succeed on another
    /// value).
    public private(set) var reservation: UInt64?
    /// Persistent bindings made or unmade, by id.
    public private(set) var bindings: [UInt64: Write<Binding>] = [:]
    /// The next binding id, so ids are not reused after a restart.
    public private(set) var nextBindingID: UInt64?
    /// Persistent commands, as their `CreateCommand` options, or removed.
    public private(set) var commands: [Key: Write<[String: DBusValue]>] = [:]
    /// Leases that outlive a restart (TTL overrides, ephemeral keys), by handle.
    public private(set) var leases: [UInt64: Write<Lease>] = [:]
    /// The next lease handle, so handles are not reused after a restart.
    public private(set) var nextLeaseHandle: UInt64?
    /// Per-key revisions of an external source the daemon mirrors keys from
    /// (``ExternalRevisions``): bookkeeping the core keeps for its owner without reading it.
    public private(set) var externalRevisions: [Key: Write<ExternalRevisions>] = [:]
    /// The last revision of the external source that was applied (where its feed resumes).
    public private(set) var externalCursor: Int64?
    /// Which external source the revisions and the cursor belong to.
    public private(set) var externalSource: String?
    /// How durable the commit must be: ``Durability/replayable`` when everything in it is kept
    /// durably by the external source too and would be fetched again after a power loss (the
    /// owner of the external bookkeeping lowers it; a commit puts it back to full).
    public var durability = Durability.full

    public init() {}

    /// How long a commit must wait for the disk.
    public enum Durability: Sendable, Hashable {
        /// Durable once the commit returns (an fsync per commit).
        case full
        /// Atomic and safe against a crash of the process, but not waiting for the disk: what
        /// it holds is kept elsewhere too, and a power loss only makes the daemon fetch it again.
        case replayable
    }

    public mutating func saveDefinition(_ definition: PropertyDefinition) { definitions[definition.key] = .save(definition) }

    /// Forgets a definition and its value.
    public mutating func removeDefinition(_ key: Key) {
        definitions[key] = .delete
        values[key] = .delete
    }

    /// Forgets a definition but keeps its stored value (a key whose model file no longer
    /// declares it: the value returns if the key is declared again, until pruned).
    public mutating func retireDefinition(_ key: Key) { definitions[key] = .delete }

    public mutating func saveValue(_ value: DBusValue, revision: UInt64, for key: Key) {
        values[key] = .save(RevisedValue(value: value, revision: revision))
    }

    public mutating func removeValue(for key: Key) { values[key] = .delete }

    public mutating func saveRevision(_ revision: UInt64) { self.revision = revision }

    /// Reserves revisions up to `ceiling` (see ``reservation``); the highest reservation wins.
    public mutating func reserveRevisions(through ceiling: UInt64) { reservation = max(reservation ?? 0, ceiling) }

    public mutating func saveBinding(_ binding: Binding) { bindings[binding.id] = .save(binding) }

    public mutating func removeBinding(_ id: UInt64) { bindings[id] = .delete }

    public mutating func saveNextBindingID(_ id: UInt64) { nextBindingID = id }

    public mutating func saveCommand(_ key: Key, options: [String: DBusValue]) { commands[key] = .save(options) }

    public mutating func removeCommand(_ key: Key) { commands[key] = .delete }

    public mutating func saveLease(_ lease: Lease) { leases[lease.handle] = .save(lease) }

    public mutating func removeLease(_ handle: UInt64) { leases[handle] = .delete }

    public mutating func saveNextLeaseHandle(_ handle: UInt64) { nextLeaseHandle = handle }

    public mutating func saveExternalRevisions(_ revisions: ExternalRevisions, for key: Key) { externalRevisions[key] = .save(revisions) }

    public mutating func removeExternalRevisions(for key: Key) { externalRevisions[key] = .delete }

    public mutating func saveExternalCursor(_ revision: Int64) { externalCursor = revision }

    public mutating func saveExternalSource(_ source: String) { externalSource = source }

    /// Whether rows other than the external bookkeeping (its revisions, cursor and source) and
    /// the revision reservation are to be written: those need the disk.
    public var hasOwnWrites: Bool {
        !definitions.isEmpty || !values.isEmpty || revision != nil || !bindings.isEmpty || nextBindingID != nil
            || !commands.isEmpty || !leases.isEmpty || nextLeaseHandle != nil
    }

    /// Whether any row is to be written besides the revision reservation (the owner counts a
    /// writing commit as work, see the service's memory release).
    public var hasWrites: Bool {
        hasOwnWrites || !externalRevisions.isEmpty || externalCursor != nil || externalSource != nil
    }

    /// Whether there is nothing at all to write, not even a reservation.
    public var isEmpty: Bool { !hasWrites && reservation == nil }
}

/// A mirrored key's revisions in the external source it comes from: of its value and of its
/// definition. A positive number is the revision of the one that exists; a negative one the
/// revision at which it was deleted (kept, so an older change arriving late is recognised);
/// 0: never seen. The core stores and loads them without giving them a meaning.
public struct ExternalRevisions: Hashable, Sendable {
    public var value: Int64
    public var definition: Int64

    public init(value: Int64 = 0, definition: Int64 = 0) {
        self.value = value
        self.definition = definition
    }
}
