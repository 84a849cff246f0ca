import CDBus

/// Peer, Introspectable, Properties and ObjectManager, described once per tree like any other
/// interface; their handlers take the object path from the call.
struct StandardInterfaces {
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
            MethodDescription("GetMachineId", out: [("machine_uuid", "s")]) { _ throws(DBusError) in
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
            MethodDescription("Introspect", out: [("xml_data", "s")]) { [unowned tree] call in
                .reply([.string(Introspection.xml(interfaces: tree.allInterfaces(at: call.path), children: tree.childNames(of: call.path)))])
            },
        ])
    }

    private static func properties(_ tree: ObjectTree) -> InterfaceDescription {
        func find(_ call: MethodCall, _ tree: ObjectTree) throws(DBusError) -> InterfaceDescription {
            let name = call.arguments[0].stringValue ?? ""
            guard let interface = tree.interface(named: name, at: call.path, object: tree.object(at: call.path)) else {
                throw .unknownInterface("No such interface '\(name)' at object path '\(call.path)'")
            }
            return interface
        }
        func property(_ call: MethodCall, _ tree: ObjectTree) throws(DBusError) -> PropertyDescription {
            let name = call.arguments[1].stringValue ?? ""
            if call.arguments[0].stringValue?.isEmpty ?? true {
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
        return InterfaceDescription("org.freedesktop.DBus.Properties", methods: [
            MethodDescription("Get", in: [("interface_name", "s"), ("property_name", "s")], out: [("value", "v")]) { [unowned tree] call throws(DBusError) in
                let property = try property(call, tree)
                guard property.access != .write else {
                    throw DBusError(name: DBusError.Name.accessDenied, message: "Property '\(property.name)' is write-only")
                }
                try property.authorizeRead?(call)
                return .reply([.variant(try property.get())])
            },
            MethodDescription("Set", in: [("interface_name", "s"), ("property_name", "s"), ("value", "v")]) { [unowned tree] call throws(DBusError) in
                let property = try property(call, tree)
                guard let set = property.set else {
                    throw .propertyReadOnly("Property '\(property.name)' is not writable")
                }
                try set(call.arguments[2].unwrappingVariantOnce, call)
                return .reply([])
            },
            MethodDescription("GetAll", in: [("interface_name", "s")], out: [("props", "a{sv}")]) { [unowned tree] call throws(DBusError) in
                if call.arguments[0].stringValue?.isEmpty ?? true {
                    // An empty name means every interface, as GDBus and sd-bus treat it.
                    // A name two interfaces share (a command's state) is listed once, as a
                    // dictionary must: the first interface's value.
                    var entries: [DictionaryEntry] = []
                    var seen: Set<String> = []
                    for interface in tree.allInterfaces(at: call.path) {
                        guard case .dictionary(_, _, let items) = tree.propertyDictionary(interface, for: call) else { continue }
                        for item in items where seen.insert(item.key.stringValue ?? "").inserted { entries.append(item) }
                    }
                    return .reply([.dictionary(key: .string, value: .variant, entries)])
                }
                return .reply([tree.propertyDictionary(try find(call, tree), for: call)])
            },
        ], signals: [
            SignalDescription("PropertiesChanged", [("interface_name", "s"), ("changed_properties", "a{sv}"), ("invalidated_properties", "as")]),
        ])
    }

    private static func objectManager(_ tree: ObjectTree) -> InterfaceDescription {
        InterfaceDescription("org.freedesktop.DBus.ObjectManager", methods: [
            MethodDescription("GetManagedObjects", out: [("objpath_interfaces_and_properties", "a{oa{sa{sv}}}")]) { [unowned tree] call in
                let entries = tree.managedObjects(below: call.path).map { objectPath, object in
                    DictionaryEntry(.objectPath(objectPath), .dictionary(key: .string, value: .dictionary(key: .string, value: .variant),
                        object.interfaces().map { DictionaryEntry(.string($0.name), tree.propertyDictionary($0, for: call)) }))
                }
                return .reply([.dictionary(key: .objectPath, value: .dictionary(key: .string, value: .dictionary(key: .string, value: .variant)), entries)])
            },
        ], signals: [
            SignalDescription("InterfacesAdded", [("object_path", "o"), ("interfaces_and_properties", "a{sa{sv}}")]),
            SignalDescription("InterfacesRemoved", [("object_path", "o"), ("interfaces", "as")]),
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
