/// The bindings of a model, indexed by the keys they touch.
public struct BindingTable: Sendable {
    private(set) var byID: [UInt64: Binding] = [:]
    private var byKey: [Key: Set<UInt64>] = [:]
    /// The bindings whose transforms name a key, by that key: a change of its definition (made
    /// secret, writers narrowed) changes what they may do.
    private var byReference: [Key: Set<UInt64>] = [:]
    /// The keys each binding's transforms name, parsed once (checked at every propagation).
    private var references: [UInt64: [Key]] = [:]
    /// Why each suspended binding may not act (its principal lost a right); a binding not
    /// listed is active. Kept here so that a rolled-back round takes its verdicts back too.
    private var suspensions: [UInt64: String] = [:]
    /// Persistent bindings by channel, so that binding the same pair again finds the existing
    /// one without looking at every binding.
    private var persistentByChannel: [Channel: UInt64] = [:]
    /// How many bindings each connection made.
    private var countByOwner: [String: Int] = [:]
    /// What each principal holds (``Quota/bindings``), so that a quota check is a lookup.
    public private(set) var usage = UsageLedger()
    /// The next id to hand out; ids are never reused within a run.
    private(set) var nextID: UInt64 = 1

    public init() {}

    /// Whether there are no bindings: writes then skip propagation entirely.
    public var isEmpty: Bool { byID.isEmpty }

    /// Every binding, by id.
    public var all: [Binding] { byID.values.sorted { $0.id < $1.id } }

    /// The binding with this id.
    public subscript(id: UInt64) -> Binding? { byID[id] }

    /// Takes an id for a new binding.
    mutating func makeID() -> UInt64 {
        defer { nextID += 1 }
        return nextID
    }

    /// Makes sure ids below `id` are never handed out (they were used in an earlier run).
    mutating func reserveIDs(below id: UInt64) {
        nextID = max(nextID, id)
    }

    mutating func insert(_ binding: Binding) {
        // Inserted again under its id: unindexed whole first; its verdict stands until the
        // next check.
        let suspension = suspensions[binding.id]
        if byID[binding.id] != nil { remove(binding.id) }
        suspensions[binding.id] = suspension
        byID[binding.id] = binding
        if binding.persistent { persistentByChannel[Channel(binding)] = binding.id }
        if let owner = binding.owner { countByOwner[owner, default: 0] += 1 }
        usage.charge(.bindings, to: binding.principal)
        byKey[binding.key, default: []].insert(binding.id)
        byKey[binding.to, default: []].insert(binding.id)
        let named = Self.referencedKeys(of: binding)
        if !named.isEmpty { references[binding.id] = named }
        for key in named { byReference[key, default: []].insert(binding.id) }
        nextID = max(nextID, binding.id + 1)
    }

    @discardableResult
    mutating func remove(_ id: UInt64) -> Binding? {
        guard let binding = byID.removeValue(forKey: id) else { return nil }
        unindex(binding)
        byKey[binding.key]?.remove(id)
        byKey[binding.to]?.remove(id)
        if byKey[binding.key]?.isEmpty == true { byKey[binding.key] = nil }
        if byKey[binding.to]?.isEmpty == true { byKey[binding.to] = nil }
        for key in references.removeValue(forKey: id) ?? [] {
            byReference[key]?.remove(id)
            if byReference[key]?.isEmpty == true { byReference[key] = nil }
        }
        suspensions[id] = nil
        return binding
    }

    /// The keys the transforms of binding `id` read (besides its two ends).
    func referencedKeys(ofBinding id: UInt64) -> [Key] { references[id] ?? [] }

    /// The keys `binding`'s transforms read (besides its two ends).
    static func referencedKeys(of binding: Binding) -> [Key] {
        var names = binding.toKey?.referencedKeys ?? []
        if let toTarget = binding.toTarget { names.formUnion(toTarget.referencedKeys) }
        return names.sorted().compactMap { try? Key($0) }
    }

    /// Bindings with `key` on either side or named in a transform, in id order: those whose
    /// rights a change of `key`'s definition may change.
    func affected(by key: Key) -> [Binding] {
        (byKey[key, default: []].union(byReference[key] ?? [])).sorted().compactMap { byID[$0] }
    }

    /// Why binding `id` is suspended; `nil` when it is active (or unknown).
    public func suspension(of id: UInt64) -> String? { suspensions[id] }

    /// Marks binding `id` suspended for `reason`, or active again (`nil`).
    mutating func setSuspension(_ reason: String?, of id: UInt64) {
        guard byID[id] != nil else { return }
        suspensions[id] = reason
    }

    /// Bindings with `key` on either side, in id order so propagation is deterministic.
    func touching(_ key: Key) -> [Binding] {
        (byKey[key] ?? []).sorted().compactMap { byID[$0] }
    }

    /// How many bindings a connection made.
    func count(ownedBy owner: String) -> Int { countByOwner[owner] ?? 0 }

    /// How many bindings, persistent ones included, act for `principal`.
    public func count(principal: UInt32) -> Int { Int(usage.used(.bindings, by: principal)) }

    /// The persistent binding that binds the same keys the same way as `binding`, if any.
    func persistentBinding(sameChannelAs binding: Binding) -> Binding? {
        persistentByChannel[Channel(binding)].flatMap { byID[$0] }
    }

    private mutating func unindex(_ binding: Binding) {
        if binding.persistent, persistentByChannel[Channel(binding)] == binding.id { persistentByChannel[Channel(binding)] = nil }
        if let owner = binding.owner {
            countByOwner[owner, default: 0] -= 1
            if countByOwner[owner]! <= 0 { countByOwner[owner] = nil }
        }
        usage.release(.bindings, from: binding.principal)
    }

    /// What ``Binding/sameChannel(as:)`` compares, as a dictionary key.
    private struct Channel: Hashable {
        var key: Key, to: Key, direction: Binding.Direction, toKey: String?, toTarget: String?
        init(_ binding: Binding) {
            (key, to, direction) = (binding.key, binding.to, binding.direction)
            (toKey, toTarget) = (binding.toKey?.text, binding.toTarget?.text)
        }
    }
}
