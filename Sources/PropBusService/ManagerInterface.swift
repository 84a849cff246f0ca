import DBus
import PropBus

extension Service {
    /// `org.propbus.PropBus1.Manager` on the root object.
    func managerDescription() -> InterfaceDescription {
        InterfaceDescription(Self.managerInterface, methods: [
            MethodDescription("CreateProperty", in: [("key", "s"), ("type", "s"), ("default", "v"), ("options", "a{sv}")]) { [unowned self] call throws(DBusError) in
                let args = call.arguments
                try authorizeCreate(args[0].stringValue ?? "", by: call)
                let changes = try bridged { () throws(PropBusError) in
                    try model.create(key: args[0].stringValue ?? "", type: args[1].stringValue ?? "",
                                     defaultValue: args[2], options: args[3].stringKeyedEntries ?? [:])
                }
                publish(changes)
                return .reply([])
            },
            MethodDescription("DeleteProperty", in: [("key", "s")]) { [unowned self] call throws(DBusError) in
                try authorizeWrite(existing: call.arguments[0].stringValue ?? "", by: call)
                publish(try bridged { () throws(PropBusError) in try model.delete(key: call.arguments[0].stringValue ?? "") })
                return .reply([])
            },
            MethodDescription("ListProperties", in: [("prefix", "s")], out: [("properties", "a(ssva{sv})")]) { [unowned self] call in
                // Secret values are left out for callers who may not read them.
                let visible = model.list(prefix: call.arguments[0].stringValue ?? "").filter { mayRead($0.definition, by: call) }
                let items = visible.map { entry in
                    DBusValue.structure([
                        .string(entry.definition.key.text),
                        .string(entry.definition.type.signature),
                        .variant(entry.value),
                        Self.metadata(of: entry),
                    ])
                }
                return .reply([.array(of: .structure([.string, .string, .variant, .dictionary(key: .string, value: .variant)]), items)])
            },
            MethodDescription("Apply", in: [("set", "a{sv}"), ("reset", "as")]) { [unowned self] call throws(DBusError) in
                guard case .dictionary(_, _, let entries) = call.arguments[0], case .array(_, let resets) = call.arguments[1] else {
                    throw .invalidArgs("Apply expects (a{sv} set, as reset)")
                }
                let assignments = entries.map { ($0.key.stringValue ?? "", $0.value.unwrappingVariantOnce) }
                // Every key is checked before anything changes: one denial leaves all as it was.
                for (key, _) in assignments { try authorizeWrite(existing: key, by: call) }
                for reset in resets { try authorizeWrite(existing: reset.stringValue ?? "", by: call) }
                publish(try bridged { () throws(PropBusError) in
                    try model.apply(set: assignments, reset: resets.compactMap(\.stringValue))
                })
                return .reply([])
            },
        ] + bindingMethods() + commandMethods() + modelFileMethods(), properties: .fixed([
            PropertyDescription("Version", type: .string, changeSignal: .const) { .string(Self.version) },
            PropertyDescription("SkippedModelFiles", type: try! DBusType(parsing: "a(ss)"), changeSignal: .none) { [unowned self] in
                Self.skippedList(skippedModelFiles)
            },
        ]))
    }

    /// The metadata dictionary of `ListProperties`.
    static func metadata(of entry: PropertyModel.Entry) -> DBusValue {
        var items = entry.definition.metadata
        items["is_set"] = .boolean(entry.storedValue != nil)
        items["revision"] = .uint64(entry.revision)
        if let hidden = entry.hidden {
            // Kept in the store, unseen: say so, and why, so nobody thinks it lost. An older
            // version's value may be too deep to send back: shown, it would fail the whole reply.
            if PropertyDefinition.canSendBack(hidden.value) { items["hidden_value"] = hidden.value }
            items["hidden_reason"] = .string(hidden.reason)
        }
        return .vardict(items)
    }
}
