import DBus
import PropBus

extension Service {
    /// `Manager.ListPropertiesCompact(s prefix)` → `(a(sa{sv}) shapes, a(suvtba{sv}) properties)`:
    /// what `ListProperties` says, with each distinct definition (type and definition metadata)
    /// said once, in `shapes`, and each property as its key, its shape's index, value,
    /// `revision`, `is_set` and the rest of its own metadata (`etcd_revision`, `hidden_*`).
    ///
    /// A listing's keys mostly share a few definitions, and the metadata repeated per key was
    /// three quarters of `ListProperties`' bytes (2 MB at 10k keys), which the bus relays and
    /// validates and the client reads: that, not the daemon, bounded the listing's time.
    func listPropertiesCompact(_ call: MethodCall) throws(DBusError) -> MethodResult {
        let prefix = try call.string("prefix")
        return .stream(ReplyBody { [unowned self] writer in
            // Shapes come first in the reply and are known only once every row was seen: two
            // passes over the entries, the first noting each row's shape.
            var shapes = ListingShapes()
            var rowShapes: [UInt32] = []
            model.forEachEntry(withPrefix: prefix) { entry in
                guard mayRead(entry.definition, by: call) else { return }
                rowShapes.append(shapes.index(of: entry.definition))
            }
            writer.array(of: "(sa{sv})", alignment: 8) { items in
                for definition in shapes.all {
                    items.structure { item in
                        item.string(definition.type.signature)
                        Self.writeMetadata(of: definition, perEntry: nil, to: &item)
                    }
                }
            }
            var row = 0
            writer.array(of: "(suvtba{sv})", alignment: 8) { items in
                model.forEachEntry(withPrefix: prefix) { entry in
                    guard mayRead(entry.definition, by: call) else { return }
                    let shape = rowShapes[row]
                    row += 1
                    items.structure { item in
                        item.string(entry.definition.key.text)
                        item.value(.uint32(shape))
                        item.variant(entry.value)
                        item.uint64(entry.revision)
                        item.boolean(entry.storedValue != nil)
                        // The fleet's own table, not the model: nothing here may touch the model.
                        let etcdRevision = entry.definition.scope == .fleet ? fleet?.etcdRevision(of: entry.definition.key) : nil
                        item.dictionary("{sv}") { extra in
                            if let etcdRevision { extra.entry("etcd_revision", .int64(etcdRevision)) }
                            if let hidden = entry.hidden {
                                extra.entry("hidden_reason", string: hidden.reason)
                                if PropertyDefinition.canSendBack(hidden.value) { extra.entry("hidden_value", hidden.value) }
                            }
                        }
                    }
                }
            }
        })
    }
}

/// The distinct definitions of one listing, each once, in the order first met, with the index
/// of each. Definitions differ in their key alone are one shape; two compare by their bytes, as a
/// client sees them (Swift's `String ==` would make "é" and "e\u{301}" one).
struct ListingShapes {
    private(set) var all: [PropertyDefinition] = []
    private var indices: [Shape: UInt32] = [:]
    /// Neighbouring keys (a group's) mostly share their definition: checked before hashing.
    private var last: (shape: Shape, index: UInt32)?

    private static let anyKey = Key(uncheckedGroup: "", name: "")

    mutating func index(of definition: PropertyDefinition) -> UInt32 {
        var blank = definition
        blank.key = Self.anyKey
        // Not a `ListProperties` field: it must not tell shapes apart.
        blank.creator = nil
        let shape = Shape(definition: blank)
        if let last, last.shape == shape { return last.index }
        let index: UInt32
        if let known = indices[shape] {
            index = known
        } else {
            index = UInt32(all.count)
            indices[shape] = index
            all.append(blank)
        }
        last = (shape, index)
        return index
    }

    private struct Shape: Hashable {
        var definition: PropertyDefinition

        static func == (lhs: Shape, rhs: Shape) -> Bool {
            let a = lhs.definition, b = rhs.definition
            guard a == b else { return false }
            // Values already compare by their bytes; the metadata's own strings do not.
            return Self.sameBytes(a.description, b.description) && Self.sameBytes(a.source ?? "", b.source ?? "")
                && Self.sameBytes(a.stateOf?.text ?? "", b.stateOf?.text ?? "")
                && (a.writers ?? []).elementsEqual(b.writers ?? [], by: Self.sameBytes)
        }

        func hash(into hasher: inout Hasher) { hasher.combine(definition) }

        private static func sameBytes(_ a: String, _ b: String) -> Bool { a.utf8.elementsEqual(b.utf8) }
    }
}
