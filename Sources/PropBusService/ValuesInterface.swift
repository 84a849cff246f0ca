import DBus
import PropBus

extension Service {
    /// `org.propbus.PropBus1.Values` for one group: a D-Bus property per key, typed and
    /// introspected from the model, plus Reset, GetWithRevision and CompareAndSet.
    func valuesDescription(group: String) -> InterfaceDescription {
        let key = { (name: String) in group + "." + name }
        return InterfaceDescription(Self.valuesInterface, methods: [
            MethodDescription("Reset", in: [("name", .string)], writes: true, access: .write(.argument("name", prefix: group + "."))) { [unowned self] call throws(DBusError) in
                let name = key(try call.string("name"))
                return try write(call) { [unowned self] () throws(PropBusError) in try model.reset(name) }
            },
            MethodDescription("GetWithRevision", in: [("name", .string)], out: [("value", .variant), ("revision", .uint64)], access: .read(.argument("name", prefix: group + "."))) { [unowned self] call throws(DBusError) in
                let name = key(try call.string("name"))
                let entry = try bridged { () throws(PropBusError) in try model.entry(name) }
                return .reply([.variant(entry.value), .uint64(entry.revision)])
            },
            MethodDescription("CompareAndSet", in: [("name", .string), ("revision", .uint64), ("value", .variant)], out: [("revision", .uint64)], writes: true, access: .write(.argument("name", prefix: group + "."))) { [unowned self] call throws(DBusError) in
                let name = key(try call.string("name")), expected = try call.uint64("revision"), value = try call.variant("value")
                return try write(call, compareAndSet: true, reply: { [unowned self] in [.uint64((try? Key(name)).flatMap { model.entry(for: $0)?.revision } ?? 0)] }) { [unowned self] () throws(PropBusError) in
                    try model.compareAndSet(name, expectedRevision: expected, to: value).changes
                }
            },
        ], properties: .computed(ComputedProperties(names: { [unowned self] in model.names(inGroup: group) }, lookup: { [unowned self] name in
            let key = Key(uncheckedGroup: group, name: name)
            guard let entry = model.entry(for: key) else { return nil }
            // Only a secret under access control is restricted: its changes are announced by
            // name (invalidated), since anyone may receive PropertiesChanged.
            let restricted = isRestricted(entry.definition)
            // Only for the general path (an empty interface name, introspection): Set on this
            // interface goes through the table's own `set`.
            let set = { [unowned self] (value: DBusValue, call: MethodCall) throws(DBusError) in
                guard try setValue(of: key, to: value, by: call) != nil else { throw PropBusError(.unknownKey, "no property named \(key)").dbusError }
            }
            var description = PropertyDescription(
                name, type: entry.definition.type, access: entry.definition.writable ? .readwrite : .read,
                changeSignal: restricted ? .invalidates : .emits,
                get: { [unowned self] () throws(DBusError) in
                    guard let current = model.entry(for: key) else {
                        throw PropBusError(.unknownKey, "no property named \(key)").dbusError
                    }
                    return current.value
                },
                set: set)
            // The closures below capture `set`, never `description`: a closure stored in the
            // description that captured the variable holding it would be a cycle, and this
            // runs per lookup (every PropertiesChanged of another kind of table, Introspect).
            description.deferrableSet = { [unowned self] value, call throws(DBusError) in
                guard let result = try setValue(of: key, to: value, by: call) else { throw PropBusError(.unknownKey, "no property named \(key)").dbusError }
                return result
            }
            if entry.definition.writable, entry.layers?.mandatoryInForce != nil {
                // A lock refuses some callers only: introspection tells each the truth.
                description.accessForCaller = { [unowned self] call in
                    guard let current = model.entry(for: key), model.isLocked(current, forUser: call.credentials?.userID) else { return .readwrite }
                    return .read
                }
            }
            if restricted {
                description.authorizeRead = { [unowned self] call throws(DBusError) in
                    try authorizeRead(existing: key.text, by: call)
                }
            }
            return description
        }, value: { [unowned self] name in
            // Get's hot path: one lookup, no description. A restricted key goes through
            // `lookup`, whose description carries the read check.
            guard let read = model.readableValue(for: Key(uncheckedGroup: group, name: name)),
                  !(read.secret && options.access.isEnabled) else { return nil }
            return read.value
        }, forEach: { [unowned self] visit in
            let restrictsSecrets = options.access.isEnabled
            for key in model.keys(inGroup: group) {
                guard let read = model.readableValue(for: key) else { continue }
                visit(key.name, read.value, read.secret && restrictsSecrets)
            }
        }, read: { [unowned self] name in
            // The flush's PropertiesChanged: the value, and whether only its name may be sent.
            guard let read = model.readableValue(for: Key(uncheckedGroup: group, name: name)) else { return nil }
            return (read.value, read.secret && options.access.isEnabled)
        }, set: { [unowned self] name, value, call throws(DBusError) in
            try setValue(of: Key(uncheckedGroup: group, name: name), to: value, by: call)
        })), annotations: [("org.freedesktop.DBus.Property.EmitsChangedSignal", "true")])
    }

    /// `Properties.Set` of `key`: checked, then written (or with a gate, routed through it);
    /// `nil` if there is no such key. Builds no description and, without a gate, no
    /// closure: the Set path runs for every write a client makes.
    func setValue(of key: Key, to value: DBusValue, by call: MethodCall) throws(DBusError) -> MethodResult? {
        guard let definition = model.definition(for: key) else { return nil }
        if options.access.isEnabled { try authorizeWrite(key.text, writers: definition.writers, by: call) }
        // Generic clients know the standard name only (D-Bus spec, Properties).
        if let refusal = PropertyModel.refusalToWrite(definition) { throw .propertyReadOnly(refusal.message) }
        guard gate == nil else {
            return try write(call) { [unowned self] () throws(PropBusError) in try model.set(key, to: value) }
        }
        model.origin = origin(of: call)
        defer { model.origin = .daemon }
        publish(try bridged { () throws(PropBusError) in try model.set(key, to: value) })
        return .reply([])
    }
}
