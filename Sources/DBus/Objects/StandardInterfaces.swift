import CDBus

/// Peer, Introspectable, Properties and ObjectManager, described once per tree like any other
/// interface; their handlers take the object path from the call.
///
/// A class: every routed call reads it, and a struct of four descriptions would be copied
/// (and each of their tables retained) at every read.
final class StandardInterfaces {
    let peer: InterfaceDescription
    let introspectable: InterfaceDescription
    let properties: InterfaceDescription
    let objectManager: InterfaceDescription

    init(tree: ObjectTree) {
        peer = Self.peer()
        introspectable = Self.introspectable(tree)
        properties = Self.properties(tree)
        objectManager = Self.objectManager(tree)
    }

    private static func peer() -> InterfaceDescription {
        InterfaceDescription("org.freedesktop.DBus.Peer", methods: [
            MethodDescription("Ping") { _ in .reply([]) },
            MethodDescription("GetMachineId", out: [("machine_uuid", .string)]) { _ throws(DBusError) in
                var error = CError()
                guard let raw = dbus_try_get_local_machine_id(&error.raw) else {
                    throw error.take(default: "cannot read the machine id")
                }
                defer { dbus_free(raw) }
                return .reply([.string(String(cString: raw))])
            },
        ])
    }

    private static func introspectable(_ tree: ObjectTree) -> InterfaceDescription {
        InterfaceDescription("org.freedesktop.DBus.Introspectable", methods: [
            MethodDescription("Introspect", out: [("xml_data", .string)]) { [unowned tree] call in
                .reply([.string(Introspection.xml(interfaces: tree.allInterfaces(at: call.path), children: tree.childNames(of: call.path), for: call))])
            },
        ])
    }

    private static func properties(_ tree: ObjectTree) -> InterfaceDescription {
        func find(_ call: MethodCall, _ tree: ObjectTree) throws(DBusError) -> InterfaceDescription {
            let name = try call.string("interface_name")
            guard let interface = tree.interface(named: name, at: call.path, object: tree.object(at: call.path)) else {
                throw .unknownInterface("No such interface '\(name)' at object path '\(call.path)'")
            }
            return interface
        }
        func property(_ call: MethodCall, _ tree: ObjectTree) throws(DBusError) -> PropertyDescription {
            let name = try call.string("property_name")
            if try call.string("interface_name").isEmpty {
                // An empty interface name means "whichever interface has it" (D-Bus spec).
                let own = tree.object(at: call.path)?.interfaces() ?? []
                guard let property = own.lazy.compactMap({ $0.properties.lookup(name) }).first else {
                    throw .unknownProperty("No such property '\(name)' at object path '\(call.path)'")
                }
                return property
            }
            let interface = try find(call, tree)
            guard let property = interface.properties.lookup(name) else {
                throw .unknownProperty("No such property '\(name)' on interface '\(interface.name)' at object path '\(call.path)'")
            }
            return property
        }
        /// `Set` straight through a computed table's writer, with no description built; `nil`
        /// when the general path must decide (another kind of table, no writer, no interface name).
        func fastSet(_ call: MethodCall, _ tree: ObjectTree) throws(DBusError) -> MethodResult? {
            let interfaceName = try call.string("interface_name")
            guard !interfaceName.isEmpty, let object = tree.object(at: call.path) else { return nil }
            let own = object.interfaces()
            guard let index = own.firstIndex(where: { $0.name == interfaceName }),
                  case .computed(let table) = own[index].properties, let set = table.set else { return nil }
            let name = try call.string("property_name")
            guard let result = try set(name, try call.variant("value"), call) else {
                throw .unknownProperty("No such property '\(name)' on interface '\(interfaceName)' at object path '\(call.path)'")
            }
            return result
        }
        return InterfaceDescription("org.freedesktop.DBus.Properties", methods: [
            MethodDescription("Get", in: [("interface_name", .string), ("property_name", .string)], out: [("value", .variant)]) { [unowned tree] call throws(DBusError) in
                // An unrestricted value of a computed table never gets here: the tree answers
                // that Get straight from the message (ObjectTree.answeredGet).
                let property = try property(call, tree)
                guard property.access != .write else {
                    throw DBusError(name: DBusError.Name.accessDenied, message: "Property '\(property.name)' is write-only")
                }
                try property.authorizeRead?(call)
                return .reply([.variant(try property.get())])
            },
            MethodDescription("Set", in: [("interface_name", .string), ("property_name", .string), ("value", .variant)], writes: true) { [unowned tree] call throws(DBusError) in
                if let result = try fastSet(call, tree) { return result }
                let property = try property(call, tree)
                guard let set = property.set else {
                    throw .propertyReadOnly("Property '\(property.name)' is not writable")
                }
                if let deferrable = property.deferrableSet { return try deferrable(try call.variant("value"), call) }
                try set(try call.variant("value"), call)
                return .reply([])
            },
            MethodDescription("GetAll", in: [("interface_name", .string)], out: [("props", .dictionary(key: .string, value: .variant))]) { [unowned tree] call throws(DBusError) in
                if try call.string("interface_name").isEmpty {
                    // An empty name means every interface, as GDBus and sd-bus treat it.
                    // A name two interfaces share is listed once, as a
                    // dictionary must: the first interface's value.
                    let interfaces = tree.allInterfaces(at: call.path)
                    return .stream(ReplyBody { writer in
                        writer.dictionary("{sv}") { dictionary in
                            var seen: Set<String>? = []
                            for interface in interfaces { tree.writeProperties(interface, for: call, to: &dictionary, seen: &seen) }
                        }
                    })
                }
                let interface = try find(call, tree)
                return .stream(ReplyBody { tree.writePropertyDictionary(interface, for: call, to: &$0) })
            },
        ], signals: [
            SignalDescription("PropertiesChanged", [("interface_name", .string), ("changed_properties", .dictionary(key: .string, value: .variant)), ("invalidated_properties", .array(.string))]),
        ])
    }

    private static func objectManager(_ tree: ObjectTree) -> InterfaceDescription {
        InterfaceDescription("org.freedesktop.DBus.ObjectManager", methods: [
            MethodDescription("GetManagedObjects", out: [("objpath_interfaces_and_properties", .dictionary(key: .objectPath, value: .dictionary(key: .string, value: .dictionary(key: .string, value: .variant))))]) { [unowned tree] call in
                let objects = tree.managedObjects(below: call.path)
                // Written straight into the reply: no dictionary per object and interface;
                // through a buffer, with no libdbus call per field.
                return .stream(ReplyBody(signature: "a{oa{sa{sv}}}") { writer in
                    writer.dictionary("{oa{sa{sv}}}") { paths in
                        for (objectPath, object) in objects {
                            paths.entry { entry in
                                entry.objectPath(objectPath)
                                entry.dictionary("{sa{sv}}") { interfaces in
                                    for interface in object.interfaces() {
                                        interfaces.entry { pair in
                                            pair.string(interface.name)
                                            tree.writePropertyDictionary(interface, for: call, to: &pair)
                                        }
                                    }
                                }
                            }
                        }
                    }
                })
            },
        ], signals: [
            SignalDescription("InterfacesAdded", [("object_path", .objectPath), ("interfaces_and_properties", .dictionary(key: .string, value: .dictionary(key: .string, value: .variant)))]),
            SignalDescription("InterfacesRemoved", [("object_path", .objectPath), ("interfaces", .array(.string))]),
        ])
    }
}

extension ObjectTree {
    /// Peer and Introspectable for every node, Properties where an object is exported,
    /// ObjectManager where registered.
    func standardInterfaces(for path: String, exported: Bool) -> [InterfaceDescription] {
        var list = [standard.peer, standard.introspectable]
        if exported { list.append(standard.properties) }
        if isObjectManager(path) { list.append(standard.objectManager) }
        return list
    }
}

extension DBusValue {
    /// The payload of one `v` layer: a value of type `v` keeps its inner variant.
    public var unwrappingVariantOnce: DBusValue {
        if case .variant(let inner) = self { return inner }
        return self
    }
}
