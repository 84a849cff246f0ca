import DBus
import Dispatch
import PropBus
import PropBusModelFiles
import PropBusService
import PropBusSystem

/// What this host's own declarations (model files, bindings) may do to fleet keys:
/// nothing that would change a fleet key on this host only.
///
/// Model files. A definition the fleet holds is changed
/// for the whole fleet (CreateProperty, `propctl create --scope fleet`, one etcd txn) or not at
/// all: a model file is read by one host, at each of its starts and reloads, so a declaration
/// that differs would change that host only (a fork), and a fleet-wide write at each load would
/// let hosts with two versions of a file (a rolling upgrade) overwrite each other's definition.
/// Such a file is refused, naming the key; a fleet key the fleet does not know yet is still
/// offered to it (``Fleet/pushLocalDefinitions()``).
extension FleetLayout {
    /// The model files' rule, for `ModelFileSet.shared`. `holdsDefinition(key)`: whether the
    /// mirror holds the fleet's definition of `key` (etcd has it).
    public static func sharedDefinitions(holdsDefinition: @escaping (Key) -> Bool) -> SharedDefinitions {
        SharedDefinitions(
            contains: { $0.scope == .fleet && holdsDefinition($0.key) },
            refusal: { current, declared in
                guard encodeDefinition(current) != encodeDefinition(declared) else { return nil }
                // The model file's error starts with the key already.
                return "this declaration differs from the fleet's definition of the key (\(differences(current, declared))); "
                    + "a model file cannot change a fleet key, which would change it on this host only: declare it as the fleet defines it, "
                    + "or change it for every host with propctl create --scope fleet (CreateProperty) and then edit the files"
            })
    }

    /// `field: fleet X, file Y` for each field of the definitions that differs.
    static func differences(_ fleet: PropertyDefinition, _ file: PropertyDefinition) -> String {
        var theirs = fleet.metadata, ours = file.metadata
        for local in ["source", "state_of"] {
            theirs[local] = nil
            ours[local] = nil
        }
        // Local is the default and is not listed: show it.
        theirs["scope"] = .string(fleet.scope.rawValue)
        ours["scope"] = .string(file.scope.rawValue)
        theirs["type"] = .string(fleet.type.signature)
        ours["type"] = .string(file.type.signature)
        let names = Set(theirs.keys).union(ours.keys).sorted()
        // A secret key's values (its default, choices, range) are not for everyone: the
        // refusal lands in SkippedModelFiles.
        let secret = fleet.secret || file.secret
        return names.compactMap { name in
            guard theirs[name] != ours[name] else { return nil }
            if secret, ["default", "choices", "minimum", "maximum"].contains(name) { return "\(name) differs (value refused)" }
            return "\(name): fleet \(theirs[name].map(ValueText.json) ?? "none"), file \(ours[name].map(ValueText.json) ?? "none")"
        }.joined(separator: "; ")
    }
}

extension Fleet {
    /// A key of this host that the fleet just defined is a fleet key now: a command's state must
    /// no longer drive it (it would change it here only), so such bindings end, logged.
    func endBindingsOfStateToFleetKeys() -> [PropertyChange] {
        let (ended, changes) = service.model.unbindStateDrivingFleetKeys()
        for (binding, reason) in ended {
            Service.log("fleet: ended binding \(binding.id) (\(binding.key) ↔ \(binding.to)): \(reason)")
        }
        return changes
    }

    /// Says so when the fleet's definition of `key`, arriving for the first time, replaces one a
    /// model file declared differently (the host read the file before it knew the fleet's key).
    func noteFirstDefinition(of key: Key, replacing existing: PropertyModel.Entry, with bytes: [UInt8], at revision: Int64) {
        guard let source = existing.definition.source, !FleetLayout.sameDefinition(FleetLayout.encodeDefinition(existing.definition), bytes) else { return }
        Service.log("fleet: \(key): the fleet's definition (etcd revision \(revision)) replaces the one model file \(source) declares; "
            + "that file is refused at its next load until it declares \(key) as the fleet does")
    }

    /// Whether the mirror holds the fleet's definition of `key` (etcd has it).
    public func holdsDefinition(of key: Key) -> Bool {
        dispatchPrecondition(condition: .onQueue(queue))
        return (revisions[key]?.definition ?? 0) > 0
    }
}
