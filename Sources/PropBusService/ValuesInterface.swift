import DBus
import PropBus

extension Service {
    /// `org.propbus.PropBus1.Values` for one group: a D-Bus property per key, typed and
    /// introspected from the model, plus Reset, GetWithRevision and CompareAndSet.
    func valuesDescription(group: String) -> InterfaceDescription {
        let key = { (name: String) in group + "." + name }
        return InterfaceDescription(Self.valuesInterface, methods: [
            MethodDescription("Reset", in: [("name", "s")]) { [unowned self] call throws(DBusError) in
                try authorizeWrite(existing: key(call.arguments[0].stringValue ?? ""), by: call)
                publish(try bridged { () throws(PropBusError) in try model.reset(key(call.arguments[0].stringValue ?? "")) })
                return .reply([])
            },
            MethodDescription("GetWithRevision", in: [("name", "s")], out: [("value", "v"), ("revision", "t")]) { [unowned self] call throws(DBusError) in
                let entry = try bridged { () throws(PropBusError) in try model.entry(key(call.arguments[0].stringValue ?? "")) }
                try authorizeRead(entry.definition, by: call)
                return .reply([.variant(entry.value), .uint64(entry.revision)])
            },
            MethodDescription("CompareAndSet", in: [("name", "s"), ("revision", "t"), ("value", "v")], out: [("revision", "t")]) { [unowned self] call throws(DBusError) in
                guard case .uint64(let expected) = call.arguments[1] else { throw .invalidArgs("revision must be 't'") }
                try authorizeWrite(existing: key(call.arguments[0].stringValue ?? ""), by: call)
                let result = try bridged { () throws(PropBusError) in
                    try model.compareAndSet(key(call.arguments[0].stringValue ?? ""), expectedRevision: expected,
                                            to: call.arguments[2].unwrappingVariantOnce)
                }
                publish(result.changes)
                return .reply([.uint64(result.revision)])
            },
        ], properties: .dynamic(names: { [unowned self] in model.names(inGroup: group) }, lookup: { [unowned self] name in
            let key = Key(uncheckedGroup: group, name: name)
            guard let entry = model.entry(for: key) else { return nil }
            // Only a secret under access control is restricted: its changes are announced by
            // name (invalidated), since anyone may receive PropertiesChanged.
            let restricted = isRestricted(entry.definition)
            var description = PropertyDescription(
                name, type: entry.definition.type, access: entry.definition.writable ? .readwrite : .read,
                changeSignal: restricted ? .invalidates : .emits,
                get: { [unowned self] () throws(DBusError) in
                    guard let current = model.entry(for: key) else {
                        throw PropBusError(.unknownKey, "no property named \(key)").dbusError
                    }
                    return current.value
                },
                set: { [unowned self] value, call throws(DBusError) in
                    try authorizeWrite(existing: key.text, by: call)
                    if let current = model.entry(for: key), !current.definition.writable {
                        // Generic clients know the standard name only (D-Bus spec, Properties).
                        do throws(PropBusError) { _ = try model.set(key.text, to: value) } catch {
                            throw .propertyReadOnly(error.message)
                        }
                    }
                    publish(try bridged { () throws(PropBusError) in try model.set(key.text, to: value) })
                })
            if restricted {
                description.authorizeRead = { [unowned self] call throws(DBusError) in
                    try authorizeRead(existing: key.text, by: call)
                }
            }
            return description
        }), annotations: [("org.freedesktop.DBus.Property.EmitsChangedSignal", "true")])
    }
}
