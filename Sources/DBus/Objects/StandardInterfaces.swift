import CDBus

extension ObjectTree {
    /// Peer, Introspectable and Properties for every node, ObjectManager where registered.
    func standardInterfaces(for path: String, exported: Bool) -> [InterfaceDescription] {
        var list = [peer(), introspectable(path)]
        if exported { list.append(properties(path)) }
        if isObjectManager(path) { list.append(objectManager(path)) }
        return list
    }

    private func peer() -> InterfaceDescription {
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

    private func introspectable(_ path: String) -> InterfaceDescription {
        InterfaceDescription("org.freedesktop.DBus.Introspectable", methods: [
            MethodDescription("Introspect", out: [("xml_data", "s")]) { [unowned self] _ in
                .reply([.string(Introspection.xml(interfaces: allInterfaces(at: path), children: childNames(of: path)))])
            },
        ])
    }

    private func properties(_ path: String) -> InterfaceDescription {
        func find(_ interfaceName: String, _ tree: ObjectTree) throws(DBusError) -> InterfaceDescription {
            guard let interface = tree.allInterfaces(at: path).first(where: { $0.name == interfaceName }) else {
                throw .unknownInterface("No such interface '\(interfaceName)' at object path '\(path)'")
            }
            return interface
        }
        func property(_ call: MethodCall, _ tree: ObjectTree) throws(DBusError) -> PropertyDescription {
            let interface = try find(call.arguments[0].stringValue ?? "", tree)
            let name = call.arguments[1].stringValue ?? ""
            guard let property = interface.properties.lookup(name) else {
                throw .unknownProperty("No such property '\(name)' on interface '\(interface.name)' at object path '\(path)'")
            }
            return property
        }
        return InterfaceDescription("org.freedesktop.DBus.Properties", methods: [
            MethodDescription("Get", in: [("interface_name", "s"), ("property_name", "s")], out: [("value", "v")]) { [unowned self] call throws(DBusError) in
                let property = try property(call, self)
                guard property.access != .write else {
                    throw DBusError(name: DBusError.Name.accessDenied, message: "Property '\(property.name)' is write-only")
                }
                return .reply([.variant(try property.get())])
            },
            MethodDescription("Set", in: [("interface_name", "s"), ("property_name", "s"), ("value", "v")]) { [unowned self] call throws(DBusError) in
                let property = try property(call, self)
                guard let set = property.set else {
                    throw .propertyReadOnly("Property '\(property.name)' is not writable")
                }
                let value = call.arguments[2].unwrappingVariantOnce
                try set(value, call)
                return .reply([])
            },
            MethodDescription("GetAll", in: [("interface_name", "s")], out: [("props", "a{sv}")]) { [unowned self] call throws(DBusError) in
                let name = call.arguments[0].stringValue ?? ""
                if name.isEmpty {
                    // An empty name means every interface, as GDBus and sd-bus treat it.
                    var entries: [DictionaryEntry] = []
                    for interface in allInterfaces(at: path) {
                        if case .dictionary(_, _, let items) = propertyDictionary(interface) { entries += items }
                    }
                    return .reply([.dictionary(key: .string, value: .variant, entries)])
                }
                return .reply([propertyDictionary(try find(name, self))])
            },
        ], signals: [
            SignalDescription("PropertiesChanged", [("interface_name", "s"), ("changed_properties", "a{sv}"), ("invalidated_properties", "as")]),
        ])
    }

    private func objectManager(_ path: String) -> InterfaceDescription {
        InterfaceDescription("org.freedesktop.DBus.ObjectManager", methods: [
            MethodDescription("GetManagedObjects", out: [("objpath_interfaces_and_properties", "a{oa{sa{sv}}}")]) { [unowned self] _ in
                let entries = managedObjects(below: path).map { objectPath, object in
                    DictionaryEntry(.objectPath(objectPath), .dictionary(key: .string, value: .dictionary(key: .string, value: .variant),
                        object.interfaces().map { DictionaryEntry(.string($0.name), propertyDictionary($0)) }))
                }
                return .reply([.dictionary(key: .objectPath, value: .dictionary(key: .string, value: .dictionary(key: .string, value: .variant)), entries)])
            },
        ], signals: [
            SignalDescription("InterfacesAdded", [("object_path", "o"), ("interfaces_and_properties", "a{sa{sv}}")]),
            SignalDescription("InterfacesRemoved", [("object_path", "o"), ("interfaces", "as")]),
        ])
    }
}

extension DBusValue {
    /// The payload of one `v` layer: a value of type `v` keeps its inner variant.
    public var unwrappingVariantOnce: DBusValue {
        if case .variant(let inner) = self { return inner }
        return self
    }
}
