import DBus
import Etcd
import PropBus
import PropBusSystem

/// The fleet's own layers of its keys, as etcd holds them under the prefix:
///
/// - `PREFIX/layers/mandatory/KEY`: a **fleet-mandatory** value, which locks the key on every
///   host (at the position of `mandatory.d`);
/// - `PREFIX/layers/defaults/KEY`: a **fleet default**, at the position of the site's
///   `defaults.d`.
///
/// Each holds ``FleetLayout/encodeLayer(_:lockedFor:attribution:time:)`` bytes.
public enum FleetLayerKind: String, Sendable, CaseIterable {
    case mandatory
    case defaults

    /// How `describe`'s `layer_source` and a `Locked` error name an entry: `fleet mandatory
    /// ETCDKEY` or `fleet default ETCDKEY`.
    func source(_ etcdKey: [UInt8]) -> String {
        (self == .mandatory ? "fleet mandatory " : "fleet default ") + String(decoding: etcdKey, as: UTF8.self)
    }
}

extension FleetLayout {
    /// Where etcd holds `key`'s fleet layer of `kind`.
    public func layerKey(_ kind: FleetLayerKind, _ key: Key) -> [UInt8] { layerKey(kind, .key(key)) }

    /// Where etcd holds the fleet layer of `kind` of one key or of a group prefix
    /// (`PREFIX/layers/mandatory/GROUP.*`, as a mandatory.d file writes it).
    public func layerKey(_ kind: FleetLayerKind, _ target: LayerEntry.Target) -> [UInt8] {
        layersPrefix + Array("\(kind.rawValue)/".utf8) + Array(target.text.utf8)
    }

    /// Every fleet layer's etcd key starts with it.
    public var layersPrefix: [UInt8] { prefix + Array("layers/".utf8) }

    /// Which fleet layer `etcdKey` is, if it is one (``classify(_:)`` calls them `.other`).
    public func classifyLayer(_ etcdKey: [UInt8]) -> (kind: FleetLayerKind, target: LayerEntry.Target)? {
        guard etcdKey.starts(with: layersPrefix) else { return nil }
        let rest = String(decoding: etcdKey[layersPrefix.count...], as: UTF8.self)
        for kind in FleetLayerKind.allCases where rest.hasPrefix(kind.rawValue + "/") {
            return (try? LayerEntry.Target(parsing: String(rest.dropFirst(kind.rawValue.count + 1)))).map { (kind, $0) }
        }
        return nil
    }

    /// A fleet layer's entry as etcd holds it: ValueCodec bytes of an `a{sv}` with `value` (v),
    /// `for` (as, a mandatory value's principals, as a mandatory file's `"for"`; absent: everyone
    /// but privileged callers) and `by` (who wrote it: ``byField(_:time:)``, `ay`; an earlier
    /// host's `a{sv}` still reads).
    public static func encodeLayer(_ value: DBusValue, lockedFor: [String]?, attribution: WriteSet.Caller?, time: Int64) -> [UInt8] {
        var fields: [String: DBusValue] = ["value": value]
        if let lockedFor { fields["for"] = .array(of: .string, lockedFor.map { .string($0) }) }
        if let attribution { fields["by"] = byField(attribution, time: time) }
        return ValueCodec.encode(.vardict(fields))
    }

    /// A fleet layer's entry from etcd: its value, principals and writer.
    public static func decodeLayer(_ bytes: [UInt8]) throws(PropBusError) -> (value: DBusValue, lockedFor: [String]?, caller: WriteSet.Caller?) {
        let decoded: DBusValue
        do { decoded = try ValueCodec.decode(bytes) } catch {
            throw PropBusError(.invalidValue, "a fleet layer in etcd could not be read: \(error)")
        }
        guard let fields = decoded.stringKeyedEntries?.mapValues(\.unwrappingVariantOnce), let value = fields["value"] else {
            throw PropBusError(.invalidValue, "a fleet layer in etcd is not an a{sv} with a value")
        }
        var lockedFor: [String]?
        if let names = fields["for"] {
            guard case .array(_, let items) = names, case let strings = items.compactMap(\.stringValue), strings.count == items.count else {
                throw PropBusError(.invalidValue, "a fleet layer's \"for\" is not an array of strings")
            }
            lockedFor = strings
        }
        return (value, lockedFor, fields["by"].flatMap(caller(ofBy:)))
    }
}

/// The fleet layers a host holds, from the watch and the full reads; pure (no model, no I/O),
/// owned by ``Fleet`` on the D-Bus queue. Not stored: a host reads them at every start
/// (``Fleet/readLayers(then:)``) and at every full read.
///
/// An entry names one key or a group prefix (`GROUP.*`); a key's layer of each kind is its own
/// entry's, else the longest prefix's that matches it (a mandatory.d file's key entry wins over
/// its prefix entries alike), so a key the fleet defines later takes its group's at once.
struct FleetLayerMirror: Sendable {
    /// One fleet layer of one key.
    struct Layer: Sendable, Equatable {
        var value: DBusValue
        var lockedFor: [String]?
        var caller: WriteSet.Caller?
        /// `fleet mandatory ETCDKEY`, `fleet default ETCDKEY`.
        var source: String
        /// The entry's etcd key (a key's own, or its group prefix's).
        var etcdKey: String
    }

    /// Both layers of one key.
    struct Layers: Sendable, Equatable {
        var mandatory: Layer?
        var defaults: Layer?

        subscript(kind: FleetLayerKind) -> Layer? {
            get { kind == .mandatory ? mandatory : defaults }
            set { if kind == .mandatory { mandatory = newValue } else { defaults = newValue } }
        }
    }

    /// What a change did to one key's layers: what it holds now, and who changed it.
    struct Change: Sendable, Equatable {
        var key: Key
        var layers: Layers
        /// What the last change of this key was, for history's origin: `KIND ETCDKEY`, with
        /// ` removed` when it went; and who made it.
        var change: String
        var caller: WriteSet.Caller?
    }

    /// The layers in force for each key, resolved from the entries.
    struct Lookup: Sendable {
        fileprivate let entries: [LayerEntry.Target: Layers]
        fileprivate let prefixes: [String]

        /// `key`'s layers (`nil`: none).
        subscript(key: Key) -> Layers? {
            var layers = entries[.key(key)] ?? Layers()
            for kind in FleetLayerKind.allCases where layers[kind] == nil {
                // Longest first: the most specific group's.
                layers[kind] = prefixes.lazy.filter { key.text.hasPrefix($0) }.compactMap { entries[.prefix($0)]?[kind] }.first
            }
            return layers.mandatory == nil && layers.defaults == nil ? nil : layers
        }
    }

    /// The entries as etcd holds them, by what they name.
    private(set) var entries: [LayerEntry.Target: Layers] = [:]
    /// The group prefixes entries name, longest first; kept as prefix entries come and go (a
    /// full read of many key entries sorts nothing).
    private var prefixes: [String] = []
    /// The etcd `mod_revision` of each layer key applied (negative: deleted), so that a replay
    /// of older events after a full read changes nothing.
    private var revisions: [[UInt8]: Int64] = [:]

    /// Each key's layers in force.
    var layers: Lookup { Lookup(entries: entries, prefixes: prefixes) }

    /// Whether any entry names a group prefix (then every fleet key may hold layers).
    var hasPrefixes: Bool { !prefixes.isEmpty }

    /// The keys entries name one by one.
    var namedKeys: [Key] { entries.keys.compactMap { if case .key(let key) = $0 { key } else { nil } } }

    /// Applies watch events (or, with `snapshot`, every layer key a full read at `revision`
    /// found: the layers it lacks are gone, and what it holds stands whatever revisions the
    /// mirror had). Events of other keys are passed over; a deletion is attributed to the
    /// ``FleetLayout/deleterKey`` record of its revision. `keys` gives the fleet keys a group
    /// prefix names now (the ones defined later take it when they come). Returns the keys whose
    /// layers changed, in order, and the entries that could not be read.
    mutating func apply(_ events: [WatchEvent], layout: FleetLayout, snapshot: Bool = false, revision: Int64 = 0,
                        keys: (String) -> [Key] = { _ in [] }) -> (changes: [Change], problems: [String]) {
        var before: [Key: Layers?] = [:], order: [Key] = [], last: [Key: (change: String, caller: WriteSet.Caller?)] = [:]
        var problems: [String] = []
        let deleters = layout.deleters(in: events)
        func set(_ target: LayerEntry.Target, _ kind: FleetLayerKind, to layer: Layer?, etcdKey: [UInt8]) {
            var next = entries[target] ?? Layers()
            guard next[kind] != layer else { return }
            let affected: [Key]
            switch target {
            case .key(let key): affected = [key]
            case .prefix(let text): affected = keys(text).sorted()
            }
            let lookup = layers
            for key in affected where before[key] == nil {
                before[key] = .some(lookup[key])
                order.append(key)
            }
            next[kind] = layer
            let held = entries[target] != nil, holds = next.mandatory != nil || next.defaults != nil
            entries[target] = holds ? next : nil
            if case .prefix = target, held != holds {
                prefixes = entries.keys.compactMap { if case .prefix(let text) = $0 { text } else { nil } }
                    .sorted { $0.count != $1.count ? $0.count > $1.count : $0 < $1 }
            }
            let change = "\(kind.rawValue) \(String(decoding: etcdKey, as: UTF8.self))" + (layer == nil ? " removed" : "")
            for key in affected { last[key] = (change, layer?.caller ?? (layer == nil ? deleters[abs(revisions[etcdKey] ?? 0)] : nil)) }
        }
        var present: Set<[UInt8]> = []
        for event in events {
            guard let (kind, target) = layout.classifyLayer(event.kv.key) else { continue }
            let etcdKey = event.kv.key, modRevision = event.kv.modRevision
            present.insert(etcdKey)
            let held = revisions[etcdKey] ?? 0
            // A full read is etcd's state at its revision, also after etcd went back in time
            // (its revisions started again); a watch event only counts if it is newer.
            guard snapshot || modRevision > abs(held) else { continue }
            if event.kind == .delete {
                revisions[etcdKey] = -modRevision
                set(target, kind, to: nil, etcdKey: etcdKey)
            } else {
                revisions[etcdKey] = modRevision
                do throws(PropBusError) {
                    let (value, lockedFor, caller) = try FleetLayout.decodeLayer(event.kv.value)
                    set(target, kind, to: Layer(value: value, lockedFor: kind == .mandatory ? lockedFor : nil, caller: caller,
                                                  source: kind.source(etcdKey), etcdKey: String(decoding: etcdKey, as: UTF8.self)),
                        etcdKey: etcdKey)
                } catch {
                    problems.append("the fleet layer \(String(decoding: etcdKey, as: UTF8.self)) at etcd revision \(modRevision) cannot be read: \(error.message)")
                    set(target, kind, to: nil, etcdKey: etcdKey)
                }
            }
        }
        if snapshot {
            for (target, held) in entries.sorted(by: { $0.key.text < $1.key.text }) {
                for kind in FleetLayerKind.allCases where held[kind] != nil && !present.contains(layout.layerKey(kind, target)) {
                    revisions[layout.layerKey(kind, target)] = -revision
                    set(target, kind, to: nil, etcdKey: layout.layerKey(kind, target))
                }
            }
        }
        let lookup = layers
        var changes: [Change] = []
        for key in order {
            let now = lookup[key]
            guard now != before[key] ?? nil, let (change, caller) = last[key] else { continue }
            changes.append(Change(key: key, layers: now ?? Layers(), change: change, caller: caller))
        }
        return (changes, problems)
    }
}
