import DBus
import PropBus

extension Service {
    /// `Manager.ListPropertiesCompact(s prefix)` → `(a(suvtba{sv}) properties, a(sa{sv}) shapes)`:
    /// what `ListProperties` says, with each distinct definition (type and definition metadata)
    /// said once, in `shapes`, and each property as its key, its shape's index, value,
    /// `revision`, `is_set` and the rest of its own metadata (the gate's revision, `hidden_*`).
    ///
    /// A listing's keys mostly share a few definitions, and the metadata repeated per key was
    /// four fifths of `ListProperties`' bytes (2 MB at 10k keys), which the bus relays and
    /// validates and the client reads: that, more than the daemon, bounded the listing's time.
    func listPropertiesCompact(_ call: MethodCall) throws(DBusError) -> MethodResult {
        let prefix = try call.string("prefix")
        // Read here, not through `self` per row: the service's references are not free.
        let model = model, access = options.access, gate = gate
        // Locks are decided for this caller, outside the walk, which may not touch the model.
        let lockAuthority = model.lockAuthority, callerID = call.credentials?.userID
        return .stream(ReplyBody(signature: "a(suvtba{sv})a(sa{sv})") { writer in
            // Shapes are known once every row was seen, so they come last: one pass.
            var shapes = ListingShapes()
            var writers = WriterDecisions()
            writer.array(of: "(suvtba{sv})", alignment: 8) { items in
                model.forEachEntry(withPrefix: prefix) { entry in
                    let definition = entry.definition
                    guard access.mayRead(writers: definition.writers, secret: definition.secret, caller: call.credentials) else { return }
                    items.structure { item in
                        item.string(definition.key.text)
                        item.value(.uint32(shapes.index(of: definition)))
                        item.variant(entry.value)
                        item.uint64(entry.revision)
                        item.boolean(entry.storedValue != nil)
                        // The gate's own table, not the model: nothing here may touch the model.
                        let gateRevision = gate?.listedRevision(of: definition)
                        // Layers are the entry's own: their fields, and `writable` when a lock
                        // (docs/layers.md) or the writers refuse this caller what the shape allows.
                        let locked = entry.layers?.mandatoryInForce.map { lockAuthority.locks($0, userID: callerID) } ?? false
                            || !writers.mayWrite(definition.writers) { access.mayWrite(writers: $0, caller: call.credentials) }
                        let own = EntryMetadata(entry, gateRevision: gateRevision, lifetime: model.leases.keyLeases[definition.key] ?? gate?.listedLifetime(of: definition),
                                                lockedForCaller: locked)
                        item.dictionary("{sv}") { extra in
                            if let gateRevision { extra.entry(EntryMetadata.gateRevisionName, .int64(gateRevision)) }
                            if let hidden = entry.hidden {
                                extra.entry("hidden_reason", string: hidden.reason)
                                if PropertyDefinition.canSendBack(hidden.value) { extra.entry("hidden_value", hidden.value) }
                            }
                            own.writeLayerFields(to: &extra)
                            own.writeOverrides(secret: definition.secret, to: &extra)
                            if let userValue = own.layers?.userValue { extra.entry("user_value", userValue) }
                            if locked, definition.writable { extra.entry("writable", boolean: false) }
                        }
                    }
                }
            }
            writer.array(of: "(sa{sv})", alignment: 8) { items in
                for definition in shapes.all {
                    items.structure { item in
                        item.string(definition.type.signature)
                        Self.writeMetadata(of: definition, perEntry: nil, to: &item)
                    }
                }
            }
        })
    }
}

/// The distinct definitions of one listing, each once, in the order first met, with the index
/// of each. Definitions that differ only in what `ListProperties` does not show (the key, the
/// creator) are one shape; strings compare by their bytes, as a client sees them (Swift's
/// `String ==` would make "é" and "e\u{301}" one).
struct ListingShapes {
    private(set) var all: [PropertyDefinition] = []
    private var indices: [Shape: UInt32] = [:]
    /// Neighbouring keys (a group's) mostly share their definition: checked before hashing.
    private var last: (shape: Shape, index: UInt32)?

    mutating func index(of definition: PropertyDefinition) -> UInt32 {
        let shape = Shape(definition: definition)
        if let last, last.shape == shape { return last.index }
        let index: UInt32
        if let known = indices[shape] {
            index = known
        } else {
            index = UInt32(all.count)
            indices[shape] = index
            all.append(definition)
        }
        last = (shape, index)
        return index
    }

    /// A definition compared by what its `ListProperties` metadata says.
    private struct Shape: Hashable {
        var definition: PropertyDefinition

        static func == (lhs: Shape, rhs: Shape) -> Bool {
            let a = lhs.definition, b = rhs.definition
            // Values compare by their bytes already (DBusValue's ==).
            return a.type == b.type && a.defaultValue == b.defaultValue && a.persistent == b.persistent
                && a.writable == b.writable && a.secret == b.secret && a.scope == b.scope
                && a.minimum == b.minimum && a.maximum == b.maximum && a.choices == b.choices
                && sameBytes(a.description, b.description) && sameBytes(a.source, b.source)
                && sameBytes(a.stateOf?.text, b.stateOf?.text)
                && (a.writers ?? []).elementsEqual(b.writers ?? []) { sameBytes($0, $1) } && (a.writers == nil) == (b.writers == nil)
        }

        func hash(into hasher: inout Hasher) {
            hasher.combine(definition.type)
            hasher.combine(definition.defaultValue)
            hasher.combine(definition.persistent)
            hasher.combine(definition.writable)
            hasher.combine(definition.secret)
            hasher.combine(definition.description.utf8.count)
        }

        private static func sameBytes(_ a: String?, _ b: String?) -> Bool {
            guard let a, let b else { return a == nil && b == nil }
            return a.utf8.elementsEqual(b.utf8)
        }
    }
}

/// Whether a listing's caller may write, decided once per distinct `writers` list: a name in it
/// is a lookup in the accounts, and a listing's keys mostly share a few lists.
struct WriterDecisions {
    private var answers: [[String]?: Bool] = [:]

    /// `decide(writers)`, remembered for the rest of the listing.
    mutating func mayWrite(_ writers: [String]?, _ decide: ([String]?) -> Bool) -> Bool {
        if let known = answers[writers] { return known }
        let answer = decide(writers)
        answers[writers] = answer
        return answer
    }
}
