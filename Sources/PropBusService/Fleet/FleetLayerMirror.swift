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
    public func layerKey(_ kind: FleetLayerKind, _ key: Key) -> [UInt8] {
        layersPrefix + Array("\(kind.rawValue)/".utf8) + Array(key.text.utf8)
    }

    /// Every fleet layer's etcd key starts with it.
    public var layersPrefix: [UInt8] { prefix + Array("layers/".utf8) }

    /// Which fleet layer `etcdKey` is, if it is one (``classify(_:)`` calls them `.other`).
    public func classifyLayer(_ etcdKey: [UInt8]) -> (kind: FleetLayerKind, key: Key)? {
        guard etcdKey.starts(with: layersPrefix) else { return nil }
        let rest = String(decoding: etcdKey[layersPrefix.count...], as: UTF8.self)
        for kind in FleetLayerKind.allCases where rest.hasPrefix(kind.rawValue + "/") {
            return (try? Key(String(rest.dropFirst(kind.rawValue.count + 1)))).map { (kind, $0) }
        }
        return nil
    }

    /// A fleet layer's entry as etcd holds it: ValueCodec bytes of an `a{sv}` with `value` (v),
    /// `for` (as, a mandatory value's principals, as a mandatory file's `"for"`; absent: everyone
    /// but privileged callers) and `by` (a{sv}: who wrote it, as a fleet value's attribution, with
    /// `via` and `time`).
    public static func encodeLayer(_ value: DBusValue, lockedFor: [String]?, attribution: WriteSet.Caller?, time: Int64) -> [UInt8] {
        var fields: [String: DBusValue] = ["value": value]
        if let lockedFor { fields["for"] = .array(of: .string, lockedFor.map { .string($0) }) }
        if let attribution {
            var by = attribution.fields
            by["via"] = .string(attribution.via)
            by["time"] = .int64(time)
            fields["by"] = .vardict(by)
        }
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
        let caller = fields["by"]?.stringKeyedEntries.map { by in
            let by = by.mapValues(\.unwrappingVariant)
            return WriteSet.Caller(via: by["via"]?.stringValue ?? "", fields: by)
        }
        return (value, lockedFor, caller)
    }
}

/// The fleet layers a host holds, from the watch and the full reads; pure (no model, no I/O),
/// owned by ``Fleet`` on the D-Bus queue. Not stored: a host reads them at every start
/// (``Fleet/readLayers(then:)``) and at every full read.
struct FleetLayerMirror: Sendable {
    /// One fleet layer of one key.
    struct Layer: Sendable, Equatable {
        var value: DBusValue
        var lockedFor: [String]?
        var caller: WriteSet.Caller?
        /// `fleet mandatory ETCDKEY`, `fleet default ETCDKEY`.
        var source: String
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

    private(set) var layers: [Key: Layers] = [:]
    /// The etcd `mod_revision` of each layer key applied (negative: deleted), so that a replay
    /// of older events after a full read changes nothing.
    private var revisions: [[UInt8]: Int64] = [:]

    /// Applies watch events (or, with `snapshot`, every layer key a full read at `revision`
    /// found: the layers it lacks are gone, and what it holds stands whatever revisions the
    /// mirror had). Events of other keys are passed over. Returns the
    /// keys whose layers changed, in order, and the entries that could not be read.
    mutating func apply(_ events: [WatchEvent], layout: FleetLayout, snapshot: Bool = false, revision: Int64 = 0) -> (changes: [Change], problems: [String]) {
        var changed: [Key: Change] = [:], order: [Key] = [], problems: [String] = []
        func note(_ key: Key, _ kind: FleetLayerKind, _ etcdKey: [UInt8], removed: Bool, caller: WriteSet.Caller?) {
            if changed[key] == nil { order.append(key) }
            let change = "\(kind.rawValue) \(String(decoding: etcdKey, as: UTF8.self))" + (removed ? " removed" : "")
            changed[key] = Change(key: key, layers: layers[key] ?? Layers(), change: change, caller: caller)
        }
        var present: Set<[UInt8]> = []
        for event in events {
            guard let (kind, key) = layout.classifyLayer(event.kv.key) else { continue }
            let etcdKey = event.kv.key, modRevision = event.kv.modRevision
            present.insert(etcdKey)
            let held = revisions[etcdKey] ?? 0
            // A full read is etcd's state at its revision, also after etcd went back in time
            // (its revisions started again); a watch event only counts if it is newer.
            guard snapshot || modRevision > abs(held) else { continue }
            var next = layers[key] ?? Layers()
            if event.kind == .delete {
                revisions[etcdKey] = -modRevision
                next[kind] = nil
            } else {
                revisions[etcdKey] = modRevision
                do throws(PropBusError) {
                    let (value, lockedFor, caller) = try FleetLayout.decodeLayer(event.kv.value)
                    next[kind] = Layer(value: value, lockedFor: kind == .mandatory ? lockedFor : nil, caller: caller, source: kind.source(etcdKey))
                } catch {
                    problems.append("the fleet layer \(String(decoding: etcdKey, as: UTF8.self)) at etcd revision \(modRevision) cannot be read: \(error.message)")
                    next[kind] = nil
                }
            }
            guard next != (layers[key] ?? Layers()) else { continue }
            layers[key] = next.mandatory == nil && next.defaults == nil ? nil : next
            note(key, kind, etcdKey, removed: next[kind] == nil, caller: next[kind]?.caller)
        }
        if snapshot {
            for (key, held) in layers.sorted(by: { $0.key < $1.key }) {
                var next = held
                for kind in FleetLayerKind.allCases where next[kind] != nil && !present.contains(layout.layerKey(kind, key)) {
                    next[kind] = nil
                    revisions[layout.layerKey(kind, key)] = -revision
                    note(key, kind, layout.layerKey(kind, key), removed: true, caller: nil)
                }
                layers[key] = next.mandatory == nil && next.defaults == nil ? nil : next
                if changed[key] != nil { changed[key]!.layers = next }
            }
        }
        return (order.compactMap { changed[$0] }, problems)
    }
}
