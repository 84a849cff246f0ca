import DBus
import Dispatch
import Etcd
import Glibc
import PropBus
import PropBusService
import Synchronization
import SystemKit

extension Fleet {
    /// The snapshot as events: every key it holds, and a deletion at its revision for every key
    /// the mirror has that it lacks. Returns whether it was committed.
    ///
    /// `replacing`: the mirror belongs to another fleet (another prefix or cluster), whose
    /// revisions mean nothing here. Every key it had from that fleet and this one lacks goes, and
    /// this fleet's keys are applied whatever the old revisions say; keys never in any fleet
    /// (declared here) stay, and are offered to this one.
    ///
    /// `rewound`: etcd went back in time (``rewound(_:)``); its revisions started again, so the
    /// mirror's mean nothing and the cursor goes back to the snapshot's. Every key etcd holds is
    /// applied as it holds it; a fleet key it lacks keeps this host's definition (offered to etcd
    /// again once watching, by ``pushLocalDefinitions()``: the first host's offer wins) and loses
    /// its value, which no host can prove was the fleet's last.
    func applySnapshot(_ response: RangeResponse, replacing: Bool = false, rewound: Bool = false) -> Bool {
        let revision = response.header.revision
        var events = response.kvs.map { WatchEvent(kind: .put, kv: $0) }
        let present = Set(response.kvs.map(\.key))
        let kept = revisions
        if rewound {
            for entry in service.model.list() where entry.definition.scope == .fleet && entry.storedValue != nil {
                let key = entry.definition.key
                if !present.contains(layout.valueKey(key)) {
                    events.append(WatchEvent(kind: .delete, kv: KeyValue(key: layout.valueKey(key), modRevision: revision)))
                }
            }
            let keptCursor = cursor
            for key in revisions.keys { service.model.storeChanges.removeExternalRevisions(for: key) }
            revisions = [:]
            cursor = revision
            guard apply(events, through: revision, snapshot: true) else {
                revisions = kept
                cursor = keptCursor
                return false
            }
            // Saved even when nothing changed here (an empty etcd, no values): a restart resumes
            // from etcd's revision, not the old one.
            let forgotten = revisions.filter { $0.value.value <= 0 && $0.value.definition <= 0 }.map(\.key)
            for key in forgotten { service.model.storeChanges.removeExternalRevisions(for: key) }
            service.model.storeChanges.saveExternalCursor(cursor)
            if service.commit() == nil {
                for key in forgotten { revisions[key] = nil }
                cursorUnsaved = false
            }
            announceRevision()
            return true
        }
        for (key, known) in revisions.sorted(by: { $0.key < $1.key }) {
            if (replacing ? known.definition != 0 : known.definition > 0), !present.contains(layout.definitionKey(key)) {
                events.append(WatchEvent(kind: .delete, kv: KeyValue(key: layout.definitionKey(key), modRevision: revision)))
            }
            if (replacing ? known.value != 0 : known.value > 0), !present.contains(layout.valueKey(key)) {
                events.append(WatchEvent(kind: .delete, kv: KeyValue(key: layout.valueKey(key), modRevision: revision)))
            }
        }
        if replacing {
            for key in revisions.keys { service.model.storeChanges.removeExternalRevisions(for: key) }
            revisions = [:]
        }
        // A value the fleet does not hold, of a key it defines, was written here while the
        // daemon ran without --fleet: the fleet's state (no value) wins. (A key the fleet does not
        // define at all is offered to it instead: pushLocalDefinitions.)
        for entry in service.model.list() where entry.definition.scope == .fleet && entry.storedValue != nil {
            let key = entry.definition.key
            if (revisions[key]?.value ?? 0) <= 0, present.contains(layout.definitionKey(key)), !present.contains(layout.valueKey(key)) {
                events.append(WatchEvent(kind: .delete, kv: KeyValue(key: layout.valueKey(key), modRevision: revision)))
            }
        }
        guard apply(events, through: revision, snapshot: true) else {
            if replacing { revisions = kept }
            return false
        }
        // Deletions are remembered so that an older change arriving late is recognised; after a
        // full read at R and a watch from R + 1 none can come, so they are forgotten here.
        let forgotten = revisions.filter { $0.value.value <= 0 && $0.value.definition <= 0 }.map(\.key)
        guard !forgotten.isEmpty else { return true }
        for key in forgotten { service.model.storeChanges.removeExternalRevisions(for: key) }
        // With the cursor: a replay from an older one could bring a forgotten key back.
        service.model.storeChanges.saveExternalCursor(cursor)
        if service.commit() == nil {
            for key in forgotten { revisions[key] = nil }
            cursorUnsaved = false
        }
        return true
    }

    /// Applies changes from etcd as one round: definitions first, then values (spread through
    /// bindings into local keys only), then removed definitions; one commit with the revisions
    /// and, with `through`, the cursor; then signals.
    ///
    /// A `snapshot` (a full read at one revision) is etcd's whole state: its changes are applied
    /// also at the revision the mirror already holds, so what this host changed while it ran
    /// without `--fleet` gives way to the fleet's (equal values change nothing).
    ///
    /// Returns whether the changes were committed (or there was nothing to commit).
    @discardableResult
    func apply(_ events: [WatchEvent], through revision: Int64?, snapshot: Bool = false) -> Bool {
        // This round's commit would take the answers applied before it: theirs comes first, so
        // each call is answered by the commit that holds its write.
        commitAnswers()
        let model = service.model
        noteLifetimes(events, snapshot: snapshot)
        defer { forgetEndedLifetimes() }
        // Only etcd's data in this commit (nothing local was waiting): it need not wait for the disk.
        let mirrorOnly = !model.storeChanges.hasOwnWrites
        var updated: [Key: FleetRevisions] = [:]
        func known(_ key: Key) -> FleetRevisions { updated[key] ?? revisions[key] ?? FleetRevisions() }
        // Newer than what the mirror holds (deletions are negative); a snapshot also applies
        // what it holds at the same revision.
        func isNew(_ modRevision: Int64, over held: Int64) -> Bool {
            modRevision > abs(held) || (snapshot && modRevision == abs(held))
        }
        var changes: [PropertyChange] = []
        var values: [(Key, DBusValue?)] = []
        // Who made each change, as etcd's value or definition says, or for a deletion the
        // deleter record of its transaction (history).
        var origins: [Key: WriteSet.Origin] = [:], deletedBy: [Key: WriteSet.Origin] = [:]
        let deleters = layout.deleters(in: events)
        func origin(_ caller: WriteSet.Caller?) -> WriteSet.Origin { .fleet(host: caller?.host, caller: caller) }
        model.origin = .fleet(host: nil, caller: nil)
        defer { model.origin = .daemon }
        var removed: [Key] = []
        var valuesNotFromEtcd: Set<Key> = []
        // Definitions before values whatever the order: a txn that creates a key with a value
        // holds both, and the value needs the definition.
        // Each key classified once: it is on the path of every remote change's signal.
        let classified = events.map { (event: $0, path: layout.classify($0.kv.key)) }
        let ordered = classified.filter { if case .definition = $0.path { true } else { false } }
            + classified.filter { if case .definition = $0.path { false } else { true } }
        // A definition that changes a key's value spreads through this host's bindings into local
        // keys only, as values do (below): a fleet↔fleet binding ran on the writing host, if
        // anywhere, and a write of another fleet key here would change it on this host only.
        // Also the keys this update defines: they are fleet keys once applied.
        var definedHere: Set<Key> = []
        for item in classified { if case .definition(let key) = item.path { definedHere.insert(key) } }
        var boundFleetKeys: Set<Key> = []
        for binding in definedHere.isEmpty ? [] : model.bindings.all {
            for end in [binding.key, binding.to] where definedHere.contains(end) || model.entry(for: end)?.definition.scope == .fleet {
                boundFleetKeys.insert(end)
            }
        }
        for (event, path) in ordered {
            let modRevision = event.kv.modRevision
            switch path {
            case .definition(let key):
                var revisions = known(key)
                guard isNew(modRevision, over: revisions.definition) else { continue }
                if event.kind == .delete {
                    // The value has its own deletion (the same txn deletes both).
                    revisions.definition = -modRevision
                    updated[key] = revisions
                    removed.append(key)
                    deletedBy[key] = origin(deleters[modRevision])
                    continue
                }
                if let existing = model.entry(for: key), revisions.definition == 0 {
                    noteFirstDefinition(of: key, replacing: existing, with: event.kv.value, at: modRevision)
                    // A value the mirror never had from etcd is this host's own (a model file's
                    // "value"): the fleet's stands, its value or none (below, unless this update has one).
                    if revisions.value == 0, existing.storedValue != nil { valuesNotFromEtcd.insert(key) }
                }
                revisions.definition = modRevision
                updated[key] = revisions
                do throws(PropBusError) {
                    let (type, defaultValue, options) = try FleetLayout.decodeDefinition(event.kv.value, key: key)
                    if let existing = model.entry(for: key), existing.definition.type.signature != type {
                        changes += try model.delete(key: key.text)
                    }
                    model.origin = origin(FleetLayout.definitionCaller(event.kv.value))
                    defer { model.origin = origin(nil) }
                    changes += try model.create(key: key.text, type: type, defaultValue: defaultValue, options: options, holding: boundFleetKeys)
                } catch {
                    Service.log("fleet: the definition of \(key) at etcd revision \(modRevision) cannot be applied: \(error.message)")
                }
            case .value(let key):
                var revisions = known(key)
                guard isNew(modRevision, over: revisions.value) else { continue }
                revisions.value = event.kind == .put ? modRevision : -modRevision
                updated[key] = revisions
                if event.kind == .delete {
                    values.append((key, nil))
                    origins[key] = origin(deleters[modRevision])
                } else {
                    do throws(PropBusError) {
                        let (value, caller) = try FleetLayout.decodeAttributedValue(event.kv.value, reusing: &lastAttribution)
                        values.append((key, value))
                        origins[key] = origin(caller)
                    } catch {
                        Service.log("fleet: the value of \(key) at etcd revision \(modRevision) cannot be read: \(error.message)")
                    }
                }
            case .host, .other:
                continue
            }
        }
        if updated.values.contains(where: { $0.definition > 0 }) { changes += endBindingsOfStateToFleetKeys() }
        for key in valuesNotFromEtcd where !values.contains(where: { $0.0 == key }) { values.append((key, nil)) }
        // A key this host defines as local is not the fleet's, whatever etcd holds under its name.
        values.removeAll { model.entry(for: $0.0)?.definition.scope != .fleet }
        removed.removeAll { model.entry(for: $0)?.definition.scope != .fleet }
        if !values.isEmpty {
            // Only a bound key can be reached by propagation: the bindings' fleet ends are enough.
            var fleetKeys: Set<Key> = []
            for binding in model.bindings.all {
                for end in [binding.key, binding.to] where model.entry(for: end)?.definition.scope == .fleet { fleetKeys.insert(end) }
            }
            // One mirror per origin, so each change in history is its writer's.
            var runs: [(origin: WriteSet.Origin, values: [(Key, DBusValue?)])] = []
            for value in values {
                let origin = origins[value.0] ?? .fleet(host: nil, caller: nil)
                if runs.last?.origin == origin { runs[runs.count - 1].values.append(value) } else { runs.append((origin, [value])) }
            }
            for run in runs {
                model.origin = run.origin
                let (valueChanges, failures) = model.apply(remote: run.values, holding: fleetKeys)
                changes += valueChanges
                for (key, error) in failures { Service.log("fleet: the value of \(key) from etcd was not applied: \(error.message)") }
            }
            model.origin = .fleet(host: nil, caller: nil)
        }
        for key in removed where model.entry(for: key) != nil {
            // An ephemeral key whose etcd lease ended: history says so, as for a local one.
            model.origin = lifetimeEnding(of: key) ?? deletedBy[key] ?? origin(nil)
            do throws(PropBusError) { changes += try model.delete(key: key.text) } catch {
                Service.log("fleet: \(key), deleted in the fleet, cannot be deleted here: \(error.message)")
            }
        }
        let layered = applyLayerEvents(events, snapshot: snapshot, revision: revision, defined: definedHere)
        changes += layered.changes
        if updated.isEmpty, changes.isEmpty, !layered.touched {
            // Nothing new: this host's own writes coming back. The cursor is saved by a later
            // commit (or at ``stop()``) instead of costing one of its own; a crash before that
            // replays these changes, recognised again by their revisions.
            if let revision, revision > cursor {
                advanceCursor(to: revision)
                cursorUnsaved = true
            }
            return true
        }
        for (key, revisions) in updated { model.storeChanges.saveExternalRevisions(revisions, for: key) }
        if let revision { model.storeChanges.saveExternalCursor(max(revision, cursor)) }
        service.publish(changes)
        if mirrorOnly, !service.holdsCommits, definedHere.isEmpty, removed.isEmpty, changes.allSatisfy({ change in
            guard case .valueChanged(let key, _) = change else { return false }
            return model.entry(for: key)?.definition.scope == .fleet
        }) {
            // Only fleet keys' values, which etcd holds durably: announced now, committed right
            // after, so the signal does not wait for the store. A crash in between replays them
            // from the cursor this commit saves; a failed commit reads them again (below).
            service.holdsCommits = true
            service.tree.flushNow()
            service.holdsCommits = false
        }
        if mirrorOnly { model.storeChanges.durability = .replayable }
        if let error = service.commit() {
            // Nothing of it was kept: read it all again from etcd.
            Service.log("fleet: the changes up to etcd revision \(revision ?? 0) could not be committed (\(error.message)); reading them again")
            // The watch ends here: a later update's commit would carry the cursor past these
            // changes, and a host stopped before the full read would never apply them.
            watchGeneration += 1
            retireWatch()
            later(.now() + 1) { $0.resynchronize() }
            return false
        }
        revisions.merge(updated) { $1 }
        if let revision {
            advanceCursor(to: revision)
            cursorUnsaved = false
        }
        // The signals go out now, not after a round scheduled behind this update.
        service.tree.flushNow()
        return true
    }
}
