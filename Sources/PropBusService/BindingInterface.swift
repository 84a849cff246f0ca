import DBus
import PropBus

extension Service {
    /// The object path of binding `id`.
    static func path(ofBinding id: UInt64) -> String { Key.rootPath + "/bindings/\(id)" }

    /// The binding id in an object path made by ``path(ofBinding:)``.
    static func bindingID(atPath path: String) -> UInt64? {
        let prefix = Key.rootPath + "/bindings/"
        guard path.hasPrefix(prefix) else { return nil }
        return UInt64(path.dropFirst(prefix.count))
    }

    /// `org.propbus.PropBus1.Binding`: a binding's fixed description, as read-only properties.
    func bindingDescription(_ binding: Binding) -> InterfaceDescription {
        func constant(_ name: String, _ value: DBusValue) -> PropertyDescription {
            PropertyDescription(name, type: value.type, changeSignal: .const) { value }
        }
        return InterfaceDescription(Self.bindingInterface, properties: .fixed([
            constant("Key", .string(binding.key.text)),
            constant("To", .string(binding.to.text)),
            constant("Direction", .string(binding.direction.rawValue)),
            constant("Persistent", .boolean(binding.persistent)),
            constant("ToKey", .string(binding.toKey?.text ?? "")),
            constant("ToTarget", .string(binding.toTarget?.text ?? "")),
            // A persistent binding has no owner: it does not end with the connection that made it.
            constant("Owner", .string(binding.persistent ? "" : binding.owner ?? "")),
        ]))
    }

    /// Bind, Unbind and ListBindings of the Manager interface.
    func bindingMethods() -> [MethodDescription] {
        [
            MethodDescription("Bind", in: [("key", "s"), ("to", "s"), ("options", "a{sv}")], out: [("binding", "o")]) { [unowned self] call throws(DBusError) in
                let args = call.arguments
                try authorizeBind(key: args[0].stringValue ?? "", to: args[1].stringValue ?? "",
                                  options: args[2].stringKeyedEntries ?? [:], by: call)
                let result = try bridged { () throws(PropBusError) in
                    try model.bind(key: args[0].stringValue ?? "", to: args[1].stringValue ?? "",
                                   options: args[2].stringKeyedEntries ?? [:], owner: call.sender,
                                   maximumPerOwner: options.maximumBindingsPerClient)
                }
                publish(result.changes)
                return .reply([.objectPath(Self.path(ofBinding: result.binding.id))])
            },
            MethodDescription("Unbind", in: [("binding", "o")]) { [unowned self] call throws(DBusError) in
                let path = call.arguments[0].stringValue ?? ""
                guard let id = Self.bindingID(atPath: path), let binding = model.bindings[id] else {
                    throw .unknownObject("no binding at \(path)")
                }
                try authorizeUnbind(binding, by: call)
                publish(try bridged { () throws(PropBusError) in try model.unbind(id) })
                return .reply([])
            },
            MethodDescription("ListBindings", out: [("bindings", "a(ossa{sv})")]) { [unowned self] _ in
                let items = model.bindings.all.map { binding in
                    DBusValue.structure([
                        .objectPath(Self.path(ofBinding: binding.id)), .string(binding.key.text), .string(binding.to.text),
                        .vardict(binding.options),
                    ])
                }
                return .reply([.array(of: .structure([.objectPath, .string, .string, .dictionary(key: .string, value: .variant)]), items)])
            },
        ]
    }
}
