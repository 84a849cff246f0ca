import DBus
import Dispatch
import Etcd
import PropBus
import PropBusService
import PropBusSystem
import SystemKit

/// The fleet's layers (``FleetLayerKind``): a fleet-mandatory value and a fleet default per
/// fleet key, held in etcd, mirrored into every host's model as the key's
/// ``ValueLayers/fleetMandatory`` and ``ValueLayers/fleetDefault`` (docs/layers.md, "Fleet
/// keys"). They come with the watch like the rest of the prefix, in the same round as the
/// values of the same etcd revision; each start reads them (``readLayers(then:)``), and every
/// full read holds them.
extension Fleet {
    /// Where the layer writes wait for etcd: off the D-Bus queue, in order (one fleet per process).
    private static let layerQueue = DispatchQueue(label: "org.propbus.propbusd.fleet-layers")

    /// A layer write answered by etcd, whose call waits until this host applied it (so that the
    /// caller reads what it wrote here too).
    struct LayerWaiter {
        var id: UInt64
        var revision: Int64
        var call: MethodCall
    }

    /// Applies the fleet-layer events among `events` (a watch update, or with `snapshot` a full
    /// read at `revision`) to the mirror and the model, under the origin `fleet layer SOURCE`.
    /// The keys `defined` by the same update (their definitions were just applied, perhaps
    /// recreated) take the layers waiting for them; after a full read every key does, so a
    /// round that could not be committed loses nothing.
    ///
    /// Returns the changes to publish and whether the model was touched (a commit is needed
    /// even when no value changed: a lock alone changes writability).
    func applyLayerEvents(_ events: [WatchEvent], snapshot: Bool, revision: Int64?, defined: Set<Key>) -> (changes: [PropertyChange], touched: Bool) {
        let model = service.model
        // The fleet keys a group prefix names now (the ones defined later take it when they come).
        let fleetKeys = { (prefix: String) -> [Key] in
            var keys: [Key] = []
            model.forEachEntry(withPrefix: prefix) { entry in if entry.definition.scope == .fleet { keys.append(entry.definition.key) } }
            return keys
        }
        let (changed, problems) = layerMirror.apply(events, layout: layout, snapshot: snapshot, revision: revision ?? 0, keys: fleetKeys)
        for problem in problems { Service.log("fleet: \(problem)") }
        var items = changed.map { ($0.key, $0.layers, WriteSet.Origin.fleetLayer(change: $0.change, caller: $0.caller)) }
        let listed = Set(changed.map(\.key))
        // After a full read every key that holds a layer takes it again; with a group prefix
        // that may be any fleet key.
        let candidates = snapshot ? (layerMirror.hasPrefixes ? model.keys { $0.scope == .fleet } : layerMirror.namedKeys) : Array(defined)
        for key in Set(candidates).subtracting(listed).sorted() {
            guard let held = layerMirror.layers[key], let (kind, top) = held.mandatory.map({ (FleetLayerKind.mandatory, $0) }) ?? held.defaults.map({ (.defaults, $0) }) else { continue }
            items.append((key, held, .fleetLayer(change: "\(kind.rawValue) \(top.etcdKey)", caller: top.caller)))
        }
        guard !items.isEmpty else { return ([], false) }
        // Into local keys only, as the fleet's values spread: a bound fleet key changes with
        // its own layers on every host.
        let boundFleetKeys = model.boundKeys { $0.scope == .fleet }
        let applied = model.applyFleetLayers(items.map { key, layers, origin in
            (key, layers.mandatory.map { MandatoryValue(value: LayerValue(value: $0.value, source: $0.source), lockedFor: $0.lockedFor) },
             layers.defaults.map { LayerValue(value: $0.value, source: $0.source) }, origin)
        }, holding: boundFleetKeys)
        for problem in applied.problems { Service.log("fleet: \(problem)") }
        if !applied.lockChanged.isEmpty {
            service.tree.emitAtFlush(path: Key.rootPath, interface: Service.managerInterface, member: "LocksChanged",
                                     [.array(of: .string, applied.lockChanged.map { .string($0.text) })])
        }
        return (applied.changes, true)
    }

    /// Reads every fleet layer (a host starting with a cursor resumes its watch after it, so
    /// the layers set before would never come), applies them as one round, then runs `body`.
    /// The watch's replay of older layer events then changes nothing (their revisions are older).
    func readLayers(then body: @escaping () -> Void) {
        read(RangeRequest(key: layout.layersPrefix, prefix: true), failing: "cannot read the fleet layers from etcd",
             retry: { [weak self] in self?.readLayers(then: body) }) { [self] response in
            let events = response.kvs.map { WatchEvent(kind: .put, kv: $0) }
            let applied = applyLayerEvents(events, snapshot: true, revision: response.header.revision, defined: [])
            if applied.touched {
                service.publish(applied.changes)
                if let error = service.commit() {
                    Service.log("fleet: the fleet layers could not be committed here (\(error.message)); they apply again at the next full read")
                }
                service.tree.flushNow()
            }
            body()
        }
    }

    /// Answers the layer writes this host has now applied (the cursor reached their revision).
    func answerLayerWaiters() {
        guard layerWaiters.contains(where: { $0.revision <= cursor }) else { return }
        for waiter in layerWaiters where waiter.revision <= cursor { waiter.call.reply([]) }
        layerWaiters.removeAll { $0.revision <= cursor }
    }

    /// `SetFleetLayer` (`value` given) and `RemoveFleetLayer` of one key or of a group prefix
    /// (`GROUP.*`): one etcd transaction. For a key it compares the key's definition with the
    /// mirror's (so the value was checked against the definition etcd holds); a prefix's value is
    /// checked against every fleet key of the group here now (a key defined later with another
    /// type skips it, logged). A removal puts who made it in ``FleetLayout/deleterKey`` in the
    /// same transaction, for every host's history. Answered once this host applied it from the
    /// watch, or after the request timeout if the watch is slower (etcd has it: every host
    /// applies it when its watch brings it).
    func writeLayer(_ call: MethodCall, kind: FleetLayerKind, target: LayerEntry.Target, value: DBusValue?, lockedFor: [String]?) throws(PropBusError) -> MethodResult {
        let what = kind == .mandatory ? "mandatory value" : "default"
        let compares: [Compare]
        switch target {
        case .key(let key):
            guard let entry = service.model.entry(for: key), entry.definition.scope == .fleet else {
                throw PropBusError(.invalidArgs, "\(key) is not a fleet key (scope fleet): the fleet's layers apply to fleet keys only; a local key is locked by a mandatory.d file (propctl lock without --fleet)")
            }
            let definitionRevision = revisions[key]?.definition ?? 0
            guard state == .connected, definitionRevision > 0 else {
                throw PropBusError(.unavailable, "cannot change the fleet \(what) of \(key): "
                    + (definitionRevision > 0 ? "FleetState is \(state.rawValue)" : "etcd does not hold its definition yet"))
            }
            if let value { try entry.definition.check(value, maximumSize: service.model.limits.maximumValueSize) }
            compares = [.modRevision(of: layout.definitionKey(key), is: definitionRevision)]
        case .prefix(let prefix):
            guard state == .connected else {
                throw PropBusError(.unavailable, "cannot change the fleet \(what) of \(target.text): FleetState is \(state.rawValue)")
            }
            compares = []
            guard let value else { break }
            var problem: PropBusError?
            let maximumSize = service.model.limits.maximumValueSize
            service.model.forEachEntry(withPrefix: prefix) { entry in
                guard problem == nil, entry.definition.scope == .fleet else { return }
                do throws(PropBusError) { try entry.definition.check(value, maximumSize: maximumSize) } catch {
                    problem = PropBusError(error.code, "the fleet \(what) of \(target.text) does not fit fleet key \(entry.definition.key): \(error.message)")
                }
            }
            if let problem { throw problem }
        }
        let etcdKey = layout.layerKey(kind, target)
        let operations: [RequestOp]
        if let value {
            operations = [.put(etcdKey, FleetLayout.encodeLayer(value, lockedFor: lockedFor, attribution: attribution(of: call), time: Self.now()))]
        } else {
            guard layerMirror.entries[target]?[kind] != nil else {
                throw PropBusError(.invalidArgs, kind == .mandatory ? "\(target.text) has no fleet mandatory value (propctl lock \(target.text) VALUE --fleet)"
                                   : "\(target.text) has no fleet default (propctl lock \(target.text) VALUE --default --fleet)")
            }
            operations = [.delete(etcdKey)] + (attribution(of: call).map { [RequestOp.put(layout.deleterKey, FleetLayout.encodeDeleter($0, time: Self.now()))] } ?? [])
        }
        let client = client, pending = LoopBound(call, on: queue), timeout = client.requestTimeout
        let fleet = bound
        Self.layerQueue.async {
            let result = Result { () throws(EtcdError) in
                try client.txn(compares: compares, success: operations, failure: [], resendIfConnectionLost: true, timeout: timeout)
            }
            fleet.async { fleet in
                let call = pending.value
                switch result {
                case .failure(let error):
                    call.fail(PropBusError(.unavailable, "cannot write the fleet layer of \(target.text) to etcd: \(error.message)").dbusError)
                case .success(let response) where !response.succeeded:
                    call.fail(PropBusError(.conflict, "the definition of fleet key \(target.text) changed in the fleet meanwhile; try again").dbusError)
                case .success(let response):
                    guard response.header.revision > fleet.cursor else { return call.reply([]) }
                    let id = fleet.nextID
                    fleet.nextID += 1
                    fleet.layerWaiters.append(LayerWaiter(id: id, revision: response.header.revision, call: call))
                    // Bounded: etcd holds it, so a slow watch delays only this host's own view.
                    fleet.bound.async(after: .now() + .seconds(Int(max(1, timeout.components.seconds)))) { fleet in
                        guard let index = fleet.layerWaiters.firstIndex(where: { $0.id == id }) else { return }
                        fleet.layerWaiters.remove(at: index).call.reply([])
                    }
                }
            }
        }
        return .deferred
    }
}

extension FleetManagerMembers {
    /// `SetFleetLayer(s layer, s key, v value, as for)` and `RemoveFleetLayer(s layer, s key)`
    /// of the Manager (`key`: a fleet key or a group prefix `GROUP.*`): the fleet's mandatory
    /// values and defaults (docs/layers.md), for
    /// privileged callers only (root and propbusd's own user), as the files of `mandatory.d` are.
    func fleetLayerMethods() -> [MethodDescription] {
        [
            MethodDescription("SetFleetLayer", in: [("layer", .string), ("key", .string), ("value", .variant), ("for", .array(.string))], writes: true,
                              access: .custom { [unowned self] call throws(DBusError) in try authorizeFleetLayers(call) }) { [unowned self] call throws(DBusError) in
                let (fleet, kind, target) = try fleetLayerTarget(call)
                let value = try call.argument("value").unwrappingVariantOnce
                let names = try call.strings("for")
                if kind == .defaults, !names.isEmpty {
                    throw PropBusError(.invalidArgs, "a fleet default of \(target.text) locks nobody: \"for\" applies to the mandatory layer only").dbusError
                }
                if let bad = names.first(where: { $0.isEmpty || $0 == "@" }) {
                    throw PropBusError(.invalidArgs, "\"for\" of the fleet mandatory value of \(target.text) names \"\(bad)\"; expected user names, uids, @group or @gid").dbusError
                }
                return try bridged { () throws(PropBusError) in
                    try fleet.writeLayer(call, kind: kind, target: target, value: value, lockedFor: names.isEmpty ? nil : names)
                }
            },
            MethodDescription("RemoveFleetLayer", in: [("layer", .string), ("key", .string)], writes: true,
                              access: .custom { [unowned self] call throws(DBusError) in try authorizeFleetLayers(call) }) { [unowned self] call throws(DBusError) in
                let (fleet, kind, target) = try fleetLayerTarget(call)
                return try bridged { () throws(PropBusError) in try fleet.writeLayer(call, kind: kind, target: target, value: nil, lockedFor: nil) }
            },
        ]
    }

    /// The fleet's layers are every host's: only root and propbusd's own user change them.
    private func authorizeFleetLayers(_ call: MethodCall) throws(DBusError) {
        guard !access.isPrivileged(call.credentials) else { return }
        let key = (try? call.string("key")) ?? ""
        throw PropBusError(.accessDenied, "\(AccessPolicy.describe(call.credentials)) may not change the fleet layers of \(key): only root and propbusd's own user may").dbusError
    }

    /// The fleet, the layer and the key or group prefix (`GROUP.*`) a fleet-layer call names.
    private func fleetLayerTarget(_ call: MethodCall) throws(DBusError) -> (Fleet, FleetLayerKind, LayerEntry.Target) {
        guard let fleet else { throw PropBusError(.unavailable, "propbusd runs without --fleet: there is no fleet").dbusError }
        let layer = try call.string("layer")
        guard let kind = FleetLayerKind(rawValue: layer) else {
            throw PropBusError(.invalidArgs, "layer \"\(layer)\" is not a fleet layer; expected \"mandatory\" or \"defaults\"").dbusError
        }
        let text = try call.string("key")
        let target = try bridged { () throws(PropBusError) in try LayerEntry.Target(parsing: text) }
        return (fleet, kind, target)
    }
}
