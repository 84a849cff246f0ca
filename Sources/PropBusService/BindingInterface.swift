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
            MethodDescription("Bind", in: [("key", .string), ("to", .string), ("options", .dictionary(key: .string, value: .variant))], out: [("binding", .objectPath)], writes: true,
                              access: .custom { [unowned self] call throws(DBusError) in
                                  try authorizeBind(key: try call.string("key"), to: try call.string("to"),
                                                    options: try call.dictionary("options"), by: call)
                              }) { [unowned self] call throws(DBusError) in
                let key = try call.string("key"), to = try call.string("to"), bindOptions = try call.dictionary("options")
                let sender = call.sender
                // A first sync that writes a key of the gate's goes through it first; the binding is
                // made (again) once that value is in (rerunAfterCommit), and that run's binding is the reply.
                return try write(call, rerunAfterCommit: true) { [unowned self] () throws(PropBusError) in
                    let result = try model.bind(key: key, to: to, options: bindOptions, owner: sender,
                                                principal: call.credentials?.userID, maximumPerOwner: options.maximumBindingsPerClient)
                    return WriteRun(changes: result.changes, reply: [.objectPath(Self.path(ofBinding: result.binding.id))])
                }
            },
            MethodDescription("Unbind", in: [("binding", .objectPath)], writes: true,
                              access: .custom { [unowned self] call throws(DBusError) in
                                  // An unknown binding passes: the handler reports it as it would to anyone.
                                  guard let id = Self.bindingID(atPath: try call.string("binding")), let binding = model.bindings[id] else { return }
                                  try authorizeUnbind(binding, by: call)
                              }) { [unowned self] call throws(DBusError) in
                let path = try call.string("binding")
                guard let id = Self.bindingID(atPath: path), model.bindings[id] != nil else {
                    throw .unknownObject("no binding at \(path)")
                }
                publish(try bridged { () throws(PropBusError) in try model.unbind(id) })
                return .reply([])
            },
            MethodDescription("ListBindings", out: [("bindings", .array(Self.bindingRow))]) { [unowned self] _ in
                .reply([.array(of: Self.bindingRow, model.bindings.all.map(bindingRow))])
            },
            // ListBindings past the message limit: a prefix, and pages that always fit.
            MethodDescription("ListBindingsPage", in: [("prefix", .string), ("after", .uint64), ("limit", .uint32)],
                              out: [("bindings", .array(Self.bindingRow)), ("next", .uint64)]) { [unowned self] call throws(DBusError) in
                let prefix = try call.string("prefix"), after = try call.uint64("after")
                let chosen = model.bindings.all.lazy.filter {
                    $0.id > after && ($0.key.text.hasPrefix(prefix) || $0.to.text.hasPrefix(prefix))
                }
                let page = Page(chosen, limit: try call.uint32("limit"), maximumMessageSize: model.limits.maximumMessageSize, row: bindingRow)
                return page.reply(rowType: Self.bindingRow, cursor: .uint64(page.last?.id ?? 0))
            },
        ]
    }
}

extension Service {
    /// One row of `ListBindings`: path, key, to, options.
    static let bindingRow = DBusType.structure([.objectPath, .string, .string, .dictionary(key: .string, value: .variant)])

    func bindingRow(_ binding: Binding) -> DBusValue {
        .structure([.objectPath(Self.path(ofBinding: binding.id)), .string(binding.key.text), .string(binding.to.text),
                    .vardict(bindingOptions(binding))])
    }

    /// A binding's `ListBindings` options: its own, with `state` ("active" or "suspended") and,
    /// when suspended, the `reason` (which names keys and uids, never a value).
    func bindingOptions(_ binding: Binding) -> [String: DBusValue] {
        var options = binding.options
        let reason = model.bindings.suspension(of: binding.id)
        options["state"] = .string(reason == nil ? "active" : "suspended")
        if let reason { options["reason"] = .string(reason) }
        return options
    }
}
