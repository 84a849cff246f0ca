import DBus
import PropBus
import PropBusModelFiles

extension Service {
    /// `Lock(s key, v value, as for)` and `Unlock(s key)` of the Manager: the administrator's
    /// locks of local keys, kept in `CONFIG/mandatory.d/50-propctl.json` (``ManagedLayerFile``).
    ///
    /// The daemon writes the file itself (durably, under a lock on the directory) and applies
    /// just that file's change, in the call's round, with the caller as its origin: history and
    /// `propctl watch --origin` name who locked or unlocked, and nothing else is read again (a
    /// reload reads every model and layer file). For privileged callers only (root, and
    /// propbusd's own user where callers are checked), as the files of `mandatory.d` are.
    func lockMethods() -> [MethodDescription] {
        let access = MethodAccess.custom { [unowned self] call throws(DBusError) in
            guard !options.access.isPrivileged(call.credentials) else { return }
            let key = (try? call.string("key")) ?? ""
            throw PropBusError(.accessDenied, "\(AccessPolicy.describe(call.credentials)) may not lock or unlock \(key): only root and propbusd's own user may (the locks are files of mandatory.d)").dbusError
        }
        return [
            MethodDescription("Lock", in: [("key", .string), ("value", .variant), ("for", .array(.string))], writes: true,
                              access: access) { [unowned self] call throws(DBusError) in
                let text = try call.string("key")
                let target = try bridged { () throws(PropBusError) in try LayerEntry.Target(parsing: text) }
                let value = try call.argument("value").unwrappingVariantOnce
                let names = try call.strings("for")
                let json = try bridged { () throws(PropBusError) in
                    try LockRequest.checked(value, for: target, lockedFor: names, in: model)
                }
                return try editManagedLayerFile(call, target: target, value: json, lockedFor: names.isEmpty ? nil : names)
            },
            MethodDescription("Unlock", in: [("key", .string)], writes: true, access: access) { [unowned self] call throws(DBusError) in
                let text = try call.string("key")
                let target = try bridged { () throws(PropBusError) in try LayerEntry.Target(parsing: text) }
                return try editManagedLayerFile(call, target: target, value: nil, lockedFor: nil)
            },
        ]
    }

    /// Writes the entry of `target` into the managed file (or removes it, `value` `nil`) and
    /// puts the file's new entries in force with the call as the origin of what they change.
    private func editManagedLayerFile(_ call: MethodCall, target: LayerEntry.Target, value: JSONValue?, lockedFor: [String]?) throws(DBusError) -> MethodResult {
        guard let directory = options.configDirectory, !directory.isEmpty else {
            throw PropBusError(.invalidArgs, "this propbusd has no configuration directory (--config-dir) to keep locks in").dbusError
        }
        let file = ManagedLayerFile(configDirectory: directory)
        // The file first: it is what a restart or a reload reads. If the round's commit then
        // fails, the next reload puts the file's entry in force.
        let contents = try bridged { () throws(PropBusError) in try file.update(target.text, to: value, lockedFor: lockedFor) }
        let files = model.layerFiles.replacingMandatoryFile(file.path, entries: contents.entries, problems: contents.problems)
        let applied = model.applyLayerFiles(files, origin: origin(of: call))
        publish(applied.changes)
        announceLayerChange(lockChanged: applied.lockChanged)
        return .reply([])
    }
}

/// What a `Lock` call asks, checked before anything is written: the value as a layer file
/// holds it (JSON), refused when a key it would lock cannot take it.
enum LockRequest {
    /// `value` as JSON for the file, after checking it against `target`'s key (which must not be
    /// a fleet key or a command's state), or against every local key of the group a prefix
    /// names now (keys created later that refuse it skip it, as a file's entry is skipped), and
    /// `lockedFor`'s names.
    static func checked(_ value: DBusValue, for target: LayerEntry.Target, lockedFor names: [String],
                        in model: PropertyModel) throws(PropBusError) -> JSONValue {
        if let bad = names.first(where: { $0.isEmpty || $0 == "@" }) {
            throw PropBusError(.invalidArgs, "\"for\" of the lock of \(target.text) names \"\(bad)\"; expected user names, uids, @group or @gid")
        }
        let json = ValueText.jsonValue(value)
        switch target {
        case .key(let key):
            guard let definition = model.definition(for: key) else { return json }
            if definition.scope == .fleet {
                throw PropBusError(.invalidArgs, "\(key) is a fleet key, whose value is the fleet's on every host: lock it with propctl lock \(key) VALUE --fleet (Manager.SetFleetLayer)")
            }
            if let command = definition.stateOf {
                throw PropBusError(.invalidArgs, "\(key) is the state of command \(command), which only its executions change: it cannot be locked")
            }
            try check(json, against: definition, as: value, maximumSize: model.limits.maximumValueSize)
        case .prefix(let prefix):
            var refusal: PropBusError?
            model.forEachEntry(withPrefix: prefix) { entry in
                let definition = entry.definition
                guard refusal == nil, definition.scope != .fleet, definition.stateOf == nil else { return }
                do throws(PropBusError) { try check(json, against: definition, as: nil, maximumSize: model.limits.maximumValueSize) } catch {
                    refusal = PropBusError(error.code, "the lock of \(target.text) would give \(definition.key) a value it refuses: \(error.message)")
                }
            }
            if let refusal { throw refusal }
        }
        return json
    }

    /// Whether `definition` takes `json` as a layer file's value (typed as a reload types it);
    /// with `sent`, also that the file's JSON reads back as the value sent.
    private static func check(_ json: JSONValue, against definition: PropertyDefinition, as sent: DBusValue?, maximumSize: Int) throws(PropBusError) {
        let typed: DBusValue
        do { typed = try ValueText.value(from: json, as: definition.type) } catch {
            throw PropBusError(.invalidArgs, "\(definition.key) has type '\(definition.type.signature)' (\(definition.type.name)): \(error.withoutValue)")
        }
        if let sent, sent.type != definition.type {
            throw PropBusError(.invalidArgs, "property \(definition.key) has type '\(definition.type.signature)', got '\(sent.signature)'")
        }
        try definition.check(typed, maximumSize: maximumSize)
        if let sent, typed != sent {
            throw PropBusError(.invalidValue, "the value for \(definition.key) cannot be written to a layer file as it is (JSON would change it)")
        }
    }
}
